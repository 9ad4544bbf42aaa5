#include "qkv/model/fill.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "qkv/autograd/tape.hpp"

namespace qkv::model {

std::vector<Fill> fill_masks(TaskModel& model, const data::Task& task, const data::Batch& row, std::size_t k) {
  const Index mask = task.mask_token();
  if (mask < 0) throw ValueError("fill: the model was trained on task " + task.name() + " without masks (task.objective: causal)");
  if (row.size() != 1) throw ShapeError("fill_masks: expected one row, found " + shape_str(row.inputs.shape()));
  std::vector<std::size_t> positions;
  for (std::size_t t = 0; t < row.inputs.shape()[1]; ++t)
    if (row.inputs(0, t) == mask) positions.push_back(t);
  if (positions.empty()) throw ValueError("fill: the text holds no mask to fill");
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const Array<float> logits = model.logits(row).value();  // (1, T, V)
  if (was_training) model.module().train();
  const std::size_t V = logits.shape()[2];
  std::vector<Fill> out;
  for (std::size_t t : positions) {
    const float* z = logits.data() + t * V;
    const double top = *std::max_element(z, z + V);
    double sum = 0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - top);
    std::vector<Index> order(V);
    std::iota(order.begin(), order.end(), Index(0));
    const std::size_t n = std::min(k, V);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](Index a, Index b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    Fill f{t, {}};
    for (std::size_t r = 0; r < n; ++r) f.top.emplace_back(order[r], std::exp(double(z[order[r]]) - top) / sum);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace qkv::model
