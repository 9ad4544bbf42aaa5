#include "qkv/train/diagnostics.hpp"

#include "qkv/autograd/tape.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/parallel.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/train/evaluate.hpp"
#include "qkv/train/model.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace qkv::train {

AttentionStats attention_stats(const Array<float>& w) {
  const std::size_t Tk = w.shape().back(), rows = w.size() / Tk;
  double entropy = 0, max_weight = 0;
  std::size_t counted = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* p = w.data() + r * Tk;
    double h = 0, mx = 0, total = 0;
    for (std::size_t j = 0; j < Tk; ++j) {
      total += p[j];
      if (p[j] > 0) h -= p[j] * std::log(double(p[j]));
      mx = std::max(mx, double(p[j]));
    }
    if (total <= 0) continue;  // fully masked row
    entropy += h;
    max_weight += mx;
    ++counted;
  }
  if (counted == 0) return {};
  return {entropy / counted, max_weight / counted};
}

double head_redundancy(const Array<float>& w) {
  const std::size_t B = w.shape()[0], H = w.shape()[1], n = w.size() / (B * H);
  if (H < 2) return std::numeric_limits<double>::quiet_NaN();
  double total = 0;
  std::size_t pairs = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h1 = 0; h1 < H; ++h1)
      for (std::size_t h2 = h1 + 1; h2 < H; ++h2) {
        const float* x = w.data() + (b * H + h1) * n;
        const float* y = w.data() + (b * H + h2) * n;
        double xy = 0, xx = 0, yy = 0;
        for (std::size_t i = 0; i < n; ++i) {
          xy += double(x[i]) * y[i];
          xx += double(x[i]) * x[i];
          yy += double(y[i]) * y[i];
        }
        if (xx > 0 && yy > 0) {
          total += xy / std::sqrt(xx * yy);
          ++pairs;
        }
      }
  return pairs ? total / pairs : std::numeric_limits<double>::quiet_NaN();
}

double score_variance(const Array<float>& q, const Array<float>& k) {
  if (q.dimension() != 4 || k.dimension() != 4 || q.shape()[0] != k.shape()[0] || q.shape()[1] != k.shape()[1] ||
      q.shape()[3] != k.shape()[3])
    throw ShapeError("score_variance: q " + shape_str(q.shape()) + " and k " + shape_str(k.shape()) +
                     " are not (B, H, Tq, D) and (B, H, Tk, D)");
  const std::size_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], Tk = k.shape()[2], D = q.shape()[3];
  // Per (batch, head): the scores S = q k^T (Tq, Tk) as one float GEMM, then their sum and sum of
  // squares in double; the partials are added in (batch, head) order, so any thread count gives
  // the same bits.
  std::vector<double> sums(BH), squares(BH);
  parallel_for(BH, Tq * Tk * D, [&](std::size_t bh) {
    std::vector<float> scores(Tq * Tk);
    kernels::gemm_serial<float>(false, true, Tq, Tk, D, 1.f, q.data() + bh * Tq * D, D, k.data() + bh * Tk * D, D, 0.f,
                                scores.data(), Tk);
    double s = 0, s2 = 0;
    for (float x : scores) s += x, s2 += double(x) * x;
    sums[bh] = s, squares[bh] = s2;
  });
  double sum = 0, sum_sq = 0;
  for (std::size_t bh = 0; bh < BH; ++bh) sum += sums[bh], sum_sq += squares[bh];
  const double n = double(BH * Tq * Tk);
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const double mean = sum / n;
  return std::max(0.0, sum_sq / n - mean * mean);
}

double gradient_norm(const Variable<float>& p) {
  if (!p.has_grad()) return 0;
  double s = 0;
  const float* g = p.grad().data();
  for (std::size_t i = 0, n = p.size(); i < n; ++i) s += double(g[i]) * g[i];
  return std::sqrt(s);
}

std::vector<LayerDiagnostics> attention_diagnostics(TaskModel& model, const data::Batch& eval, std::size_t n) {
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const data::Batch b = rows(eval, 0, std::min(n, eval.inputs.shape()[0]));
  auto cache = nn::run_with_cache(model.module(), [&] { model.logits(b); }, {"*.hook_pattern", "*.hook_q", "*.hook_k"});
  std::vector<LayerDiagnostics> out;
  for (auto& [name, layer] : attention_layers(model)) {
    const Array<float>& w = cache[name + ".hook_pattern"];
    LayerDiagnostics d{name, attention_stats(w), head_redundancy(w)};
    d.qk_var = score_variance(cache[name + ".hook_q"], cache[name + ".hook_k"]);
    out.push_back(d);
  }
  if (was_training) model.module().train();
  return out;
}

}  // namespace qkv::train
