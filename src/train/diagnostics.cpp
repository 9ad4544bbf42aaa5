#include "qkv/train/diagnostics.hpp"

#include "qkv/autograd/tape.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/model/evaluate.hpp"
#include "qkv/model/task_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace qkv::train {

namespace {

// Running sums behind the statistics, so that attention_diagnostics can add up examples a
// micro-batch at a time, in the order one pass over all of them would add them.
struct StatsSums {
  double entropy = 0, max_weight = 0;
  std::size_t rows = 0;
  void add(const Array<float>& w) {
    const std::size_t Tk = w.shape().back(), n = w.size() / Tk;
    for (std::size_t r = 0; r < n; ++r) {
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
      ++rows;
    }
  }
  AttentionStats mean() const { return rows ? AttentionStats{entropy / rows, max_weight / rows} : AttentionStats{}; }
};

struct RedundancySums {
  double total = 0;
  std::size_t pairs = 0;
  void add(const Array<float>& w) {
    const std::size_t B = w.shape()[0], H = w.shape()[1], n = w.size() / (B * H);
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
  }
  double mean() const { return pairs ? total / pairs : std::numeric_limits<double>::quiet_NaN(); }
};

struct ScoreSums {
  double sum = 0, sum_sq = 0;
  std::size_t n = 0;
  void add(const Array<float>& q, const Array<float>& k) {
    if (q.dimension() != 4 || k.dimension() != 4 || q.shape()[0] != k.shape()[0] || q.shape()[1] != k.shape()[1] ||
        q.shape()[3] != k.shape()[3])
      throw ShapeError("score_variance: q " + shape_str(q.shape()) + " and k " + shape_str(k.shape()) +
                       " are not (B, H, Tq, D) and (B, H, Tk, D)");
    const std::size_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], Tk = k.shape()[2], D = q.shape()[3];
    // Per (batch, head): the scores S = q k^T (Tq, Tk) as one float GEMM, then their sum and sum
    // of squares in double; the partials are added in (batch, head) order, so any thread count
    // gives the same bits.
    std::vector<double> sums(BH), squares(BH);
    parallel_for(BH, Tq * Tk * D, [&](std::size_t bh) {
      std::vector<float> scores(Tq * Tk);
      kernels::gemm_serial<float>(false, true, Tq, Tk, D, 1.f, q.data() + bh * Tq * D, D, k.data() + bh * Tk * D, D,
                                  0.f, scores.data(), Tk);
      double s = 0, s2 = 0;
      for (float x : scores) s += x, s2 += double(x) * x;
      sums[bh] = s, squares[bh] = s2;
    });
    for (std::size_t bh = 0; bh < BH; ++bh) sum += sums[bh], sum_sq += squares[bh];
    n += BH * Tq * Tk;
  }
  double variance() const {
    if (n == 0) return std::numeric_limits<double>::quiet_NaN();
    const double mean = sum / double(n);
    return std::max(0.0, sum_sq / double(n) - mean * mean);
  }
};

}  // namespace

AttentionStats attention_stats(const Array<float>& w) {
  StatsSums s;
  s.add(w);
  return s.mean();
}

double head_redundancy(const Array<float>& w) {
  RedundancySums s;
  s.add(w);
  return s.mean();
}

double score_variance(const Array<float>& q, const Array<float>& k) {
  ScoreSums s;
  s.add(q, k);
  return s.variance();
}

double gradient_norm(const Variable<float>& p) {
  if (!p.has_grad()) return 0;
  double s = 0;
  const float* g = p.grad().data();
  for (std::size_t i = 0, n = p.size(); i < n; ++i) s += double(g[i]) * g[i];
  return std::sqrt(s);
}

std::vector<LayerDiagnostics> attention_diagnostics(model::TaskModel& model, const data::Batch& eval, std::size_t n,
                                                    std::size_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const auto layers = model::attention_layers(model);
  struct Sums {
    StatsSums stats;
    RedundancySums redundancy;
    ScoreSums scores;
  };
  std::vector<Sums> sums(layers.size());
  n = std::min(n, eval.inputs.shape()[0]);
  batch_size = std::max<std::size_t>(batch_size, 1);
  for (std::size_t lo = 0; lo < n; lo += batch_size) {
    const data::Batch b = data::rows(eval, lo, std::min(n, lo + batch_size));
    auto cache = nn::run_with_cache(model.module(), [&] { model.logits(b); }, {"*.hook_pattern", "*.hook_q", "*.hook_k"});
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const std::string& name = layers[i].first;
      sums[i].stats.add(cache[name + ".hook_pattern"]);
      sums[i].redundancy.add(cache[name + ".hook_pattern"]);
      sums[i].scores.add(cache[name + ".hook_q"], cache[name + ".hook_k"]);
    }
  }
  std::vector<LayerDiagnostics> out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    LayerDiagnostics d{layers[i].first, sums[i].stats.mean(), sums[i].redundancy.mean()};
    d.qk_var = sums[i].scores.variance();
    out.push_back(d);
  }
  if (was_training) model.module().train();
  return out;
}

}  // namespace qkv::train
