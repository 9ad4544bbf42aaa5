#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/dropout.hpp"
#include "test_util.hpp"

using namespace qkv;

TEST_CASE("dropout: drops a fraction p, scales survivors by 1/(1-p), mask as documented") {
  const double p = 0.3;
  const std::size_t n = 200000;
  Array<float> x = test::random_array<float>({400, 500}, 1, 0.5, 1.5);  // never 0
  Generator gen(42);
  gen.reserve(17);  // a non-zero offset, not on a block of 32
  const std::uint64_t first = 32;  // the mask starts on the next whole block
  Variable<float> y = dropout(Variable<float>(x), p, true, gen);
  CHECK(gen.offset() == first + n);
  std::size_t dropped = 0, mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = y.value().data()[i];
    const bool expect_drop = DropoutDraws(42, p).dropped(first + i);  // the contract in dropout.hpp
    if (v == 0.0f) ++dropped;
    if ((v == 0.0f) != expect_drop) ++mismatches;
    if (v != 0.0f) REQUIRE(double(v) == doctest::Approx(x.data()[i] / (1 - p)).epsilon(1e-6));
  }
  CHECK(mismatches == 0);
  CHECK(double(dropped) / n == doctest::Approx(p).epsilon(0.02));
}

TEST_CASE("dropout draws: the documented formula, P(drop) = p, apply() = dropped() at any offset, no correlation between seeds") {
  // The formula of random.hpp, written out once more.
  const std::uint64_t k = hash64(5, 0x64726F70ull);
  auto formula = [&](std::uint64_t counter) {
    const std::uint64_t g = 16 * (counter / 32) + counter % 16;
    const std::uint32_t lo = std::uint32_t(g), hi = std::uint32_t(g >> 32);
    const std::uint32_t h = fmix32(fmix32(lo ^ std::uint32_t(k)) ^ (hi * 0x9E3779B9u) ^ std::uint32_t(k >> 32));
    return counter % 32 < 16 ? h % 65536 : h / 65536;
  };
  const DropoutDraws d(5, 0.25);
  CHECK(d.threshold() == 16384u);
  for (std::uint64_t c : {0ull, 1ull, 15ull, 16ull, 31ull, 32ull, 12345ull, (1ull << 32) - 1, 1ull << 32,
                          (1ull << 37) - 1, 1ull << 37, (7ull << 40) + 3})
    CHECK(d.dropped(c) == (formula(c) < d.threshold()));
  // Frequencies: 4e6 draws each, 5 standard deviations.
  for (double p : {0.01, 0.1, 0.5, 0.9}) {
    const DropoutDraws draws(11, p);
    std::size_t n = 4000000, dropped = 0;
    for (std::uint64_t c = 0; c < n; ++c) dropped += draws.dropped(c);
    CAPTURE(p);
    CHECK(std::abs(double(dropped) / double(n) - p) < 5 * std::sqrt(p * (1 - p) / double(n)));
  }
  CHECK_FALSE(DropoutDraws(3, 0.0).dropped(0));
  CHECK(DropoutDraws(3, 0.0).threshold() == 0u);
  // The vectorised apply(), against dropped() element by element: every start within a block of
  // 32 and lengths with and without whole blocks, around g's 2^32 boundary (counter 2^37) too.
  std::size_t wrong = 0, checked = 0;
  for (const std::uint64_t base : {0ull, (1ull << 37) - 64})
    for (std::uint64_t off = 0; off < 33; ++off)
      for (const std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(31), std::size_t(32), std::size_t(95), std::size_t(200)}) {
        std::vector<double> in(n, 2.0), out(n, -1.0);
        d.apply(in.data(), out.data(), n, base + off, 4.0);
        for (std::size_t i = 0; i < n; ++i, ++checked) wrong += out[i] != (d.dropped(base + off + i) ? 0.0 : 8.0);
      }
  CHECK(checked > 10000);
  CHECK(wrong == 0);
  // In place (in == out), float.
  std::vector<float> v(1000, 3.0f);
  d.apply(v.data(), v.data(), v.size(), 7, 2.0f);
  for (std::size_t i = 0; i < v.size(); ++i) wrong += v[i] != (d.dropped(7 + i) ? 0.0f : 6.0f);
  CHECK(wrong == 0);
  // Two seeds agree on about p^2 + (1-p)^2 of their decisions, as independent masks would.
  const DropoutDraws a(1, 0.5), b(2, 0.5);
  std::size_t same = 0;
  for (std::uint64_t c = 0; c < 1000000; ++c) same += a.dropped(c) == b.dropped(c);
  CHECK(std::abs(double(same) / 1e6 - 0.5) < 0.0025);
  // Neighbouring elements are not correlated either, nor the two elements one hash decides.
  std::size_t pairs = 0, halves = 0;
  for (std::uint64_t c = 0; c < 1000000; ++c) {
    pairs += a.dropped(c) && a.dropped(c + 1);
    halves += a.dropped(32 * (c / 16) + c % 16) && a.dropped(32 * (c / 16) + c % 16 + 16);
  }
  CHECK(std::abs(double(pairs) / 1e6 - 0.25) < 0.0025);
  CHECK(std::abs(double(halves) / 1e6 - 0.25) < 0.0025);
  // p at the resolution of 2^-16, and just below 1: P(drop) = threshold / 2^16 < 1.
  CHECK(DropoutDraws(3, 0.1).threshold() == 6554u);
  CHECK(DropoutDraws(3, 0.999999).threshold() == 65535u);
}

TEST_CASE("dropout: the mask depends only on the generator state") {
  Array<double> x = full<double>({1000}, 1.0);
  auto mask_of = [&](Generator& g) { return dropout(Variable<double>(x), 0.5, true, g).value(); };
  Generator a(7), b(7), c(8);
  Array<double> ma = mask_of(a), mb = mask_of(b), mc = mask_of(c);
  CHECK(test::bitwise_equal(ma, mb));
  CHECK_FALSE(test::bitwise_equal(ma, mc));
  CHECK_FALSE(test::bitwise_equal(mask_of(a), ma));  // the stream moved on
  Generator d(0);
  d.set_state(7, 0);
  CHECK(test::bitwise_equal(mask_of(d), ma));
}

TEST_CASE("dropout: identity without reserving draws in eval mode or with p = 0") {
  Array<double> x = test::random_array<double>({3, 4}, 2);
  Generator gen(5);
  for (auto [p, training] : {std::pair{0.5, false}, std::pair{0.0, true}}) {
    Variable<double> xv(x, true);
    Variable<double> y = dropout(xv, p, training, gen);
    CHECK(test::bitwise_equal(y.value(), x));
    CHECK(gen.offset() == 0);
    y.backward(full<double>({3, 4}, 2.0));
    CHECK(test::bitwise_equal(xv.grad(), full<double>({3, 4}, 2.0)));
  }
}

TEST_CASE("dropout: gradient is the same mask / (1 - p) - gradcheck") {
  Array<double> x = test::random_array<double>({4, 5}, 3);
  Generator gen(9);
  Variable<double> xv(x, true);
  Variable<double> y = dropout(xv, 0.4, true, gen);
  y.backward(full<double>({4, 5}, 1.0));
  for (std::size_t i = 0; i < 20; ++i)
    CHECK(xv.grad().data()[i] == (y.value().data()[i] == 0.0 ? 0.0 : 1.0 / 0.6));
  test::check_grad(
      [](const std::vector<Variable<double>>& v) {
        Generator g(9);  // reseeded: every evaluation draws the same mask
        return dropout(v[0], 0.4, true, g);
      },
      {x});
}

TEST_CASE("dropout: bitwise identical with 1 and 2 threads") {
  const int saved = num_threads();
  Array<float> x = test::random_array<float>({300, 700}, 4);
  Array<float> y[2], gx[2];
  for (int t : {1, 2}) {
    set_num_threads(t);
    Generator gen(3);
    Variable<float> xv(x, true);
    Variable<float> out = dropout(xv, 0.1, true, gen);
    out.backward(x);
    y[t - 1] = out.value();
    gx[t - 1] = xv.grad();
  }
  set_num_threads(saved);
  CHECK(test::bitwise_equal(y[0], y[1]));
  CHECK(test::bitwise_equal(gx[0], gx[1]));
}

TEST_CASE("dropout: p outside the half-open range 0 to 1 throws ValueError") {
  Variable<float> x(zeros<float>({2}));
  Generator gen;
  CHECK_THROWS_WITH_AS(dropout(x, 1.5, true, gen), doctest::Contains("dropout: probability p must be in [0, 1), got 1.5"), ValueError);
  CHECK_THROWS_AS(dropout(x, -0.1, true, gen), ValueError);
  CHECK_THROWS_AS(dropout(x, 1.0, false, gen), ValueError);
}

namespace {

// Values and input gradients of f(x, y) for a seed, backward with `up` as the upstream gradient.
template <class T, class F>
std::vector<Array<T>> run_fused(F f, const Array<T>& x, const Array<T>& y, const Array<T>& up) {
  Generator gen(21);
  gen.reserve(7);  // an offset off the block grid
  Variable<T> xv(x, true), yv(y, true);
  Variable<T> out = f(xv, yv, gen);
  out.backward(up);
  return {out.value(), xv.grad(), yv.grad(), Array<T>({1}, T(gen.offset()))};
}

}  // namespace

TEST_CASE("dropout_add and gelu_dropout: bit for bit the two ops they fuse, values, gradients and draws") {
  for (int threads : {1, 2}) {
    const int saved = num_threads();
    set_num_threads(threads);
    CAPTURE(threads);
    // 70000 elements: several chunks of 4096 and a partial one.
    Array<float> x = test::random_array<float>({70, 1000}, 1), y = test::random_array<float>({70, 1000}, 2);
    Array<float> up = test::random_array<float>({70, 1000}, 3);
    auto fused_add = [](const Variable<float>& a, const Variable<float>& b, Generator& g) { return dropout_add(a, b, 0.1, true, g); };
    auto plain_add = [](const Variable<float>& a, const Variable<float>& b, Generator& g) { return add(a, dropout(b, 0.1, true, g)); };
    auto f1 = run_fused<float>(fused_add, x, y, up), p1 = run_fused<float>(plain_add, x, y, up);
    for (std::size_t i = 0; i < 4; ++i) CHECK(test::bitwise_equal(f1[i], p1[i]));
    for (GeluApprox approx : {GeluApprox::None, GeluApprox::Tanh}) {
      auto fused_gelu = [approx](const Variable<float>& a, const Variable<float>& b, Generator& g) {
        return add(gelu_dropout(a, approx, 0.3, true, g), b);
      };
      auto plain_gelu = [approx](const Variable<float>& a, const Variable<float>& b, Generator& g) {
        return add(dropout(gelu(a, approx), 0.3, true, g), b);
      };
      auto f2 = run_fused<float>(fused_gelu, x, y, up), p2 = run_fused<float>(plain_gelu, x, y, up);
      for (std::size_t i = 0; i < 4; ++i) CHECK(test::bitwise_equal(f2[i], p2[i]));
      // The mask really drops about p of the hidden units.
      std::size_t zeros = 0;
      for (std::size_t i = 0; i < x.size(); ++i) zeros += f2[1].data()[i] == 0.0f;
      CHECK(double(zeros) / double(x.size()) == doctest::Approx(0.3).epsilon(0.05));
    }
    set_num_threads(saved);
  }
}

TEST_CASE("dropout_add and gelu_dropout: gradcheck, eval identity, shape and p errors") {
  Array<double> x = test::random_array<double>({3, 7}, 4), y = test::random_array<double>({3, 7}, 5);
  test::check_grad(
      [](const std::vector<Variable<double>>& v) {
        Generator g(9);
        return dropout_add(v[0], v[1], 0.4, true, g);
      },
      {x, y});
  test::check_grad(
      [](const std::vector<Variable<double>>& v) {
        Generator g(9);
        return gelu_dropout(v[0], GeluApprox::None, 0.4, true, g);
      },
      {x});
  test::check_grad(
      [](const std::vector<Variable<double>>& v) {
        Generator g(9);
        return gelu_dropout(v[0], GeluApprox::Tanh, 0.4, true, g);
      },
      {x});
  // Not training, or p = 0: add and gelu, no draw reserved.
  Generator gen(5);
  CHECK(test::bitwise_equal(dropout_add(Variable<double>(x), Variable<double>(y), 0.5, false, gen).value(),
                            add(Variable<double>(x), Variable<double>(y)).value()));
  CHECK(test::bitwise_equal(gelu_dropout(Variable<double>(x), GeluApprox::None, 0.0, true, gen).value(),
                            gelu(Variable<double>(x)).value()));
  CHECK(gen.offset() == 0);
  CHECK_THROWS_WITH_AS(dropout_add(Variable<double>(x), Variable<double>(zeros<double>({7, 3})), 0.1, true, gen),
                       "dropout_add: x of shape (3, 7) and y of shape (7, 3) differ (expected the same shape)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(gelu_dropout(Variable<double>(x), GeluApprox::None, 1.0, true, gen),
                       "gelu_dropout: probability p must be in [0, 1), got 1", ValueError);
}
