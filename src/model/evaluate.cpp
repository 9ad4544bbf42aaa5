#include "qkv/model/evaluate.hpp"

#include <algorithm>

#include "qkv/autograd/tape.hpp"
#include "qkv/ops/loss.hpp"

namespace qkv::model {

std::size_t eval_batch_size(const config::Config& cfg) {
  return std::max<std::size_t>(cfg.train.batch_size / std::max<std::size_t>(cfg.train.accumulate, 1), 1);
}

EvalMetrics evaluate(TaskModel& model, const data::Batch& eval, std::size_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const std::size_t N = eval.inputs.shape()[0];
  double loss_sum = 0;
  std::size_t counted = 0, correct = 0, seq_correct = 0;
  for (std::size_t lo = 0; lo < N; lo += batch_size) {
    data::Batch b = data::rows(eval, lo, std::min(N, lo + batch_size));
    Variable<float> logits = model.logits(b);
    std::size_t n_scored = 0;
    for (std::size_t i = 0; i < b.targets.size(); ++i) n_scored += b.targets.data()[i] != data::kIgnore;
    loss_sum += double(cross_entropy(logits, b.targets, data::kIgnore).item()) * double(n_scored);
    IndexArray pred = model.predict(b, logits.value());
    const std::size_t T = b.targets.shape()[1];
    for (std::size_t r = 0; r < b.targets.shape()[0]; ++r) {
      bool all = true;
      for (std::size_t t = 0; t < T; ++t) {
        const Index y = b.targets(r, t);
        if (y == data::kIgnore) continue;
        ++counted;
        const bool ok = pred(r, t) == y;
        correct += ok;
        all = all && ok;
      }
      seq_correct += all;
    }
  }
  if (was_training) model.module().train();
  return {counted ? loss_sum / double(counted) : 0.0, counted ? double(correct) / double(counted) : 0.0,
          N ? double(seq_correct) / double(N) : 0.0};
}

}  // namespace qkv::model
