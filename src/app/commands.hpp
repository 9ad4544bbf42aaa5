#pragma once
// The qkv subcommands, free of CLI11 (which is expensive to compile): main.cpp parses, these run.
// Each returns the process exit status: 0 ok, 1 runtime/file error, 2 bad config or arguments,
// 3 diverged, 4 ranks out of sync, 130 interrupted.

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"

namespace qkv::app {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume, out;
  bool has_out = false;    ///< --out was given (an empty one is an error, not "use run.out")
  bool overwrite = false;  ///< replace a run the directory already holds
  int threads = 0;
  bool quiet = false;
  std::int64_t stop_after = 0;
};
int train(const TrainArgs& args);

int eval(const std::string& checkpoint, const std::vector<std::string>& overrides, int threads, bool with_train = false,
         bool json = false);
int inspect(const std::string& checkpoint);
int attention(const std::string& checkpoint, std::size_t example, const std::string& out);
/// The float64 gradient checks (gradchecks.hpp): a table, or with `list` their names; `only`
/// selects by glob (with * or ?) or substring.
int gradcheck(bool list, const std::string& only);
/// Logits of the first `count` held-out examples (encoder models) as text: a line "N T V", N lines
/// of input tokens, then N*T lines of V logits (%.9g). For checking against other frameworks.
int logits(const std::string& checkpoint, std::size_t count, const std::string& out);
int info();

struct GenerateArgs {
  std::string checkpoint, prompt;
  bool ids = false;             ///< the prompt is token ids, and so is the output
  std::size_t max_tokens = 200;
  double temperature = 1.0;
  std::size_t top_k = 0;        ///< 0: off (the command line refuses an explicit 0)
  double top_p = 1.0;
  std::uint64_t seed = 0;
  bool no_cache = false;
  bool json = false;
  int threads = 0;
};
/// Continue a prompt with a decoder-only checkpoint: the prompt and the continuation on stdout
/// as they come, tokens/s on stderr.
int generate(const GenerateArgs& args);

struct FillArgs {
  std::string checkpoint, text;
  std::string mask_text = data::kMaskText;
  std::size_t top_k = 5;
  bool json = false;
  int threads = 0;
};
/// The most likely fills of every mask in the text, with a masked language model (model/fill.hpp).
int fill(const FillArgs& args);

/// The input an instrument reads: the text (or, with `ids`, token ids) when `has_text`, else
/// held-out example `example` of the validation split.
struct InputChoice {
  bool has_text = false;
  std::string text;
  std::string mask_text = data::kMaskText;  ///< how a mask is spelt in `text` (masked models)
  bool ids = false;
  std::size_t example = 0;
};

struct HeadsArgs {
  std::string checkpoint, csv;
  std::string similarity;  ///< also write every pair of heads' Jensen-Shannon divergence as CSV
  std::size_t examples = 64;
  bool json = false;
  int threads = 0;
};
/// Per layer and head: entropy, largest weight, previous-token / first-token / self / induction /
/// retrieval scores and a label, over held-out (test) examples (interp/head_scores.hpp).
int heads(const HeadsArgs& args);

struct AblateArgs {
  std::string checkpoint;
  bool has_heads = false;
  std::string heads;          ///< "0.1,1.2"
  std::string mode = "zero";  ///< zero | mean
  bool prune = false;
  std::size_t step = 1;       ///< heads removed per pruning step
  std::size_t examples = 0;   ///< test examples evaluated; 0 = the whole test set
  std::string relation;       ///< score only the tokens having this gold relation (grammar); "" = all
  std::string csv, plot;
  bool json = false;
  int threads = 0;
};
/// Test metrics with heads removed: the given heads, each head alone (sorted), or the pruning
/// curve of Michel et al. (2019) (interp/ablation.hpp).
int ablate(const AblateArgs& args);

struct SwapArgs {
  std::string checkpoint;
  std::size_t examples = 0;  ///< test examples probed; 0 = the whole test set
  std::uint64_t seed = 0;    ///< draws the replacement values
  bool json = false;
  int threads = 0;
};
/// The value-swap probe of a recall model (interp/value_swap.hpp): does the prediction follow
/// the value in the context when it is replaced?
int swap(const SwapArgs& args);

struct ExplainArgs {
  std::string checkpoint;
  InputChoice input;
  std::size_t layer = 0, head = 0, query = 0;
  bool has_layer = false, has_head = false;  ///< without them: every layer, every head
  std::size_t dims = 8;  ///< leading dimensions printed
  bool json = false;
  int threads = 0;
};
/// One query of one head, step by step (interp/explain.hpp).
int explain(const ExplainArgs& args);

struct ViewArgs {
  std::string checkpoint, out;
  InputChoice input;
  std::string snapshots;  ///< snapshots.h5 to show (default: the one beside the checkpoint, if any)
  bool no_snapshots = false;
  int threads = 0;
};
/// The studio, saved: one self-contained HTML page of every head on one input (docs/viewer.md).
int view(const ViewArgs& args);
/// The studio's page (share/studio/) as one file: its style and script inline, `data` (the JSON
/// the page reads instead of asking a server, docs/viewer.md) in <script id="qkv-data">, and a
/// Content-Security-Policy that allows no network. `data` must follow the embedding rule.
std::string offline_page(const std::string& data);

struct PatchArgs {
  std::string checkpoint, clean, corrupt;
  bool ids = false;                         ///< --clean, --corrupt, --answer and --wrong are token ids
  std::string mask_text = data::kMaskText;  ///< how a mask is spelt in the inputs (masked models)
  bool has_position = false;
  std::size_t position = 0;
  std::string answer, wrong;  ///< tokens; "" = the clean / corrupted run's most likely one
  std::string point = "hook_z";
  bool json = false;
  int threads = 0;
};
/// Activation patching (interp/patching.hpp): per layer and head, the share of the logit
/// difference between the clean and the corrupted input that patching the head's output restores.
int patch(const PatchArgs& args);

struct AttributeArgs : PatchArgs {
  std::string method = "eap-ig";  ///< attribution, eap, eap-ig
  std::size_t steps = 5;          ///< EAP-IG's interpolation steps
  bool noise = false;             ///< the noising direction
  std::size_t edges = 12;         ///< edges printed
};
/// Attribution patching, EAP and EAP-IG (interp/attribution.hpp).
int attribute(const AttributeArgs& args);

struct PathArgs : PatchArgs {
  std::string sender;                  ///< LAYER.HEAD
  std::vector<std::string> receivers;  ///< L.H<q|k|v>, L.H.q, logits; none: every later head's inputs and the logits
};
/// Path patching (interp/path_patching.hpp).
int path(const PathArgs& args);

struct LensArgs {
  std::string checkpoint;
  InputChoice input;
  bool has_position = false;
  std::size_t position = 0;
  std::string answer, wrong;
  std::size_t top_k = 3;
  bool json = false;
  int threads = 0;
};
/// The logit lens and direct logit attribution (interp/lens.hpp).
int lens(const LensArgs& args);

struct ServeArgs {
  std::vector<std::string> checkpoints;
  std::string run;                ///< a run directory to follow (metrics.csv, snapshots.h5)
  std::string host = "127.0.0.1";
  int port = 8080;                ///< 0: any free port (printed)
  int threads = 1;
};
/// The studio (docs/studio.md): a local web application over the served checkpoints, until Ctrl-C.
int serve(const ServeArgs& args);

struct CompileArgs {
  std::string program, out;
  double scale = 100;          ///< the attention's softmax scale (CompileOptions::attention_scale)
  std::size_t check = 200000;  ///< inputs checked: the whole domain when it has at most this many
  int threads = 0;
};
/// Compile a rasp program into a checkpoint and its circuit file (compile/compile.hpp), after
/// checking the model against the program's reference interpreter (docs/compile.md).
int compile(const CompileArgs& args);

struct SweepArgs {
  std::string file;
  std::vector<std::string> overrides;
  std::vector<std::uint64_t> seeds;  ///< replace the file's seeds when non-empty
  std::vector<std::string> grid;     ///< "KEY=V1,V2": replace one grid key's values
  std::string out;
  int jobs = 1;
  int threads = 0;
  bool dry_run = false;
};
int sweep(const SweepArgs& args);

}  // namespace qkv::app
