#include "qkv/train/train_step.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/model/evaluate.hpp"
#include "qkv/optim/clip.hpp"

namespace qkv::train {

void count_correct(const Array<float>& logits, const IndexArray& targets, double& correct, double& counted) {
  // The argmax of the scored rows only: a masked LM scores 15% of its positions, and over a large
  // vocabulary the argmax of every row would cost more than the loss.
  const std::size_t V = logits.shape().back();
  if (targets.size() * V != logits.size())
    throw ShapeError("count_correct: logits " + shape_str(logits.shape()) + " do not hold a row of V = " +
                     std::to_string(V) + " for each of the " + std::to_string(targets.size()) + " targets");
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const Index t = targets.data()[i];
    if (t == data::kIgnore) continue;
    const float* row = logits.data() + i * V;
    ++counted;
    correct += Index(std::max_element(row, row + V) - row) == t;
  }
}

StepResult train_step(model::TaskModel& model, const data::Batch& batch, optim::Optimizer<float>& optimizer,
                      const StepOptions& o, dist::DataParallel& dp) {
  StepResult r;
  // k micro-batches of batch/k rows: each forward and backward in turn, the gradients adding up
  // in the parameters. The step's loss is the mean over every scored token of the global batch
  // (all ranks), so micro-batch m of this rank, scoring n_m of the N tokens, enters with weight
  // n_m / N: its backward is scaled by R n_m / N (R ranks; average_gradients divides by R). With
  // equal counts (every task but the masked ones) that is 1/k, and 1 when k = 1.
  const std::size_t k = std::max<std::size_t>(o.accumulate, 1), rows_per = batch.size() / k;
  // The scored tokens of micro-batch m: rows [m rows_per, (m + 1) rows_per) of the targets.
  const std::size_t row = batch.size() ? batch.targets.size() / batch.size() : 0;
  auto scored = [&](std::size_t m) {
    const auto* t = batch.targets.data() + m * rows_per * row;
    double n = 0;
    for (std::size_t i = 0; i < rows_per * row; ++i) n += t[i] != data::kIgnore;
    return n;
  };
  double total = 0;
  for (std::size_t m = 0; m < k; ++m) total += scored(m);
  dp.sum(&total, 1);
  double sums[3] = {0, 0, 0};  // loss x tokens, correct, counted (this rank)
  const kernels::ProductPrecisionGuard precision(o.precision);  // forward and backward
  Variable<float> whole;       // k == 1: backward comes after the finiteness check
  for (std::size_t m = 0; m < k; ++m) {
    data::Batch part;
    const data::Batch& micro = k == 1 ? batch : (part = data::rows(batch, m * rows_per, (m + 1) * rows_per));
    const double n = scored(m);
    const model::ScoredLogits scored_logits = model.scored_logits(micro);
    Variable<float> loss = cross_entropy(scored_logits.logits, scored_logits.targets, data::kIgnore, o.label_smoothing);
    if (n > 0) sums[0] += double(loss.item()) * n;
    if (o.count_accuracy) count_correct(scored_logits.logits.value(), scored_logits.targets, sums[1], sums[2]);
    const double weight = total > 0 ? double(dp.size()) * n / total : 0.0;
    if (k == 1)
      whole = weight == 1.0 ? loss : mul_scalar(loss, float(weight));
    else
      mul_scalar(loss, float(weight)).backward();
  }
  dp.sum(sums, 3);
  r.loss = total > 0 ? sums[0] / total : 0.0, r.correct = sums[1], r.counted = sums[2];
  if (!std::isfinite(r.loss)) return r.diverged = "loss", r;
  if (whole.defined()) whole.backward();
  const std::vector<Variable<float>>& params = model.parameters();
  dp.average_gradients(params);
  if (o.after_backward) o.after_backward();
  thread_local std::vector<double> gains;  // empty unless optimizer.qk_gain is set; its capacity reused
  optimizer.gains_of(params, gains);
  r.grad_norm = o.clip_grad_norm > 0 ? optim::clip_grad_norm(params, o.clip_grad_norm, gains)
                                     : optim::grad_norm(params, gains);
  if (!std::isfinite(r.grad_norm)) return r.diverged = "gradient norm", r;
  optimizer.step();
  optimizer.zero_grad();
  return r;
}

}  // namespace qkv::train
