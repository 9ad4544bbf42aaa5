#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"
#include "test_util.hpp"

using namespace qkv;
using Vars = std::vector<Variable<double>>;

namespace {

// Independent reference for x of shape (A, B, C): sum over the axes flagged in r, long double.
Array<double> naive_sum(const Array<double>& x, bool r0, bool r1, bool r2) {
  const Shape& s = x.shape();
  Shape out{r0 ? 1 : s[0], r1 ? 1 : s[1], r2 ? 1 : s[2]};
  std::vector<long double> acc(numel(out), 0.0L);
  for (std::size_t i = 0; i < s[0]; ++i)
    for (std::size_t j = 0; j < s[1]; ++j)
      for (std::size_t k = 0; k < s[2]; ++k)
        acc[((r0 ? 0 : i) * out[1] + (r1 ? 0 : j)) * out[2] + (r2 ? 0 : k)] += x(i, j, k);
  Array<double> a = Array<double>::from_shape(out);
  for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = double(acc[i]);
  return a;
}

}  // namespace

TEST_CASE("sum and mean: every axis set, keepdims, against a naive loop") {
  Array<double> x = test::random_array<double>({3, 4, 5}, 1);
  for (int mask = 0; mask < 8; ++mask) {
    std::vector<int> axes;
    for (int d = 0; d < 3; ++d)
      if (mask & (1 << d)) axes.push_back(d - (mask == 5 ? 3 : 0));  // some negative axes too
    const bool r0 = mask & 1, r1 = mask & 2, r2 = mask & 4;
    Array<double> want = naive_sum(x, r0 || mask == 0, r1 || mask == 0, r2 || mask == 0);
    const double count = double(x.size()) / double(want.size());
    INFO("mask " << mask);
    for (bool keep : {false, true}) {
      Variable<double> s = sum(Variable<double>(x), axes, keep);
      Variable<double> m = mean(Variable<double>(x), axes, keep);
      Shape expect_shape;
      for (std::size_t d = 0; d < 3; ++d)
        if (keep || want.shape()[d] != 1 || !(mask == 0 || (mask & (1 << d)))) expect_shape.push_back(want.shape()[d]);
      REQUIRE(s.shape() == expect_shape);
      REQUIRE(m.shape() == expect_shape);
      for (std::size_t i = 0; i < want.size(); ++i) {
        CHECK(s.value().data()[i] == doctest::Approx(want.data()[i]).epsilon(1e-12));
        CHECK(m.value().data()[i] == doctest::Approx(want.data()[i] / count).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("sum and mean: gradcheck over each axis, all axes, keepdims") {
  Array<double> x = test::random_array<double>({2, 3, 4}, 2);
  for (std::vector<int> axes : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}})
    for (bool keep : {false, true}) {
      INFO("axes " << axes.size() << " keepdims " << keep);
      test::check_grad([axes, keep](const Vars& v) { return sum(v[0], axes, keep); }, {x});
      test::check_grad([axes, keep](const Vars& v) { return mean(v[0], axes, keep); }, {x});
    }
  // A reduction feeding a broadcast: x - mean(x) over the last axis.
  test::check_grad([](const Vars& v) { return sub(v[0], mean(v[0], {-1}, true)); }, {x});
}

TEST_CASE("max: values, first maximum gets the gradient, gradcheck") {
  Array<double> x = test::random_array<double>({3, 4, 5}, 3);
  for (int axis : {0, 1, 2, -1}) {
    Variable<double> m = max(Variable<double>(x), axis);
    const std::size_t d = std::size_t(axis < 0 ? axis + 3 : axis);
    Shape out = x.shape();
    out.erase(out.begin() + long(d));
    REQUIRE(m.shape() == out);
    CHECK(max(Variable<double>(x), axis, true).shape()[d] == 1);
    for (std::size_t i = 0; i < m.size(); ++i) {
      // Output element i sits at (o, q) in (O, I); walk its slice of x.
      std::size_t I = 1;
      for (std::size_t q = d + 1; q < 3; ++q) I *= x.shape()[q];
      const std::size_t o = i / I, q = i % I;
      double best = -std::numeric_limits<double>::infinity();
      for (std::size_t r = 0; r < x.shape()[d]; ++r) best = std::max(best, x.data()[(o * x.shape()[d] + r) * I + q]);
      CHECK(m.value().data()[i] == best);
    }
    test::check_grad([axis](const Vars& v) { return max(v[0], axis); }, {x});
    test::check_grad([axis](const Vars& v) { return max(v[0], axis, true); }, {x});
  }

  Variable<double> t(from_vector<double>({1, 3, 3, 2, 5, 5, 5, 0}, {2, 4}), true);
  Variable<double> m = max(t, 1);
  CHECK(m.value()(0) == 3.0);
  CHECK(m.value()(1) == 5.0);
  sum(m).backward();
  const std::vector<double> want = {0, 1, 0, 0, 1, 0, 0, 0};
  for (std::size_t i = 0; i < 8; ++i) CHECK(t.grad().data()[i] == want[i]);

  Variable<double> n(from_vector<double>({1, NAN, 2}, {3}));
  CHECK(std::isnan(max(n, 0).item()));
}

TEST_CASE("reductions: errors name the op, the axis and the shape") {
  Variable<float> x(zeros<float>({2, 3}));
  CHECK_THROWS_WITH_AS(sum(x, {2}), doctest::Contains("sum: axis 2 out of range for shape (2, 3)"), ShapeError);
  CHECK_THROWS_WITH_AS(mean(x, {-3}), doctest::Contains("mean: axis -3 out of range for shape (2, 3)"), ShapeError);
  CHECK_THROWS_WITH_AS(sum(x, {1, -1}), doctest::Contains("sum: axis -1 appears twice for shape (2, 3)"), ShapeError);
  CHECK_THROWS_WITH_AS(max(x, 5), doctest::Contains("max: axis 5 out of range for shape (2, 3)"), ShapeError);
  CHECK_THROWS_WITH_AS(max(Variable<float>(zeros<float>({2, 0})), 1), doctest::Contains("max: cannot reduce an empty axis"),
                       ShapeError);
}

TEST_CASE("reductions: float32 forward agrees with float64") {
  Array<double> xd = test::random_array<double>({30, 40, 50}, 4);
  Array<float> xf = cast<float>(xd);
  for (std::vector<int> axes : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {0, 2}}) {
    Variable<float> sf = sum(Variable<float>(xf), axes);
    Variable<double> sd = sum(Variable<double>(xd), axes);
    for (std::size_t i = 0; i < sd.size(); ++i)
      CHECK(double(sf.value().data()[i]) == doctest::Approx(sd.value().data()[i]).epsilon(1e-4));
  }
}

TEST_CASE("reductions and broadcast backward: bitwise identical with 1 and 2 threads") {
  const int saved = num_threads();
  Array<float> x = test::random_array<float>({96, 40, 32}, 5);  // 122880 elements
  Array<float> flat = test::random_array<float>({300000}, 6);
  Array<float> bias = test::random_array<float>({32}, 7);
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<Array<float>> out;
    for (std::vector<int> axes : std::vector<std::vector<int>>{{}, {0}, {1}, {2}, {0, 1}, {0, 2}}) {
      out.push_back(sum(Variable<float>(x), axes).value());
      out.push_back(mean(Variable<float>(x), axes).value());
    }
    out.push_back(sum(Variable<float>(flat)).value());
    for (int axis : {0, 1, 2}) out.push_back(max(Variable<float>(x), axis).value());
    // The (N, C) -> (C) reduction of a bias gradient, and a (B, T, 1) one.
    Variable<float> vx(x, true), vb(bias, true), vs(test::random_array<float>({96, 40, 1}, 8), true);
    sum(mul(add(vx, vb), vs)).backward();
    out.push_back(vb.grad());
    out.push_back(vs.grad());
    out.push_back(vx.grad());
    return out;
  };
  auto one = run(1);
  auto two = run(2);
  set_num_threads(saved);
  REQUIRE(one.size() == two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(test::bitwise_equal(one[i], two[i]));
  }
}
