#pragma once
/// @file
/// Activation patching of attention heads, as TransformerLens defines it (its "head output, all
/// positions" patch; Wang et al. 2022, Heimersheim & Nanda 2024): run a clean and a corrupted
/// input of the same length; then for each attention layer l and head h run the corrupted input
/// again with that head's slice of a hook point (by default its output z_h: hook_z (1, H, Tq, Dv),
/// every query position) replaced by the clean run's, and measure the logit difference of the
/// answer at one position p,
///
///   m = logits[p, answer] - logits[p, wrong]          (model::TaskModel::logits: (1, T, classes))
///   restored(l, h) = (m_patched(l, h) - m_corrupt) / (m_clean - m_corrupt)
///
/// 1: patching the head alone moves the whole difference between the runs back to the clean
/// answer; 0: the head carries none of it (negative: it pushes toward the wrong answer). The runs
/// are in eval mode without recording; the model is unchanged afterwards. 2 + L*H forward passes.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/model/input.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

/// Where and what to measure; each default is stated with the field.
struct PatchingOptions {
  /// p; default (one rule for every front end): the first mask token of the clean input; when it
  /// has none, the first of the corrupted input; when neither has one, the last position (a
  /// decoder's next token).
  std::optional<std::size_t> position;
  /// Class ids; default: the clean run's most likely class at p (answer) and the corrupted run's
  /// (wrong). A field error when they are the same: the metric would be 0 in every run.
  std::optional<Index> answer, wrong;
  /// The hook point patched, per head: "hook_z" (default), "hook_q", "hook_k", "hook_v",
  /// "hook_pattern" (any point with the head on axis 1).
  std::string point = "hook_z";
  /// A metric of the logits (1, T, classes) to use instead of the logit difference (Python's
  /// metric=); then answer, wrong and the probabilities are not used (p_answer, p_wrong NaN).
  std::function<double(const Array<float>& logits)> metric;
};

/// Where and what a metric of two runs reads (patching's rule, PatchingOptions): the position p and
/// the answer and wrong classes, from the runs' logits (1, T, classes). Field errors as patch_heads.
struct MetricTarget {
  std::size_t position = 0;
  Index answer = 0, wrong = 0;
};
MetricTarget metric_target(const data::Task& task, const data::Batch& clean, const data::Batch& corrupt,
                           const Array<float>& clean_logits, const Array<float>& corrupt_logits,
                           const PatchingOptions& options);
/// The clean and corrupted rows of a request's inputs and its options (answer, wrong, position),
/// as patch() reads them; notes say how each input was read. Field errors "clean.*", "corrupt.*",
/// "answer", "wrong", "corrupt" (rows that do not line up).
struct PatchInputs {
  model::InputRow clean, corrupt;
  PatchingOptions options;
};
PatchInputs patch_inputs(const model::LoadedModel& model, const model::InputRequest& clean,
                         const model::InputRequest& corrupt, const std::optional<std::size_t>& position,
                         const std::optional<std::string>& answer, const std::optional<std::string>& wrong, bool ids);

/// The first lines of every two-run instrument's text: the metric (the logit difference of answer
/// and wrong at `position`, or "a custom metric") and its value in the clean and corrupted runs.
std::string format_metric(const data::Task& task, std::size_t position, Index answer, Index wrong, bool custom,
                          double clean, double corrupt);

/// One head patched from the clean run into the corrupted one.
struct HeadPatch {
  double logit_diff = 0;  ///< m_patched(l, h)
  double restored = 0;    ///< (m_patched - m_corrupt) / (m_clean - m_corrupt); NaN when m_clean == m_corrupt
  double p_answer = 0;    ///< softmax(logits[p])[answer] of the patched run
  double p_wrong = 0;     ///< softmax(logits[p])[wrong] of the patched run
};

struct PatchingResult {
  std::vector<std::string> clean_tokens, corrupt_tokens;  ///< the rows' token labels
  std::string clean_note, corrupt_note;  ///< how each input was read when not as asked (model::InputRow::note)
  std::string point = "hook_z";
  bool custom_metric = false;
  std::vector<std::string> layers;  ///< attention layers' dotted names, model order
  std::size_t position = 0;         ///< p
  Index answer = 0, wrong = 0;      ///< class ids
  double clean_diff = 0, corrupt_diff = 0;        ///< m_clean, m_corrupt
  double clean_p_answer = 0, corrupt_p_answer = 0;  ///< softmax(logits[p])[answer] in each run
  std::vector<std::vector<HeadPatch>> heads;      ///< [layer][head]
};

/// Patch every head of every attention layer from `clean` into `corrupt` (one row each, inputs
/// (1, T) of the same T; seq2seq: the decoder inputs too). Field errors naming what differs and
/// what was expected: "corrupt" for rows of different lengths or more than one row, "position"
/// past the logits' T, "answer" / "wrong" outside [0, classes) or equal, "point" unknown.
PatchingResult patch_heads(model::TaskModel& model, const data::Task& task, const data::Batch& clean,
                           const data::Batch& corrupt, const PatchingOptions& options = {});

/// `qkv patch`, the studio and Python's qkv.patch.
struct PatchRequest {
  model::InputRequest clean, corrupt;
  std::optional<std::size_t> position;
  /// Tokens: text the task's tokenizer reads as exactly one token, or with `ids` (or a task
  /// without a tokenizer) a class id written as a number. Absent: the defaults of PatchingOptions.
  std::optional<std::string> answer, wrong;
  bool ids = false;
  std::string point = "hook_z";
  std::function<double(const Array<float>& logits)> metric;  ///< PatchingOptions::metric
};
/// Field errors: "clean.*", "corrupt.*", and patch_heads's.
PatchingResult patch(model::LoadedModel& model, const PatchRequest& request);

/// The table `qkv patch` prints: the metric of both runs, then per layer (rows) and head
/// (columns) the share restored. Classes are named by the task's token_label ("[MASK]" for the
/// mask token).
std::string format_patching(const PatchingResult& r, const data::Task& task);
/// Every number as one JSON object: {"point", "metric" ("logit_diff" or "custom"), "position",
/// "answer", "wrong", "answer_token", "wrong_token", "clean", "corrupt", "clean_p_answer",
/// "corrupt_p_answer", "layers": [{"name", "heads": [{"logit_diff", "restored", "p_answer",
/// "p_wrong"}]}]} (NaN as null; "logit_diff" holds the custom metric when there is one).
std::string patching_json(const PatchingResult& r, const data::Task& task);

}  // namespace qkv::interp
