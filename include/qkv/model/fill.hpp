#pragma once
/// @file
/// Filling masks with a masked language model (objective masked): at every mask token of a row,
/// the model's distribution over the vocabulary, p = softmax(logits at that position).

#include <cstddef>
#include <utility>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::model {

/// The fills of one masked position.
struct Fill {
  std::size_t position = 0;                         ///< in the row
  std::vector<std::pair<Index, double>> top;        ///< (token id, probability), most likely first (ties by id)
};

/// For every mask_token() of `row` (1, T), in order, the `k` most likely tokens and their
/// probabilities, in eval mode without recording. ValueError when the task has no mask token
/// (not a masked model) or the row holds none.
std::vector<Fill> fill_masks(TaskModel& model, const data::Task& task, const data::Batch& row, std::size_t k);

}  // namespace qkv::model
