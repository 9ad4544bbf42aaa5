#include "qkv/model/answer.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace qkv::model {

double log_sum_exp(const float* z, std::size_t C) {
  const double top = *std::max_element(z, z + C);
  double sum = 0;
  for (std::size_t c = 0; c < C; ++c) sum += std::exp(double(z[c]) - top);
  return top + std::log(sum);
}

double probability(const float* z, Index c, double lse) { return std::exp(double(z[c]) - lse); }

Index argmax(const float* z, std::size_t C) { return Index(std::max_element(z, z + C) - z); }

std::vector<Index> ranked_classes(const float* z, std::size_t C, std::size_t k) {
  std::vector<Index> order(C);
  std::iota(order.begin(), order.end(), Index(0));
  k = std::min(k, C);
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                    [z](Index a, Index b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  order.resize(k);
  return order;
}

std::vector<ClassProbability> top_k(const float* z, std::size_t C, std::size_t k) {
  const double lse = log_sum_exp(z, C);
  std::vector<ClassProbability> out;
  for (Index c : ranked_classes(z, C, k)) out.push_back({c, probability(z, c, lse)});
  return out;
}

Score score_rows(const Array<float>& logits, const IndexArray& targets, const IndexArray& predictions) {
  const std::size_t C = logits.shape().back(), N = logits.size() / C;
  if (targets.size() != N || predictions.size() != N)
    throw ShapeError("score_rows: logits " + shape_str(logits.shape()) + " against targets " + shape_str(targets.shape()) +
                     " and predictions " + shape_str(predictions.shape()));
  Score s;
  for (std::size_t r = 0; r < N; ++r) {
    const Index y = targets.data()[r];
    if (y == data::kIgnore || y < 0 || std::size_t(y) >= C) continue;
    const float* z = logits.data() + r * C;
    s.loss_sum += log_sum_exp(z, C) - double(z[y]);
    ++s.scored;
    s.right += predictions.data()[r] == y;
  }
  return s;
}

std::string class_label(const data::Task& task, Index id) {
  return id == task.mask_token() ? std::string(data::kMaskText) : task.token_label(id);
}

Answer answer(TaskModel& model, const data::Task& task, const data::Batch& row, const Array<float>& logits,
              std::size_t top_k_count) {
  if (logits.dimension() != 3 || logits.shape()[0] != 1)
    throw ShapeError("answer: expected the logits of one row (1, T, C), found " + shape_str(logits.shape()));
  const std::size_t T = logits.shape()[1], C = logits.shape()[2];
  const IndexArray predicted = model.predict(row, logits);
  const Index mask = task.mask_token();
  Answer a;
  a.kind = mask >= 0 ? "fill" : model.decoder() ? "next" : "labels";
  for (std::size_t t = 0; t < T; ++t) {
    const float* z = logits.data() + t * C;
    const double lse = log_sum_exp(z, C);
    AnswerPosition p;
    p.position = t;
    p.prediction = predicted(0, t);
    p.p = probability(z, p.prediction, lse);
    const Index y = row.targets(0, t);
    if (y != data::kIgnore && y >= 0 && std::size_t(y) < C) p.target = y, p.p_target = probability(z, y, lse);
    a.positions.push_back(p);
  }
  if (mask >= 0)
    for (std::size_t t = 0; t < std::min<std::size_t>(T, row.inputs.shape()[1]); ++t)
      if (row.inputs(0, t) == mask) a.fills.emplace_back(t, top_k(logits.data() + t * C, C, top_k_count));
  if (model.decoder()) a.next = top_k(logits.data() + (T - 1) * C, C, top_k_count);
  a.score = score_rows(logits, row.targets, predicted);
  return a;
}

}  // namespace qkv::model
