#pragma once
// The qkv subcommands, free of CLI11 (which is expensive to compile): main.cpp parses, these run.
// Each returns the process exit status: 0 ok, 1 runtime/file error, 2 bad config or arguments,
// 3 diverged, 4 ranks out of sync, 130 interrupted.

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::app {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume, out;
  int threads = 0;
  bool quiet = false;
  std::int64_t stop_after = 0;
};
int train(const TrainArgs& args);

int eval(const std::string& checkpoint, const std::vector<std::string>& overrides, int threads);
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
  int threads = 0;
};
/// Continue a prompt with a decoder-only checkpoint: the prompt and the continuation on stdout
/// as they come, tokens/s on stderr.
int generate(const GenerateArgs& args);

struct SweepArgs {
  std::string file;
  std::vector<std::string> overrides;
  std::string out;
  int jobs = 1;
  int threads = 0;
  bool dry_run = false;
};
int sweep(const SweepArgs& args);

}  // namespace qkv::app
