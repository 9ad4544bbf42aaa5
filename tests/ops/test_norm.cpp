#include <doctest/doctest.h>

#include <cmath>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/norm.hpp"
#include "test_util.hpp"

using namespace qkv;

namespace {

// Naive layer norm over the last dim in long double: biased variance, eps inside the sqrt.
template <class T>
std::vector<double> naive_layer_norm(const Array<T>& x, const Array<double>* gamma, const Array<double>* beta,
                                     double eps) {
  const std::size_t C = x.shape().back(), rows = x.size() / C;
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < rows; ++r) {
    long double mean = 0, var = 0;
    for (std::size_t j = 0; j < C; ++j) mean += x.data()[r * C + j];
    mean /= C;
    for (std::size_t j = 0; j < C; ++j) var += (x.data()[r * C + j] - mean) * (x.data()[r * C + j] - mean);
    var /= C;
    for (std::size_t j = 0; j < C; ++j) {
      long double v = (x.data()[r * C + j] - mean) / std::sqrt(var + eps);
      if (gamma) v *= (*gamma)(j);
      if (beta) v += (*beta)(j);
      y[r * C + j] = double(v);
    }
  }
  return y;
}

}  // namespace

TEST_CASE("layer_norm: forward matches the naive formula, with and without gamma/beta") {
  Array<double> x = test::random_array<double>({2, 3, 7}, 1, -3, 3);
  Array<double> g = test::random_array<double>({7}, 2), b = test::random_array<double>({7}, 3);
  Variable<double> X(x), G(g), Bv(b);
  struct Case { Variable<double> gamma, beta; const Array<double>*pg, *pb; };
  for (const Case& c : {Case{G, Bv, &g, &b}, Case{{}, {}, nullptr, nullptr}, Case{G, {}, &g, nullptr}}) {
    for (double eps : {1e-5, 0.5}) {
      std::vector<double> want = naive_layer_norm(x, c.pg, c.pb, eps);
      Array<double> y = layer_norm(X, c.gamma, c.beta, eps).value();
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(y.data()[i] == doctest::Approx(want[i]).epsilon(1e-13));
    }
  }
  // float32, rows sitting far from 0 (mean 1e4, std 0.6): two passes accumulated in double keep
  // float accuracy (a float mean alone would be off by ~1e-3).
  Array<float> xf = cast<float>(test::random_array<double>({4, 64}, 4, 1e4 - 1, 1e4 + 1));
  std::vector<double> want = naive_layer_norm(xf, nullptr, nullptr, 1e-5);
  Array<float> yf = layer_norm(Variable<float>(xf), Variable<float>(), Variable<float>()).value();
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(std::abs(yf.data()[i] - want[i]) < 1e-5);
}

TEST_CASE("layer_norm: a constant row normalises to 0 (then beta), finite") {
  Array<double> x = full<double>({2, 5}, 3.25);
  Array<double> b = test::random_array<double>({5}, 5);
  Variable<double> X(x, true), Bv(b, true);
  Variable<double> y = layer_norm(X, Variable<double>(), Bv);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t j = 0; j < 5; ++j) CHECK(y.value()(r, j) == b(j));
  y.backward(test::random_array<double>({2, 5}, 6));
  for (double v : X.grad()) CHECK(std::isfinite(v));
}

TEST_CASE("layer_norm: gradcheck for x, gamma and beta") {
  const Array<double> x = test::random_array<double>({2, 3, 5}, 7, -2, 2);
  const Array<double> g = test::random_array<double>({5}, 8, 0.5, 1.5), b = test::random_array<double>({5}, 9);
  test::check_grad([](const std::vector<Variable<double>>& v) { return layer_norm(v[0], v[1], v[2]); }, {x, g, b});
  test::check_grad([](const std::vector<Variable<double>>& v) { return layer_norm(v[0], v[1], v[2], 0.1); }, {x, g, b});
  test::check_grad([](const std::vector<Variable<double>>& v) { return layer_norm(v[0], Variable<double>(), Variable<double>()); }, {x});
  test::check_grad([](const std::vector<Variable<double>>& v) { return layer_norm(v[0], v[1], Variable<double>()); }, {x, g});
  // Gamma and beta alone (x constant).
  test::check_grad([x](const std::vector<Variable<double>>& v) { return layer_norm(Variable<double>(x), v[0], v[1]); }, {g, b});
}

TEST_CASE("layer_norm: forward and every gradient bitwise identical with 1 and 2 threads") {
  const int saved = num_threads();
  Array<float> x = test::random_array<float>({300, 200}, 10, -2, 3);
  Array<float> g = test::random_array<float>({200}, 11), b = test::random_array<float>({200}, 12);
  Array<float> dy = test::random_array<float>({300, 200}, 13);
  Array<float> out[2][4];
  for (int t : {1, 2}) {
    set_num_threads(t);
    Variable<float> X(x, true), G(g, true), Bv(b, true);
    Variable<float> y = layer_norm(X, G, Bv);
    y.backward(dy);
    out[t - 1][0] = y.value();
    out[t - 1][1] = X.grad();
    out[t - 1][2] = G.grad();
    out[t - 1][3] = Bv.grad();
  }
  set_num_threads(saved);
  for (int k = 0; k < 4; ++k) {
    INFO("output " << k);
    CHECK(test::bitwise_equal(out[0][k], out[1][k]));
  }
}

TEST_CASE("layer_norm: errors name the op, the tensor and the shapes") {
  Variable<float> x(zeros<float>({2, 4}));
  CHECK_THROWS_WITH_AS(layer_norm(x, Variable<float>(zeros<float>({3})), Variable<float>()),
                       doctest::Contains("layer_norm: gamma of shape (3) does not fit input of shape (2, 4) (expected (4))"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(layer_norm(x, Variable<float>(), Variable<float>(zeros<float>({4, 1}))),
                       doctest::Contains("layer_norm: beta of shape (4, 1)"), ShapeError);
  CHECK_THROWS_AS(layer_norm(Variable<float>(zeros<float>({})), Variable<float>(), Variable<float>()), ShapeError);
  CHECK_THROWS_WITH_AS(layer_norm(x, Variable<float>(), Variable<float>(), -1.0),
                       doctest::Contains("layer_norm: eps must be >= 0, got -1"), ValueError);
}
