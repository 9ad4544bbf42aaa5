#pragma once
/// @file
/// Activation patching of attention heads, as TransformerLens defines it (its "head output, all
/// positions" patch; Wang et al. 2022, Heimersheim & Nanda 2024): run a clean and a corrupted
/// input of the same length; then for each attention layer l and head h run the corrupted input
/// again with that head's output z_h (hook_z (1, H, Tq, Dv), every query position) replaced by the
/// clean run's, and measure the logit difference of the answer at one position p,
///
///   m = logits[p, answer] - logits[p, wrong]          (model::TaskModel::logits: (1, T, classes))
///   restored(l, h) = (m_patched(l, h) - m_corrupt) / (m_clean - m_corrupt)
///
/// 1: patching the head alone moves the whole difference between the runs back to the clean
/// answer; 0: the head carries none of it (negative: it pushes toward the wrong answer). The runs
/// are in eval mode without recording; the model is unchanged afterwards. 2 + L*H forward passes.

#include <optional>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

/// Where and what to measure; each default is stated with the field.
struct PatchingOptions {
  /// p; default: the first mask token of the clean input for masked models (Task::mask_token),
  /// else the last position (a decoder's next token).
  std::optional<std::size_t> position;
  /// Class ids; default: the clean run's most likely class at p (answer) and the corrupted run's
  /// (wrong). ValueError when they are the same: the metric would be 0 in every run.
  std::optional<Index> answer, wrong;
};

/// One head patched from the clean run into the corrupted one.
struct HeadPatch {
  double logit_diff = 0;  ///< m_patched(l, h)
  double restored = 0;    ///< (m_patched - m_corrupt) / (m_clean - m_corrupt); NaN when m_clean == m_corrupt
  double p_answer = 0;    ///< softmax(logits[p])[answer] of the patched run
  double p_wrong = 0;     ///< softmax(logits[p])[wrong] of the patched run
};

struct PatchingResult {
  std::vector<std::string> layers;  ///< attention layers' dotted names, model order
  std::size_t position = 0;         ///< p
  Index answer = 0, wrong = 0;      ///< class ids
  double clean_diff = 0, corrupt_diff = 0;        ///< m_clean, m_corrupt
  double clean_p_answer = 0, corrupt_p_answer = 0;  ///< softmax(logits[p])[answer] in each run
  std::vector<std::vector<HeadPatch>> heads;      ///< [layer][head]
};

/// Patch every head of every attention layer from `clean` into `corrupt` (one row each, inputs
/// (1, T) of the same T; seq2seq: the decoder inputs too). ValueError, naming what differs and
/// what was expected, for rows of different lengths or more than one row, a position past the
/// logits' T, an answer or wrong class outside [0, classes), or answer == wrong.
PatchingResult patch_heads(model::TaskModel& model, const data::Task& task, const data::Batch& clean,
                           const data::Batch& corrupt, const PatchingOptions& options = {});

/// The table `qkv patch` prints: the metric of both runs, then per layer (rows) and head
/// (columns) the share restored. Classes are named by the task's token_label ("[MASK]" for the
/// mask token).
std::string format_patching(const PatchingResult& r, const data::Task& task);
/// Every number as one JSON object: {"position", "answer", "wrong", "answer_token",
/// "wrong_token", "clean", "corrupt", "clean_p_answer", "corrupt_p_answer", "layers": [{"name",
/// "heads": [{"logit_diff", "restored", "p_answer", "p_wrong"}]}]} (NaN as null).
std::string patching_json(const PatchingResult& r, const data::Task& task);

}  // namespace qkv::interp
