#include "qkv/train/train_step.hpp"

#include <cmath>

#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/model/evaluate.hpp"
#include "qkv/optim/clip.hpp"

namespace qkv::train {

void count_correct(const Array<float>& logits, const IndexArray& targets, double& correct, double& counted) {
  IndexArray pred = model::argmax_last(logits);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets.data()[i] == data::kIgnore) continue;
    ++counted;
    correct += pred.data()[i] == targets.data()[i];
  }
}

StepResult train_step(model::TaskModel& model, const data::Batch& batch, optim::Optimizer<float>& optimizer,
                      const StepOptions& o, dist::DataParallel& dp) {
  StepResult r;
  // k micro-batches of batch/k rows: each forward and backward in turn, the gradients adding up
  // in the parameters; every example scores the same number of tokens, so the mean of the
  // micro-batches' mean losses (each scaled by 1/k) is the batch's mean loss.
  const std::size_t k = std::max<std::size_t>(o.accumulate, 1), rows_per = batch.size() / k;
  double sums[3] = {0, 0, 0};  // loss, correct, counted (this rank)
  Variable<float> whole;       // k == 1: backward comes after the finiteness check
  for (std::size_t m = 0; m < k; ++m) {
    const data::Batch micro = k == 1 ? batch : data::rows(batch, m * rows_per, (m + 1) * rows_per);
    Variable<float> logits = model.logits(micro);
    Variable<float> loss = cross_entropy(logits, micro.targets, data::kIgnore, o.label_smoothing);
    sums[0] += double(loss.item()) / double(k);
    if (o.count_accuracy) count_correct(logits.value(), micro.targets, sums[1], sums[2]);
    if (k == 1)
      whole = loss;
    else
      mul_scalar(loss, 1.0f / float(k)).backward();
  }
  dp.sum(sums, 3);
  r.loss = sums[0] / dp.size(), r.correct = sums[1], r.counted = sums[2];
  if (!std::isfinite(r.loss)) return r.diverged = "loss", r;
  if (whole.defined()) whole.backward();
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
