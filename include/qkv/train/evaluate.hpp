#pragma once
/// @file
/// Held-out evaluation of a model, without recording.

#include <cstddef>

#include "qkv/data/tasks.hpp"
#include "qkv/train/model.hpp"

namespace qkv::train {

/// Held-out metrics: mean cross-entropy over scored positions, token accuracy, and the fraction
/// of examples whose scored positions are all right.
struct EvalMetrics {
  double loss = 0, token_accuracy = 0, sequence_accuracy = 0;
};

/// Evaluate `eval_set` in eval mode without recording, `batch_size` examples at a time (the
/// model's training mode is restored afterwards).
EvalMetrics evaluate(TaskModel& model, const data::Batch& eval_set, std::size_t batch_size);

/// Rows [lo, hi) of a batch.
data::Batch rows(const data::Batch& batch, std::size_t lo, std::size_t hi);

}  // namespace qkv::train
