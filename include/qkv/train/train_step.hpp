#pragma once
/// @file
/// One training step, the whole of it in one function: batch in, forward, loss, backward,
/// gradients averaged over ranks, clipped, and one optimizer update.

#include <cstdint>
#include <functional>

#include "qkv/data/tasks.hpp"
#include "qkv/dist/data_parallel.hpp"
#include "qkv/kernels/bf16.hpp"
#include "qkv/optim/optimizer.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::train {

struct StepOptions {
  double label_smoothing = 0.0;
  double clip_grad_norm = 0.0;   ///< clip the global gradient norm to this; 0: no clipping
  bool count_accuracy = true;    ///< count argmax hits on the batch (StepResult::correct)
  /// Gradient accumulation: the batch in this many micro-batches (which must divide its rows),
  /// one forward and backward each; the update is the one the whole batch would give.
  std::size_t accumulate = 1;
  /// The operands of the products of forward and backward (kernels/bf16.hpp): BFloat16 for
  /// train.precision: bf16 where it pays (train::choose_precision). Everything else stays float32.
  kernels::Precision precision = kernels::Precision::Float32;
  /// Called between backward (gradients averaged) and clipping, e.g. to read raw gradient norms.
  std::function<void()> after_backward;
};

struct StepResult {
  double loss = 0;       ///< mean cross-entropy over the global batch's scored tokens
  double grad_norm = 0;  ///< global gradient norm before clipping
  double correct = 0, counted = 0;  ///< argmax hits and scored tokens over the global batch
  /// "" when the step was taken; otherwise "loss" or "gradient norm": that value was not finite
  /// and no update was made (the parameters are those before the step).
  const char* diverged = "";
};

/// forward -> loss -> backward (per micro-batch) -> average over ranks -> clip -> update -> zero_grad.
/// The loss and its gradient are the mean over every scored token of the global batch: a
/// micro-batch's mean loss is weighted by its share of the scored tokens (masked models score a
/// different number of tokens per example), so any split into ranks and micro-batches gives the
/// same update (to rounding).
StepResult train_step(model::TaskModel& model, const data::Batch& batch, optim::Optimizer<float>& optimizer,
                      const StepOptions& options, dist::DataParallel& dp);

/// argmax hits and scored positions (targets != kIgnore) of (..., V) logits and their targets (...).
void count_correct(const Array<float>& logits, const IndexArray& targets, double& correct, double& counted);

}  // namespace qkv::train
