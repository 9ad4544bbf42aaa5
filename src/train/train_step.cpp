#include "qkv/train/train_step.hpp"

#include <cmath>

#include "qkv/ops/loss.hpp"
#include "qkv/optim/clip.hpp"

namespace qkv::train {

void count_correct(const Array<float>& logits, const IndexArray& targets, double& correct, double& counted) {
  IndexArray pred = argmax_last(logits);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets.data()[i] == data::kIgnore) continue;
    ++counted;
    correct += pred.data()[i] == targets.data()[i];
  }
}

StepResult train_step(TaskModel& model, const data::Batch& batch, optim::Optimizer<float>& optimizer,
                      const StepOptions& o, dist::DataParallel& dp) {
  StepResult r;
  Variable<float> logits = model.logits(batch);
  Variable<float> loss = cross_entropy(logits, batch.targets, data::kIgnore, o.label_smoothing);
  double sums[3] = {loss.item(), 0, 0};  // loss, correct, counted
  if (o.count_accuracy) count_correct(logits.value(), batch.targets, sums[1], sums[2]);
  dp.sum(sums, 3);
  r.loss = sums[0] / dp.size(), r.correct = sums[1], r.counted = sums[2];
  if (!std::isfinite(r.loss)) return r.diverged = "loss", r;
  loss.backward();
  const std::vector<Variable<float>>& params = model.parameters();
  dp.average_gradients(params);
  if (o.after_backward) o.after_backward();
  r.grad_norm = o.clip_grad_norm > 0 ? optim::clip_grad_norm(params, o.clip_grad_norm) : optim::grad_norm(params);
  if (!std::isfinite(r.grad_norm)) return r.diverged = "gradient norm", r;
  optimizer.step();
  optimizer.zero_grad();
  return r;
}

}  // namespace qkv::train
