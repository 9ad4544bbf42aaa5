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
///   offset          the key offset o = argmax_j w[i,j] - i that the most queries i (tokens, not
///   offset_share    padding) put their largest weight on, and that share (self and causal layers):
///                   a head with offset_share >= 0.5 looks a fixed distance away (positional)
///   <relation>      tasks with gold relations (the grammar: "verb->subject", "verb->object", ...;
///                   Batch::relations): over the tokens t that have a partner word p under the
///                   relation, the share whose largest weight falls on a token of p (Clark et al.
///                   2019, "What does BERT look at?"). Its baseline: the best fixed offset, the
///                   largest share over offsets o of those tokens for which t + o is a token of p.
///   <relation>@scored       the same over the scored tokens only (targets != kIgnore: a masked
///                           model's masked tokens, where its loss asks for the partner)
///   <relation>@off_offset   over the scored tokens whose partner is not at t + o_r, o_r the best
///                           fixed offset at the scored tokens of the validation rows: where
///                           position gives the wrong answer (the offset scores 0 there)
///   <relation>@validation   <relation>@scored on the validation rows (for choosing a head on
///                           data that is not the test data)
///
/// Scores that do not apply are NaN (shown as "-").

#include <cmath>
#include <cstdint>
#include <optional>
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

/// Which of the tokens having a relation a role score counts: every one; only the scored ones
/// (`scored`: targets != kIgnore); and with `miss_offset` o only those whose token t + o is not a
/// token of the partner (t + o outside the row counts as a miss).
struct RoleTokens {
  bool scored = false;
  std::optional<long> miss_offset;
};
/// role_scores over the tokens `which` selects (count: how many).
std::vector<double> role_scores(const Array<float>& w, const data::Batch& batch, std::size_t relation, const RoleTokens& which,
                                std::size_t* count = nullptr);

/// Per head of weights w (B, H, Tq, Tk), Tq = Tk: the key offset o = argmax_j w[b,h,i,j] - i that
/// the most query rows take, and their share, over the rows i that are tokens (`words`, (B, T),
/// words(b, i) >= 0, when it has that shape; else every row carrying weight). Ties go to the offset
/// nearest 0, then the negative one. (0, NaN) when no row counts.
std::vector<std::pair<long, double>> dominant_offsets(const Array<float>& w, const IndexArray& words);

/// The best fixed offset for a relation: the offset o whose position t + o is a token of the
/// partner word for the largest share of the tokens that have the relation (what a head that
/// only looks a fixed distance away scores). share NaN when no token has the relation. The
/// scored_* fields are the same at the scored tokens with the offset chosen on validation rows
/// (role_baselines with them; on the batch itself without), its share measured on the batch.
struct OffsetBaseline {
  long offset = 0;
  double share = 0;
  std::size_t count = 0;             ///< tokens that have the relation
  long scored_offset = 0;            ///< o_r: best at the scored tokens of the validation rows
  double validation_share = NAN;     ///< o_r's share there (NaN without validation rows)
  double scored_share = NAN;         ///< o_r's share at the batch's scored tokens
  std::size_t scored_count = 0;      ///< the batch's scored tokens that have the relation
  std::size_t off_offset_count = 0;  ///< ... of which o_r misses the partner (<relation>@off_offset's tokens)
};
OffsetBaseline role_baseline(const data::Batch& batch, std::size_t relation);
/// The best fixed offset over the tokens `which` selects (its miss_offset ignored).
OffsetBaseline role_baseline(const data::Batch& batch, std::size_t relation, const RoleTokens& which);
/// The share of the tokens `which` selects (its miss_offset ignored) for which t + offset is a
/// token of the partner; NaN when none is selected.
double offset_share(const data::Batch& batch, std::size_t relation, long offset, const RoleTokens& which,
                    std::size_t* count = nullptr);

/// The scores of one head (see the file comment); NaN where a score does not apply.
struct HeadScores {
  std::string layer;            ///< the attention layer's dotted name ("blocks.0.attn")
  std::size_t layer_index = 0;  ///< its index among the model's attention layers (model order)
  std::size_t head = 0;
  model::AttentionKind kind = model::AttentionKind::Self;
  double entropy = NAN, max_weight = NAN, previous_token = NAN, first_token = NAN, self = NAN, induction = NAN,
         retrieval = NAN;
  long offset = 0;            ///< dominant_offsets(): the offset most rows' largest weight is at
  double offset_share = NAN;  ///< and their share (NaN for cross-attention layers)
  /// Role scores, one per relation of the task (Task::relation_names(), in order); empty for
  /// tasks without relations; NaN for cross-attention layers and relations no token has.
  std::vector<std::pair<std::string, double>> roles;
  /// The same relations at the scored tokens, where the chosen offset misses, and at the scored
  /// tokens of the validation rows (NaN where not measured).
  std::vector<double> roles_scored, roles_off_offset, roles_validation;
  std::string label;       ///< head_label(): "" when no score passes its threshold
  std::string role_label;  ///< role_label(): "role: verb->object", "positional (previous)", ... or ""
};

/// The score names in table order: the pattern scores, then the relations of `task` (none
/// without a task); and a head's score by name (NaN for a name it has no score for).
std::vector<std::string> score_names(const data::Task* task = nullptr);
/// The columns of `qkv heads`: score_names(task), then offset, offset_share and, per relation R of
/// the task, R@scored, then R@off_offset, then R@validation (each group in relation order).
std::vector<std::string> heads_score_names(const data::Task* task = nullptr);
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
  double positional = 0.5;  ///< role_label(): offset_share from which a head is positional
};
/// `baselines`: the best fixed offset's share per relation (in HeadScores::roles order); no role
/// label without them.
std::string head_label(const HeadScores& s, const LabelThresholds& t = {}, const std::vector<double>& baselines = {});
/// Role or position: "role: R" when roles_scored[R] >= t.role and beats the offset chosen on
/// validation rows (offsets[R].scored_share, measured on the same tokens) by at least
/// t.role_margin (the relation with the largest lead wins); else, when offset_share >=
/// t.positional, "positional (previous)" (offset -1), "positional (next)" (+1), "positional (self)"
/// (0) or "positional (offset +k)" / "(offset -k)"; else "".
std::string role_label(const HeadScores& s, const LabelThresholds& t = {}, const std::vector<OffsetBaseline>& offsets = {});

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
/// With `validation` (rows of the validation split): the offsets of the role label and of
/// <relation>@off_offset are chosen on its first `options.examples` rows, and <relation>@validation
/// is scored on them; without, the offsets are chosen on `heldout` itself.
std::vector<HeadScores> head_scores(model::TaskModel& model, const data::Task& task, const data::Batch& heldout,
                                    const HeadScoreOptions& options = {}, const data::Batch* validation = nullptr);

/// Scores of the heads of the attention weights of one forward pass (layers x (B, H, Tq, Tk),
/// in model order, with their names and kinds), without the induction score: for callers that
/// already hold the weights (snapshots).
struct LayerPattern {
  std::string name;
  model::AttentionKind kind = model::AttentionKind::Self;
  const Array<float>* weights = nullptr;
};
/// `offsets`: role_baselines with validation rows (the chosen offsets of @off_offset and of the
/// role label); without them they are chosen on `batch`. label: the relation of a "role: R"
/// role_label, else the pattern label.
std::vector<HeadScores> pattern_scores(const std::vector<LayerPattern>& layers, const data::Task& task,
                                       const data::Batch& batch, const LabelThresholds& thresholds = {},
                                       const std::vector<OffsetBaseline>* offsets = nullptr);

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

/// The best fixed offset of every relation of `task` over `batch` (Task::relation_names() order);
/// the scored_* fields with the offset chosen at the scored tokens of `validation` (of `batch`
/// without it).
std::vector<OffsetBaseline> role_baselines(const data::Task& task, const data::Batch& batch,
                                           const data::Batch* validation = nullptr);

/// The table `qkv heads` prints: one line per head, "-" for NaN, with its dominant offset, label
/// and role label; with role scores, tables of them (a column per relation): at the scored tokens
/// with the chosen offset's row, where that offset misses, and over every token with the best
/// offset of these rows.
std::string format_head_scores(const std::vector<HeadScores>& scores, const std::vector<OffsetBaseline>& baselines = {});
/// CSV with a header: layer,layer_index,head,kind,<heads_score_names>,label,role_label (NaN as an
/// empty field); with role scores, a last row "baseline": per relation R the best fixed offset's
/// share over every token (R), the chosen offset's at the scored tokens (R@scored, R@off_offset: 0
/// by construction) and on the validation rows (R@validation).
std::string head_scores_csv(const std::vector<HeadScores>& scores, const std::vector<OffsetBaseline>& baselines = {});

/// `qkv heads`, the studio and Python's qkv.heads: every head's scores over held-out examples.
struct HeadsRequest {
  std::size_t examples = 64;  ///< the first this many test examples, >= 1
  bool similarity = false;    ///< also head_divergence over the same examples
};
struct HeadsResult {
  std::size_t examples = 0;               ///< scored (at most the test split's size)
  std::size_t validation_examples = 0;    ///< validation rows choosing the offsets (@off_offset, role labels)
  std::string task;                       ///< the task's name
  bool masked = false;                    ///< scored tokens are the masked ones (else every predicted one)
  std::size_t induction_sequences = 0;    ///< random repeated rows of the induction score; 0: not measured
  std::vector<std::string> score_names;   ///< heads_score_names(&task)
  std::vector<HeadScores> heads;          ///< model order
  std::vector<OffsetBaseline> baselines;  ///< per relation of the task (empty without relations)
  std::vector<Array<double>> similarity;  ///< per attention layer (H, H), when asked
};
/// Field errors: "examples" (0), "data" (loaded without data). The first `examples` test rows are
/// scored; the first `examples` validation rows choose the offsets and give <relation>@validation.
HeadsResult heads(model::LoadedModel& model, const HeadsRequest& request);
/// {"examples", "validation_examples", "task", "masked", "induction_sequences", "score_names",
/// "heads": [{"layer", "layer_index", "head", "kind", <score>: x or null, ..., "label",
/// "role_label"}], "baselines": {relation: {"offset", "share", "count"}}, "offsets": {relation:
/// {"offset", "validation_share", "share", "count", "off_offset_count"}} (the chosen offset at the
/// scored tokens), "similarity": [[[js, ...], ...] per layer] or null}.
std::string to_json(const HeadsResult& result);
/// What `qkv heads` prints for a result: a line saying what was scored (the examples, the scored
/// tokens, the induction score's sequences or why there is none), the tables of
/// format_head_scores, and the labels' rules; `source` names the model (its checkpoint).
std::string format_heads(const HeadsResult& result, const std::string& source);

}  // namespace qkv::interp
