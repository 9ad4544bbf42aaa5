#include "qkv/model/evaluate.hpp"

#include <algorithm>

#include "qkv/autograd/tape.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/answer.hpp"

namespace qkv::model {

std::size_t eval_batch_size(const config::Config& cfg) {
  return std::max<std::size_t>(cfg.train.batch_size / std::max<std::size_t>(cfg.train.accumulate, 1), 1);
}

EvalMetrics evaluate(TaskModel& model, const data::Batch& eval, std::size_t batch_size) {
  NoGradGuard no_grad;
  nn::EvalGuard<float> eval_mode(model.module());
  const std::size_t N = eval.inputs.shape()[0];
  Score score;
  std::size_t seq_correct = 0;
  for (std::size_t lo = 0; lo < N; lo += batch_size) {
    data::Batch b = data::rows(eval, lo, std::min(N, lo + batch_size));
    const Array<float> logits = model.logits(b).value();
    const IndexArray pred = model.predict(b, logits);
    score += score_rows(logits, b.targets, pred);
    const std::size_t T = b.targets.shape()[1];
    for (std::size_t r = 0; r < b.targets.shape()[0]; ++r) {
      bool all = true;
      for (std::size_t t = 0; t < T; ++t) all = all && (b.targets(r, t) == data::kIgnore || pred(r, t) == b.targets(r, t));
      seq_correct += all;
    }
  }
  return {score.loss(), score.accuracy(), N ? double(seq_correct) / double(N) : 0.0};
}

EvalResult evaluate(LoadedModel& l, const EvalRequest& r) {
  if (!l.data) field_error("data", "held-out metrics need the model's data, which was not loaded");
  const std::size_t chunk = r.batch_size ? r.batch_size : eval_batch_size(l.cfg);
  EvalResult out;
  auto add = [&](const char* name, const data::Batch& b) { out.splits.push_back({name, b.size(), evaluate(*l.model, b, chunk)}); };
  if (r.train) {
    const std::size_t fixed = l.cfg.task.train_size, n = fixed ? std::min(fixed, l.cfg.task.eval_size) : l.cfg.task.eval_size;
    add("train", l.data->train_examples(0, n));
  }
  add("validation", l.data->eval_set());
  add("test", l.data->test_set());
  return out;
}

std::string to_json(const EvalResult& r) {
  json::Writer w;
  w.open('{').key("splits").open('[');
  for (auto& s : r.splits)
    w.open('{').member("split", s.split).member("examples", s.examples).member("loss", s.metrics.loss)
        .member("token_accuracy", s.metrics.token_accuracy).member("sequence_accuracy", s.metrics.sequence_accuracy).close('}');
  w.close(']').close('}');
  return w.take();
}

}  // namespace qkv::model
