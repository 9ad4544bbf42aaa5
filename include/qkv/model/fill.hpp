#pragma once
/// @file
/// Filling masks with a masked language model (objective masked): at every mask token of a row,
/// the model's distribution over the vocabulary, p = softmax(logits at that position).

#include <cstddef>
#include <utility>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/model/answer.hpp"
#include "qkv/model/input.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::model {

/// The fills of one masked position.
struct Fill {
  std::size_t position = 0;                         ///< in the row
  std::vector<ClassProbability> top;                ///< most likely first (ties by id): model::top_k
};

/// For every mask_token() of `row` (1, T), in order, the `k` most likely tokens and their
/// probabilities, in eval mode without recording. ValueError when the task has no mask token
/// (not a masked model) or the row holds none.
std::vector<Fill> fill_masks(TaskModel& model, const data::Task& task, const data::Batch& row, std::size_t k);

/// `qkv fill`, the studio and Python's qkv.fill.
struct FillRequest {
  InputRequest input;     ///< text (or ids) holding at least one mask
  std::size_t top_k = 5;  ///< candidates per mask, >= 1
};
struct FillResult {
  std::vector<std::string> tokens;  ///< the row's token labels ("[MASK]" at the masks; padding left out)
  std::vector<Fill> fills;          ///< one per mask, in order
  /// The row with every mask replaced by its most likely token, the labels joined (by spaces for
  /// a word tokenizer, with a space after each word, the last one included).
  std::string most_likely;
};
/// Field errors: "input.*" (input_row's), "input.text" (no mask in the text, "model" for a model
/// without masks), "top_k" (0).
FillResult fill(LoadedModel& model, const FillRequest& request);
/// {"tokens", "fills": [{"position", "top": [{"id", "token", "p"}]}], "most_likely"}.
std::string to_json(const FillResult& result, const data::Task& task);

}  // namespace qkv::model
