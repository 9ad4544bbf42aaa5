#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/softmax.hpp"
#include "test_util.hpp"

using namespace qkv;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// Naive softmax / log-softmax along `axis` of a row-major array, in long double, with the
// textbook formula exp(x_i - max) / sum exp(x_j - max).
template <class T>
std::vector<double> naive(const Array<T>& x, std::size_t axis, bool log) {
  const Shape& s = x.shape();
  std::size_t outer = 1, n = s[axis], inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<double> y(x.size());
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inner; ++i) {
      auto at = [&](std::size_t k) { return o * n * inner + k * inner + i; };
      long double m = -inf;
      for (std::size_t k = 0; k < n; ++k) m = std::max<long double>(m, x.data()[at(k)]);
      long double z = 0;
      for (std::size_t k = 0; k < n; ++k) z += std::exp((long double)x.data()[at(k)] - m);
      for (std::size_t k = 0; k < n; ++k) {
        long double v = (long double)x.data()[at(k)] - m;
        y[at(k)] = double(log ? v - std::log(z) : std::exp(v) / z);
      }
    }
  return y;
}

template <class T>
void check_close(const Array<T>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    if (std::isinf(want[i])) {
      CHECK(got.data()[i] == want[i]);
    } else {
      CHECK(std::abs(double(got.data()[i]) - want[i]) <= tol * (1 + std::abs(want[i])));
    }
  }
}

bool all_finite(const Array<double>& a) {
  for (double v : a)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

TEST_CASE("softmax: forward matches the naive formula on every axis, float64 and float32") {
  // 37 and 1100 are not multiples of any SIMD width; 1100 > 1024 crosses log_softmax's chunking.
  for (Shape shape : {Shape{2, 3, 37}, Shape{3, 1100}, Shape{2, 5, 3, 4}}) {
    Array<double> xd = test::random_array<double>(shape, 7, -5, 5);
    Array<float> xf = cast<float>(xd);
    for (int axis = 0; axis < int(shape.size()); ++axis) {
      INFO("shape " << shape_str(shape) << " axis " << axis);
      check_close(softmax(Variable<double>(xd), axis).value(), naive(xd, axis, false), 1e-14);
      check_close(log_softmax(Variable<double>(xd), axis).value(), naive(xd, axis, true), 1e-14);
      check_close(softmax(Variable<float>(xf), axis).value(), naive(xf, axis, false), 2e-6);
      check_close(log_softmax(Variable<float>(xf), axis).value(), naive(xf, axis, true), 2e-6);
    }
    // Negative axes count from the end.
    CHECK(test::bitwise_equal(softmax(Variable<double>(xd), -1).value(),
                              softmax(Variable<double>(xd), int(shape.size()) - 1).value()));
  }
}

TEST_CASE("softmax: gradcheck on every axis") {
  const Array<double> x = test::random_array<double>({2, 3, 4}, 3, -2, 2);
  for (int axis : {0, 1, 2, -1}) {
    INFO("axis " << axis);
    test::check_grad([axis](const std::vector<Variable<double>>& v) { return softmax(v[0], axis); }, {x});
  }
}

TEST_CASE("log_softmax: gradcheck on every axis") {
  const Array<double> x = test::random_array<double>({2, 3, 4}, 4, -2, 2);
  for (int axis : {0, 1, 2, -2}) {
    INFO("axis " << axis);
    test::check_grad([axis](const std::vector<Variable<double>>& v) { return log_softmax(v[0], axis); }, {x});
  }
}

TEST_CASE("softmax: huge logits do not overflow") {
  Array<double> x = from_vector<double>({1e4, 1e4 - 1, 0, -1e4, 1e4 - 2, 3}, {2, 3});
  for (int axis : {0, 1}) {
    Array<double> y = softmax(Variable<double>(x), axis).value();
    Array<double> ly = log_softmax(Variable<double>(x), axis).value();
    CHECK(all_finite(y));
    CHECK(all_finite(ly));
    check_close(y, naive(x, axis, false), 1e-14);
    check_close(ly, naive(x, axis, true), 1e-14);
  }
  Array<float> xf = from_vector<float>({1e4f, 1e4f - 1, 0}, {1, 3});
  Array<float> yf = softmax(Variable<float>(xf)).value();
  CHECK(yf(0, 0) == doctest::Approx(1 / (1 + std::exp(-1.0))).epsilon(1e-6));
  CHECK(yf(0, 2) == 0.0f);
}

TEST_CASE("softmax: -inf entries get probability 0, gradients stay finite") {
  Array<double> x = from_vector<double>({0.5, -inf, 1.0, -inf, 2.0, 0.0}, {2, 3});
  for (int axis : {0, 1}) {
    INFO("axis " << axis);
    Array<double> y = softmax(Variable<double>(x), axis).value();
    check_close(y, naive(x, axis, false), 1e-14);
    CHECK(y(0, 1) == 0.0);
    CHECK(y(1, 0) == 0.0);
    test::check_grad([axis](const std::vector<Variable<double>>& v) { return softmax(v[0], axis); }, {x});
  }
  // log_softmax: -inf stays -inf; d log p_i / d x_i = 1 - p_i = 1 at a -inf entry.
  Variable<double> xv(x, true);
  Variable<double> ly = log_softmax(xv, 1);
  CHECK(ly.value()(0, 1) == -inf);
  Array<double> g = test::random_array<double>({2, 3}, 9);
  ly.backward(g);
  CHECK(all_finite(xv.grad()));
  const double p00 = std::exp(ly.value()(0, 0)), p02 = std::exp(ly.value()(0, 2));
  const double sum0 = g(0, 0) + g(0, 1) + g(0, 2);
  CHECK(xv.grad()(0, 0) == doctest::Approx(g(0, 0) - p00 * sum0).epsilon(1e-12));
  CHECK(xv.grad()(0, 1) == doctest::Approx(g(0, 1)).epsilon(1e-12));
  CHECK(xv.grad()(0, 2) == doctest::Approx(g(0, 2) - p02 * sum0).epsilon(1e-12));
}

TEST_CASE("softmax: a fully -inf slice gives zeros / -inf and zero gradient (not NaN)") {
  // Row 1 (axis 1) and column 1 (axis 0) are entirely -inf; the others are ordinary.
  for (int axis : {0, 1}) {
    INFO("axis " << axis);
    Array<double> x = test::random_array<double>({3, 4}, 5);
    for (std::size_t k = 0; k < (axis == 1 ? 4u : 3u); ++k) (axis == 1 ? x(1, k) : x(k, 1)) = -inf;
    auto masked = [&](std::size_t i, std::size_t j) { return axis == 1 ? i == 1 : j == 1; };
    Array<double> g = test::random_array<double>({3, 4}, 6);
    for (bool log : {false, true}) {
      INFO("log " << log);
      Variable<double> xv(x, true);
      Variable<double> y = log ? log_softmax(xv, axis) : softmax(xv, axis);
      y.backward(g);
      const std::vector<double> ref = naive(x, std::size_t(axis), log);
      for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 4; ++j) {
          INFO(i << "," << j);
          if (masked(i, j)) {
            CHECK(y.value()(i, j) == (log ? -inf : 0.0));
            CHECK(xv.grad()(i, j) == 0.0);
          } else {
            CHECK(y.value()(i, j) == doctest::Approx(ref[i * 4 + j]).epsilon(1e-13));
            CHECK(std::isfinite(xv.grad()(i, j)));
          }
        }
    }
  }
  // float32 through the SIMD row path, a row longer than one batch.
  Variable<float> xf(full<float>({2, 40}, -std::numeric_limits<float>::infinity()), true);
  Variable<float> yf = softmax(xf);
  yf.backward(full<float>({2, 40}, 1.0f));
  for (std::size_t i = 0; i < 80; ++i) {
    CHECK(yf.value().data()[i] == 0.0f);
    CHECK(xf.grad().data()[i] == 0.0f);
  }
}

TEST_CASE("softmax: bitwise identical results with 1 and 2 threads") {
  const int saved = num_threads();
  Array<float> x = test::random_array<float>({64, 33, 129}, 11, -8, 8);
  Array<float> g = test::random_array<float>({64, 33, 129}, 12);
  for (int axis : {-1, 1, 0}) {
    for (bool log : {false, true}) {
      INFO("axis " << axis << " log " << log);
      Array<float> y[2], gx[2];
      for (int t : {1, 2}) {
        set_num_threads(t);
        Variable<float> xv(x, true);
        Variable<float> y_ = log ? log_softmax(xv, axis) : softmax(xv, axis);
        y_.backward(g);
        y[t - 1] = y_.value();
        gx[t - 1] = xv.grad();
      }
      CHECK(test::bitwise_equal(y[0], y[1]));
      CHECK(test::bitwise_equal(gx[0], gx[1]));
    }
  }
  set_num_threads(saved);
}

TEST_CASE("softmax: axis out of range throws ShapeError naming the op and shape") {
  Variable<float> x(zeros<float>({2, 3}));
  CHECK_THROWS_WITH_AS(softmax(x, 2), doctest::Contains("softmax: axis 2 out of range for shape (2, 3)"), ShapeError);
  CHECK_THROWS_WITH_AS(log_softmax(x, -3), doctest::Contains("log_softmax: axis -3"), ShapeError);
}
