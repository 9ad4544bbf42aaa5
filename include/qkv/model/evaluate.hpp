#pragma once
/// @file
/// Held-out evaluation of a model, without recording.

#include <cstddef>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::model {

/// Held-out metrics: mean cross-entropy over scored positions, token accuracy, and the fraction
/// of examples whose scored positions are all right.
struct EvalMetrics {
  double loss = 0, token_accuracy = 0, sequence_accuracy = 0;
};

/// Evaluate `eval_set` in eval mode without recording, `batch_size` examples at a time (the
/// model's training mode is restored afterwards).
EvalMetrics evaluate(TaskModel& model, const data::Batch& eval_set, std::size_t batch_size);

/// How many examples evaluate() takes at a time for a run of `cfg`: its training micro-batch,
/// batch_size / accumulate. The forward pass then has the shapes of the training step's, so its
/// tensors reuse blocks the pool already holds: evaluation adds no memory to a training run (256
/// at a time, the fortunes model kept 570 MB more for its evaluations than for training). `qkv
/// eval` uses the same, so that it scores a checkpoint as the run's metrics.csv did.
std::size_t eval_batch_size(const config::Config& cfg);


}  // namespace qkv::model
