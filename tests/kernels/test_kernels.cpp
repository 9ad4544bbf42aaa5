// The raw kernels on their own, against naive float64 loops: softmax (rows and strided slices),
// layer norm forward and backward, fused attention forward (masks, causal) and backward against
// finite differences of its own forward; each bitwise the same on 1 and 2 threads.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "qkv/kernels/attention.hpp"
#include "qkv/kernels/layer_norm.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/kernels/softmax.hpp"
#include "test_util.hpp"

namespace qkv {
namespace {

std::vector<double> randoms(std::size_t n, std::uint64_t seed, double lo = -2, double hi = 2) {
  Generator g(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = g.uniform(lo, hi);
  return v;
}

// f() on 1 and 2 threads gives the same bits.
void same_on_1_and_2_threads(const std::function<std::vector<double>()>& f) {
  const int saved = num_threads();
  set_num_threads(1);
  const auto a = f();
  set_num_threads(2);
  const auto b = f();
  set_num_threads(saved);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("kernels: softmax over rows and over a strided middle axis match a naive loop") {
  // (outer, n, inner) = (3, 5, 1) rows and (2, 4, 70) strided (more than one 64-column block).
  for (auto [outer, n, inner] : {std::array<std::size_t, 3>{3, 5, 1}, {2, 4, 70}, {2000, 40, 1}}) {
    CAPTURE(outer);
    CAPTURE(n);
    CAPTURE(inner);
    const std::size_t N = outer * n * inner;
    std::vector<double> x = randoms(N, 1, -30, 30), y(N), ly(N);
    x[inner] = -INFINITY;  // a masked entry
    kernels::softmax_forward(y.data(), x.data(), outer, n, inner);
    kernels::log_softmax_forward(ly.data(), x.data(), outer, n, inner);
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < inner; ++i) {
        double m = -INFINITY, s = 0;
        for (std::size_t k = 0; k < n; ++k) m = std::max(m, x[(o * n + k) * inner + i]);
        for (std::size_t k = 0; k < n; ++k) s += std::exp(x[(o * n + k) * inner + i] - m);
        for (std::size_t k = 0; k < n; ++k) {
          const std::size_t at = (o * n + k) * inner + i;
          CHECK(y[at] == doctest::Approx(std::exp(x[at] - m) / s).epsilon(1e-12));
          if (std::isfinite(x[at])) CHECK(ly[at] == doctest::Approx(x[at] - m - std::log(s)).epsilon(1e-12));
        }
      }
    // Backward: dx = y (dy - sum dy y) against the same formula by hand.
    std::vector<double> dy = randoms(N, 2), dx(N);
    kernels::softmax_backward(dx.data(), dy.data(), y.data(), outer, n, inner);
    for (std::size_t o = 0; o < outer; ++o)
      for (std::size_t i = 0; i < inner; ++i) {
        double dot = 0;
        for (std::size_t k = 0; k < n; ++k) dot += dy[(o * n + k) * inner + i] * y[(o * n + k) * inner + i];
        for (std::size_t k = 0; k < n; ++k) {
          const std::size_t at = (o * n + k) * inner + i;
          CHECK(dx[at] == doctest::Approx(y[at] * (dy[at] - dot)).epsilon(1e-10));
        }
      }
    same_on_1_and_2_threads([&] {
      std::vector<double> out(N);
      kernels::softmax_forward(out.data(), x.data(), outer, n, inner);
      return out;
    });
  }
  // A fully masked row: zeros, not NaN.
  std::vector<double> x = {-INFINITY, -INFINITY}, y(2);
  kernels::softmax_forward(y.data(), x.data(), 1, 2, 1);
  CHECK(y[0] == 0.0);
  CHECK(y[1] == 0.0);
}

TEST_CASE("kernels: layer norm forward and backward match the formulas") {
  const std::size_t rows = 70, C = 9;  // more rows than one 32-row partial-sum chunk
  std::vector<double> x = randoms(rows * C, 3), g = randoms(C, 4), b = randoms(C, 5), y(rows * C), mean(rows), rstd(rows);
  kernels::layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), rows, C, 1e-5);
  for (std::size_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (std::size_t j = 0; j < C; ++j) m += x[r * C + j] / C;
    for (std::size_t j = 0; j < C; ++j) v += (x[r * C + j] - m) * (x[r * C + j] - m) / C;
    CHECK(mean[r] == doctest::Approx(m).epsilon(1e-12));
    for (std::size_t j = 0; j < C; ++j)
      CHECK(y[r * C + j] == doctest::Approx((x[r * C + j] - m) / std::sqrt(v + 1e-5) * g[j] + b[j]).epsilon(1e-10));
  }
  // Backward against central differences of sum(dy * y).
  std::vector<double> dy = randoms(rows * C, 6), dx(rows * C), dg(C), db(C);
  kernels::layer_norm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(), rstd.data(), g.data(), rows, C);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& gg, const std::vector<double>& bb) {
    std::vector<double> yy(rows * C), mm(rows), ss(rows);
    kernels::layer_norm_forward(yy.data(), mm.data(), ss.data(), xx.data(), gg.data(), bb.data(), rows, C, 1e-5);
    double s = 0;
    for (std::size_t i = 0; i < yy.size(); ++i) s += dy[i] * yy[i];
    return s;
  };
  const double h = 1e-6;
  for (std::size_t i : {0, 17, 400, 629}) {
    auto xp = x, xm = x;
    xp[i] += h, xm[i] -= h;
    CHECK(dx[i] == doctest::Approx((loss(xp, g, b) - loss(xm, g, b)) / (2 * h)).epsilon(1e-5));
  }
  for (std::size_t j = 0; j < C; ++j) {
    auto gp = g, gm = g, bp = b, bm = b;
    gp[j] += h, gm[j] -= h, bp[j] += h, bm[j] -= h;
    CHECK(dg[j] == doctest::Approx((loss(x, gp, b) - loss(x, gm, b)) / (2 * h)).epsilon(1e-5));
    CHECK(db[j] == doctest::Approx((loss(x, g, bp) - loss(x, g, bm)) / (2 * h)).epsilon(1e-5));
  }
  same_on_1_and_2_threads([&] {
    std::vector<double> out(rows * C + 2 * C);
    kernels::layer_norm_backward(out.data(), out.data() + rows * C, out.data() + rows * C + C, dy.data(), x.data(),
                                 mean.data(), rstd.data(), g.data(), rows, C);
    return out;
  });
}

TEST_CASE("kernels: fused attention forward matches a naive loop with masks and causality, backward its own differences") {
  const std::size_t B = 2, H = 2, Tq = 5, Tk = 70, D = 4, Dv = 3;  // Tk spans more than one key block
  std::vector<double> q = randoms(B * H * Tq * D, 7), k = randoms(B * H * Tk * D, 8), v = randoms(B * H * Tk * Dv, 9);
  bool allowed[5 * 70];
  for (std::size_t i = 0; i < Tq * Tk; ++i) allowed[i] = (i % 7) != 3;
  for (std::size_t j = 0; j < Tk; ++j) allowed[2 * Tk + j] = false;  // query 2 sees nothing
  kernels::AttentionMasks<double> masks;
  masks.allowed = allowed;
  masks.allowed_strides = {0, 0, Tk, 1};
  const double scale = 0.4;
  std::vector<double> out(B * H * Tq * Dv), lse(B * H * Tq), w(B * H * Tq * Tk);
  kernels::attention_forward<double>(out.data(), lse.data(), w.data(), q.data(), k.data(), v.data(), masks, {}, scale, B,
                                     H, Tq, Tk, D, Dv);
  for (std::size_t bh = 0; bh < B * H; ++bh)
    for (std::size_t i = 0; i < Tq; ++i) {
      std::vector<double> s(Tk, -INFINITY);
      double m = -INFINITY;
      for (std::size_t j = 0; j < Tk; ++j) {
        if (!allowed[i * Tk + j]) continue;
        double d = 0;
        for (std::size_t c = 0; c < D; ++c) d += q[(bh * Tq + i) * D + c] * k[(bh * Tk + j) * D + c];
        s[j] = d * scale;
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (std::size_t j = 0; j < Tk; ++j) z += std::isfinite(s[j]) ? std::exp(s[j] - m) : 0.0;
      for (std::size_t c = 0; c < Dv; ++c) {
        double o = 0;
        for (std::size_t j = 0; j < Tk; ++j)
          if (std::isfinite(s[j])) o += std::exp(s[j] - m) / z * v[(bh * Tk + j) * Dv + c];
        CHECK(out[(bh * Tq + i) * Dv + c] == doctest::Approx(i == 2 ? 0.0 : o).epsilon(1e-12));
      }
      if (i != 2) CHECK(w[(bh * Tq + i) * Tk + 1] == doctest::Approx(std::exp(s[1] - m) / z).epsilon(1e-12));
    }
  // Backward: d/dq of sum(g * out), checked against central differences of the forward.
  std::vector<double> g = randoms(out.size(), 10), dq(q.size()), dk(k.size()), dv(v.size());
  kernels::attention_backward<double>(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), out.data(),
                                      lse.data(), masks, {}, scale, B, H, Tq, Tk, D, Dv);
  auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk) {
    std::vector<double> o(out.size()), l(lse.size());
    kernels::attention_forward<double>(o.data(), l.data(), nullptr, qq.data(), kk.data(), v.data(), masks, {}, scale, B, H,
                                       Tq, Tk, D, Dv);
    double s = 0;
    for (std::size_t i = 0; i < o.size(); ++i) s += g[i] * o[i];
    return s;
  };
  const double h = 1e-6;
  for (std::size_t i : {0, 5, 19, 77}) {
    auto qp = q, qm = q;
    qp[i] += h, qm[i] -= h;
    CHECK(dq[i] == doctest::Approx((loss(qp, k) - loss(qm, k)) / (2 * h)).epsilon(1e-5));
  }
  for (std::size_t i : {0, 33, 290, 1000}) {
    auto kp = k, km = k;
    kp[i] += h, km[i] -= h;
    CHECK(dk[i] == doctest::Approx((loss(q, kp) - loss(q, km)) / (2 * h)).epsilon(1e-5).scale(1e-3));
  }
  // Causal: query i sees keys j <= i only.
  masks = {};
  masks.causal = true;
  kernels::attention_forward<double>(out.data(), lse.data(), w.data(), q.data(), k.data(), v.data(), masks, {}, scale, B,
                                     H, Tq, Tk, D, Dv);
  for (std::size_t i = 0; i < Tq; ++i)
    for (std::size_t j = i + 1; j < Tk; ++j) CHECK(w[i * Tk + j] == 0.0);
  same_on_1_and_2_threads([&] {
    std::vector<double> a(dq.size() + dk.size());
    kernels::attention_backward<double>(a.data(), a.data() + dq.size(), nullptr, g.data(), q.data(), k.data(), v.data(),
                                        out.data(), lse.data(), masks, {}, scale, B, H, Tq, Tk, D, Dv);
    return a;
  });
}

TEST_CASE("parallel_for: every index once, serial below the threshold and inside a parallel region") {
  std::vector<int> seen(100000, 0);
  parallel_for(seen.size(), 1, [&](std::size_t i) { ++seen[i]; });
  CHECK(std::count(seen.begin(), seen.end(), 1) == long(seen.size()));
  std::vector<std::size_t> order;
  parallel_for(10, 1, [&](std::size_t i) { order.push_back(i); });  // 10 elements of work: serial, in order
  CHECK(order == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  parallel_for(0, 1, [&](std::size_t) { FAIL("no index to run"); });
}

}  // namespace qkv
