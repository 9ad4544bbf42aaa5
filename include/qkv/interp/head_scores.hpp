#pragma once
/// @file
/// What each attention head does, as numbers: pattern scores over held-out examples and the labels
/// they earn. Every score is a mean over query rows of attention weights w (B, H, Tq, Tk), rows
/// summing to 1, read through the layers' hook_pattern points (docs/instruments.md defines each
/// one with an example):
///
///   entropy         mean_i -sum_j w[i,j] log w[i,j]   (nats; 0 = every row one-hot)
///   max_weight      mean_i max_j w[i,j]
///   previous_token  mean_{i>=1} w[i, i-1]             (self and causal layers)
///   first_token     mean_{i>=1} w[i, 0]               (the "sink"; query 0 is left out: causal
///                                                       attention puts all of it on key 0)
///   self            mean_i w[i, i]                     (self and causal layers)
///   induction       on sequences r r of N random tokens, twice: mean_{i>=N} w[i, i-N+1], the
///                   weight from a token to the token after its previous occurrence (Olsson et
///                   al. 2022; TransformerLens's induction score). Self and causal layers of
///                   models that predict the next token (text, induction, grammar as a causal LM)
///   retrieval       recall tasks (recall, mqar): the share of scored queries whose largest weight
///                   falls on the first earlier occurrence of the query's token (the key) or the
///                   position after it (its value); seq2seq_recall: of the cross-attention layers,
///                   the first occurrence of the decoder's query token in the source
///   <relation>      tasks with gold relations (the grammar: "verb->subject", "verb->object", ...;
///                   Batch::relations): over the tokens t that have a partner word p under the
///                   relation, the share whose largest weight falls on a token of p (Clark et al.
///                   2019, "What does BERT look at?"). Its baseline: the best fixed offset, the
///                   largest share over offsets o of those tokens for which t + o is a token of p.
///
/// Scores that do not apply are NaN (shown as "-").

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/tensor/tensor.hpp"
#include "qkv/model/load.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

/// Per head h of a pattern w (B, H, Tq, Tk): mean over examples b and queries i in [first_query,
/// Tq) with 0 <= i + offset < Tk of w[b, h, i, i + offset]. offset -1 from query 1: the
/// previous-token score; 0: the self score; 1 - N from query N: the induction score on r r.
std::vector<double> diagonal_scores(const Array<float>& w, long offset, std::size_t first_query);
/// Per head: mean over examples and queries i >= first_query of w[b, h, i, key].
std::vector<double> column_scores(const Array<float>& w, std::size_t key, std::size_t first_query);
/// Per head: (entropy, max_weight) means over rows that are not fully masked.
std::vector<std::pair<double, double>> entropy_and_max(const Array<float>& w);
/// Per head: the retrieval accuracy over positions (b, i) with targets(b, i) != kIgnore whose
/// token tokens(b, i) occurred earlier, first at j: the share whose argmax_k w[b, h, i, k] is j
/// or j + 1. NaN when no position qualifies.
std::vector<double> retrieval_scores(const Array<float>& w, const IndexArray& tokens, const IndexArray& targets);
/// The same with the keys in their own sequence key_tokens (B, Tk): the first j with
/// key_tokens(b, j) == query_tokens(b, i), among j < i when `earlier` (self and causal layers), among
/// all Tk keys otherwise (cross-attention: the keys are the source).
std::vector<double> retrieval_scores(const Array<float>& w, const IndexArray& query_tokens, const IndexArray& key_tokens,
                                     const IndexArray& targets, bool earlier);

/// Per head: the role score of relation `relation` (an index into Batch::relations) of weights w
/// (B, H, Tq, Tk) over `batch` (its words (B, T) and relations (B, R, T); Tq = Tk = T), with the
/// number of tokens that have the relation. NaN when none has it.
std::vector<double> role_scores(const Array<float>& w, const data::Batch& batch, std::size_t relation, std::size_t* count = nullptr);

/// The best fixed offset for a relation: the offset o whose position t + o is a token of the
/// partner word for the largest share of the tokens that have the relation (what a head that
/// only looks a fixed distance away scores). share NaN when no token has the relation.
struct OffsetBaseline {
  long offset = 0;
  double share = 0;
  std::size_t count = 0;  ///< tokens that have the relation
};
OffsetBaseline role_baseline(const data::Batch& batch, std::size_t relation);

/// The scores of one head (see the file comment); NaN where a score does not apply.
struct HeadScores {
  std::string layer;            ///< the attention layer's dotted name ("blocks.0.attn")
  std::size_t layer_index = 0;  ///< its index among the model's attention layers (model order)
  std::size_t head = 0;
  model::AttentionKind kind = model::AttentionKind::Self;
  double entropy = NAN, max_weight = NAN, previous_token = NAN, first_token = NAN, self = NAN, induction = NAN,
         retrieval = NAN;
  /// Role scores, one per relation of the task (Task::relation_names(), in order); empty for
  /// tasks without relations; NaN for cross-attention layers and relations no token has.
  std::vector<std::pair<std::string, double>> roles;
  std::string label;  ///< head_label(): "" when no score passes its threshold
};

/// The score names in table order: the pattern scores, then the relations of `task` (none
/// without a task); and a head's score by name (NaN for a name it has no score for).
std::vector<std::string> score_names(const data::Task* task = nullptr);
double score(const HeadScores& s, const std::string& name);

/// Label thresholds: a head is labelled by a relation (e.g. "verb->object") when its role score is
/// at least `role` and beats the relation's best fixed offset by at least `role_margin` (the
/// relation with the largest lead wins); otherwise by the pattern score that passes its
/// threshold by the largest margin (score / threshold): "previous-token" (previous_token >=
/// 0.5), "first-token" (first_token >= 0.5), "self" (self >= 0.5), "induction" (induction >=
/// 0.4), "retrieval" (retrieval >= 0.5). Chance levels sit far below: a uniform causal head
/// scores about 2/T.
struct LabelThresholds {
  double previous_token = 0.5, first_token = 0.5, self = 0.5, induction = 0.4, retrieval = 0.5;
  double role = 0.5, role_margin = 0.1;
};
/// `baselines`: the best fixed offset's share per relation (in HeadScores::roles order); no role
/// label without them.
std::string head_label(const HeadScores& s, const LabelThresholds& t = {}, const std::vector<double>& baselines = {});

struct HeadScoreOptions {
  std::size_t examples = 64;   ///< held-out examples scored (the first ones of the split given)
  std::size_t batch_size = 64; ///< examples per forward pass
  std::uint64_t seed = 0;      ///< the random sequences of the induction score
  LabelThresholds thresholds;
};

/// The random repeated sequences of the induction score: `count` rows of r r, r of N = T / 2
/// tokens drawn uniformly from [0, vocab) by Generator(hash64(seed, row)); the last token is
/// repeated once more when T is odd. Shape (count, T).
IndexArray repeated_random_tokens(std::size_t count, std::size_t T, std::size_t vocab, std::uint64_t seed);

/// Per attention layer (model order), per head: the induction score on `count` rows of
/// repeated_random_tokens(count, task.input_length(), task.input_vocab(), seed), run in eval mode
/// without recording; NaN for cross-attention layers. Empty for tasks that do not predict the next
/// token (labelling, masked, encoder-decoder) and for T < 4.
std::vector<std::vector<double>> induction_scores(model::TaskModel& model, const data::Task& task, std::size_t count,
                                                  std::uint64_t seed, std::size_t batch_size = 64);

/// Scores of every head of every attention layer (model order, heads in order) on the first
/// `options.examples` rows of `heldout`, in eval mode without recording (the model's mode is
/// restored). The induction score runs `model` on repeated_random_tokens of the task's input
/// length (encoder and decoder models; NaN for encoder-decoder models and for T < 4); retrieval
/// applies when task.name() is "recall" or "mqar".
std::vector<HeadScores> head_scores(model::TaskModel& model, const data::Task& task, const data::Batch& heldout,
                                    const HeadScoreOptions& options = {});

/// Scores of the heads of the attention weights of one forward pass (layers x (B, H, Tq, Tk),
/// in model order, with their names and kinds), without the induction score: for callers that
/// already hold the weights (snapshots).
struct LayerPattern {
  std::string name;
  model::AttentionKind kind = model::AttentionKind::Self;
  const Array<float>* weights = nullptr;
};
std::vector<HeadScores> pattern_scores(const std::vector<LayerPattern>& layers, const data::Task& task,
                                       const data::Batch& batch, const LabelThresholds& thresholds = {});

/// How alike two heads attend: per attention layer (model order), an (H, H) matrix of the mean
/// Jensen-Shannon divergence, in bits (0: the same rows; 1: disjoint), between heads a and b's
/// weight rows on the same queries, JS(p, q) = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2,
/// averaged over the first `examples` rows of `heldout` and their query rows that carry weight.
/// In eval mode without recording.
std::vector<Array<double>> head_divergence(model::TaskModel& model, const data::Batch& heldout, std::size_t examples,
                                           std::size_t batch_size = 64);
/// The same for one layer's weights w (B, H, Tq, Tk): (H, H).
Array<double> pattern_divergence(const Array<float>& w);
/// CSV with a header: layer,layer_index,head_a,head_b,js_bits (every pair a < b of each layer).
std::string head_divergence_csv(model::TaskModel& model, const std::vector<Array<double>>& divergence);

/// The best fixed offset of every relation of `task` over `batch` (Task::relation_names() order).
std::vector<OffsetBaseline> role_baselines(const data::Task& task, const data::Batch& batch);

/// The table `qkv heads` prints: one line per head, "-" for NaN; with role scores, a second table
/// of them (a column per relation) and its baseline row.
std::string format_head_scores(const std::vector<HeadScores>& scores, const std::vector<OffsetBaseline>& baselines = {});
/// CSV with a header: layer,layer_index,head,kind,<score names>,label (NaN as an empty field); with
/// role scores, a last row "baseline" holding the best fixed offset's share of each relation.
std::string head_scores_csv(const std::vector<HeadScores>& scores, const std::vector<OffsetBaseline>& baselines = {});

/// `qkv heads`, the studio and Python's qkv.heads: every head's scores over held-out examples.
struct HeadsRequest {
  std::size_t examples = 64;  ///< the first this many test examples, >= 1
  bool similarity = false;    ///< also head_divergence over the same examples
};
struct HeadsResult {
  std::size_t examples = 0;               ///< scored (at most the test split's size)
  std::vector<std::string> score_names;   ///< score_names(&task)
  std::vector<HeadScores> heads;          ///< model order
  std::vector<OffsetBaseline> baselines;  ///< per relation of the task (empty without relations)
  std::vector<Array<double>> similarity;  ///< per attention layer (H, H), when asked
};
/// Field errors: "examples" (0), "data" (loaded without data).
HeadsResult heads(model::LoadedModel& model, const HeadsRequest& request);
/// {"examples", "score_names", "heads": [{"layer", "layer_index", "head", "kind", <score>: x or
/// null, ..., "label"}], "baselines": {relation: {"offset", "share", "count"}}, "similarity":
/// [[[js, ...], ...] per layer] or null}.
std::string to_json(const HeadsResult& result);

}  // namespace qkv::interp
