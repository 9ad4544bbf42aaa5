#pragma once
/// @file
/// Held-out evaluation of a model, without recording.

#include <cstddef>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/model/load.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::model {

/// Held-out metrics: the mean cross-entropy over every scored position of the set (model::score_rows:
/// lse(z) - z_y in double, summed over all scored tokens and divided by their count, not a mean of
/// batch means), token accuracy over the same positions (the prediction is TaskModel::predict), and
/// the fraction of examples whose scored positions are all right.
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

/// `qkv eval`, the studio and Python's qkv.evaluate: held-out metrics of a loaded model.
struct EvalRequest {
  /// Also the start of the training stream (with task.train_size > 0, the fixed set training
  /// cycled through): its first min(train_size or eval_size, eval_size) examples.
  bool train = false;
  std::size_t batch_size = 0;  ///< examples per forward pass; 0: eval_batch_size(cfg)
};
struct SplitMetrics {
  std::string split;  ///< "train", "validation", "test"
  std::size_t examples = 0;
  EvalMetrics metrics;
};
struct EvalResult {
  std::vector<SplitMetrics> splits;  ///< [train,] validation, test
};
/// Field error "data" when the model was loaded without its data.
EvalResult evaluate(LoadedModel& model, const EvalRequest& request);
/// {"splits": [{"split", "examples", "loss", "token_accuracy", "sequence_accuracy"}]}.
std::string to_json(const EvalResult& result);


}  // namespace qkv::model
