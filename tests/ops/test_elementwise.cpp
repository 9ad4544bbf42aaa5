#include <doctest/doctest.h>

#include <cmath>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"
#include "test_util.hpp"

using namespace qkv;
using Vars = std::vector<Variable<double>>;

namespace {

// Flat index into an operand of shape `s` for the output multi-index `idx` (NumPy alignment).
std::size_t bcast_index(const Shape& s, const std::vector<std::size_t>& idx) {
  std::size_t flat = 0;
  const std::size_t lead = idx.size() - s.size();
  for (std::size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
  return flat;
}

// Independent broadcasting reference: out[idx] = f(a[..], b[..]) for every multi-index of `out`.
template <class T, class F>
Array<T> naive_broadcast(const Array<T>& a, const Array<T>& b, const Shape& out, F f) {
  Array<T> r = Array<T>::from_shape(out);
  std::vector<std::size_t> idx(out.size(), 0);
  for (std::size_t i = 0; i < r.size(); ++i) {
    std::size_t rem = i;
    for (std::size_t d = out.size(); d-- > 0;) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    r.data()[i] = f(a.data()[bcast_index(a.shape(), idx)], b.data()[bcast_index(b.shape(), idx)]);
  }
  return r;
}

template <class A, class B>
void check_close(const A& got, const B& want, double tol = 1e-12) {
  REQUIRE(got.shape() == want.shape());
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(double(got.data()[i]) == doctest::Approx(double(want.data()[i])).epsilon(tol));
}

// Gradcheck of sum(w * f(x...)) would hide nothing here: check_grad compares the full Jacobian.
void check_binary_grad(Variable<double> (*op)(const Variable<double>&, const Variable<double>&),
                       const Shape& sa, const Shape& sb, bool positive_b = false) {
  INFO("shapes " << shape_str(sa) << " and " << shape_str(sb));
  test::check_grad([op](const Vars& x) { return op(x[0], x[1]); },
                   {test::random_array<double>(sa, 11),
                    positive_b ? test::random_array<double>(sb, 12, 0.5, 2.0) : test::random_array<double>(sb, 12)});
}

}  // namespace

TEST_CASE("broadcast_shapes: NumPy rules") {
  CHECK(broadcast_shapes({2, 3}, {3}, "t") == Shape{2, 3});
  CHECK(broadcast_shapes({2, 1}, {1, 3}, "t") == Shape{2, 3});
  CHECK(broadcast_shapes({2, 3, 4}, {3, 1}, "t") == Shape{2, 3, 4});
  CHECK(broadcast_shapes({}, {4, 5}, "t") == Shape{4, 5});
  CHECK(broadcast_shapes({0, 1}, {1, 3}, "t") == Shape{0, 3});
  CHECK_THROWS_WITH_AS(broadcast_shapes({2, 3}, {4}, "add"),
                       doctest::Contains("add: shapes (2, 3) and (4) do not broadcast"), ShapeError);
}

TEST_CASE("add/sub/mul/div: forward matches a naive broadcasting loop") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}},        {{3}, {2, 3}},          {{2, 1}, {1, 3}},
      {{2, 3, 4}, {3, 1}}, {{4, 5, 6}, {4, 5, 1}}, {{4, 1, 6}, {1, 5, 1}}, {{2, 3}, {}},
      {{1}, {3, 1, 2}},  {{5, 1, 1, 3}, {1, 4, 2, 1}}};
  for (const auto& [sa, sb] : cases) {
    INFO("shapes " << shape_str(sa) << " and " << shape_str(sb));
    Array<double> a = test::random_array<double>(sa, 1), b = test::random_array<double>(sb, 2, 0.5, 2.0);
    Variable<double> va(a), vb(b);
    const Shape out = broadcast_shapes(sa, sb, "test");
    check_close(add(va, vb).value(), naive_broadcast(a, b, out, [](double x, double y) { return x + y; }));
    check_close(sub(va, vb).value(), naive_broadcast(a, b, out, [](double x, double y) { return x - y; }));
    check_close(mul(va, vb).value(), naive_broadcast(a, b, out, [](double x, double y) { return x * y; }));
    check_close(div(va, vb).value(), naive_broadcast(a, b, out, [](double x, double y) { return x / y; }));
  }
}

TEST_CASE("add/sub/mul/div: gradcheck, equal shapes and broadcasting both ways") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}}, {{2, 1}, {1, 3}}, {{2, 3, 4}, {3, 1}},
      {{3, 1}, {2, 3, 4}}, {{2, 3, 2}, {2, 3, 1}}, {{2, 3}, {}}, {{1, 3, 1}, {2, 1, 2}}};
  for (const auto& [sa, sb] : cases) {
    check_binary_grad(&add<double>, sa, sb);
    check_binary_grad(&sub<double>, sa, sb);
    check_binary_grad(&mul<double>, sa, sb);
    check_binary_grad(&div<double>, sa, sb, true);
  }
}

TEST_CASE("elementwise: an input used twice gets both gradients") {
  Array<double> x = test::random_array<double>({2, 3}, 5);
  test::check_grad([](const Vars& v) { return mul(v[0], v[0]); }, {x});
  test::check_grad([](const Vars& v) { return add(v[0], v[0]); }, {x});
  test::check_grad([](const Vars& v) { return div(v[0], exp(v[0])); }, {x});

  Variable<double> a(x, true);
  sum(mul(a, a)).backward();
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(a.grad().data()[i] == doctest::Approx(2 * x.data()[i]));
  a.zero_grad();
  sum(add(a, a)).backward();
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(a.grad().data()[i] == 2.0);
}

TEST_CASE("unary and scalar ops: forward values") {
  Array<double> x = test::random_array<double>({3, 4}, 3, 0.2, 2.0);
  Variable<double> v(x);
  auto expect = [&](const Variable<double>& y, auto f) {
    Array<double> want = Array<double>::from_shape(x.shape());
    for (std::size_t i = 0; i < x.size(); ++i) want.data()[i] = f(x.data()[i]);
    check_close(y.value(), want);
  };
  expect(neg(v), [](double a) { return -a; });
  expect(add_scalar(v, 1.5), [](double a) { return a + 1.5; });
  expect(mul_scalar(v, -2.0), [](double a) { return a * -2.0; });
  expect(rsub_scalar(v, 3.0), [](double a) { return 3.0 - a; });
  expect(rdiv_scalar(v, 3.0), [](double a) { return 3.0 / a; });
  expect(exp(v), [](double a) { return std::exp(a); });
  expect(log(v), [](double a) { return std::log(a); });
  expect(sqrt(v), [](double a) { return std::sqrt(a); });
  expect(pow(v, 2.5), [](double a) { return std::pow(a, 2.5); });
  expect(tanh(v), [](double a) { return std::tanh(a); });
  expect(v * 2.0 - 1.0, [](double a) { return a * 2 - 1; });
  expect(1.0 / v + 2.0, [](double a) { return 1 / a + 2; });
  expect(v / 4.0, [](double a) { return a / 4; });
  Variable<double> w(from_vector<double>({-2, -0.5, 0, 0.5, 3}, {5}));
  check_close(relu(w).value(), from_vector<double>({0, 0, 0, 0.5, 3}, {5}));
}

TEST_CASE("unary and scalar ops: gradcheck") {
  Array<double> x = test::random_array<double>({2, 3}, 7);
  Array<double> pos = test::random_array<double>({2, 3}, 8, 0.3, 2.0);
  test::check_grad([](const Vars& v) { return neg(v[0]); }, {x});
  test::check_grad([](const Vars& v) { return add_scalar(v[0], 0.7); }, {x});
  test::check_grad([](const Vars& v) { return mul_scalar(v[0], -1.3); }, {x});
  test::check_grad([](const Vars& v) { return rsub_scalar(v[0], 2.0); }, {x});
  test::check_grad([](const Vars& v) { return rdiv_scalar(v[0], 2.0); }, {pos});
  test::check_grad([](const Vars& v) { return exp(v[0]); }, {x});
  test::check_grad([](const Vars& v) { return log(v[0]); }, {pos});
  test::check_grad([](const Vars& v) { return sqrt(v[0]); }, {pos});
  test::check_grad([](const Vars& v) { return pow(v[0], 3.0); }, {x});
  test::check_grad([](const Vars& v) { return pow(v[0], 0.5); }, {pos});
  test::check_grad([](const Vars& v) { return pow(v[0], -1.5); }, {pos});
  test::check_grad([](const Vars& v) { return tanh(v[0]); }, {x});
  test::check_grad([](const Vars& v) { return relu(v[0]); }, {x});  // no element near 0
  test::check_grad([](const Vars& v) { return gelu(v[0]); }, {mul_scalar(Variable<double>(x), 3.0).value()});
  test::check_grad([](const Vars& v) { return gelu(v[0], GeluApprox::Tanh); },
                   {mul_scalar(Variable<double>(x), 3.0).value()});
}

TEST_CASE("pow with exponent 0 has a zero gradient") {
  Variable<double> x(from_vector<double>({0.0, 2.0}, {2}), true);
  sum(pow(x, 0.0)).backward();
  CHECK(x.grad()(0) == 0.0);
  CHECK(x.grad()(1) == 0.0);
}

TEST_CASE("gelu: values and gradients match PyTorch (exact and tanh)") {
  // torch.nn.functional.gelu(x, approximate=...) and the gradient of its sum, float64.
  Array<double> x = from_vector<double>({-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.5}, {7});
  const std::vector<double> exact = {-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
                                     0.34573123063700656,  0.841344746068543,    2.4844758366855597};
  const std::vector<double> exact_grad = {-0.01194564720418392, -0.08331547058768635, 0.13250487534383712, 0.5,
                                          0.8674951246561629,   1.0833154705876864,   1.037611085908145};
  const std::vector<double> approx = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                                      0.34571400982514394,    0.8411919906082768,   2.484915733910001};
  const std::vector<double> approx_grad = {-0.011584166630969648, -0.08296408384578252, 0.13263009646535764, 0.5,
                                           0.8673699035346424,    1.0829640838457826,   1.037951576212666};
  for (GeluApprox mode : {GeluApprox::None, GeluApprox::Tanh}) {
    const auto& want = mode == GeluApprox::None ? exact : approx;
    const auto& want_grad = mode == GeluApprox::None ? exact_grad : approx_grad;
    Variable<double> v(x, true);
    Variable<double> y = gelu(v, mode);
    sum(y).backward();
    for (std::size_t i = 0; i < 7; ++i) {
      CHECK(y.value()(i) == doctest::Approx(want[i]).epsilon(1e-14));
      CHECK(v.grad()(i) == doctest::Approx(want_grad[i]).epsilon(1e-14));
    }
  }
}

TEST_CASE("gelu: float32 values and gradients within 1e-6 of the float64 ones on [-10, 10]") {
  // float32 GELU uses Abramowitz and Stegun's erf (|error| <= 1.5e-7), as PyTorch's vectorised
  // CPU kernel does; float64 uses xsimd's erf to the last bits (the test above).
  const std::size_t n = 20001;
  Array<double> x = Array<double>::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) x(i) = -10.0 + 20.0 * double(i) / double(n - 1);
  Variable<double> vd(x, true);
  Variable<double> yd = gelu(vd);
  sum(yd).backward();
  Variable<float> vf(cast<float>(x), true);
  Variable<float> yf = gelu(vf);
  sum(yf).backward();
  double worst = 0, worst_grad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // Against float64 GELU at the float32 input, so that only the kernel's error is measured.
    const double xf = double(vf.value()(i)), exact = 0.5 * xf * (1 + std::erf(xf / std::sqrt(2.0)));
    const double grad = 0.5 * (1 + std::erf(xf / std::sqrt(2.0))) + xf * std::exp(-0.5 * xf * xf) / std::sqrt(2 * M_PI);
    worst = std::max(worst, std::abs(double(yf.value()(i)) - exact) / std::max(1.0, std::abs(exact)));
    worst_grad = std::max(worst_grad, std::abs(double(vf.grad()(i)) - grad));
  }
  CHECK(worst < 1e-6);
  CHECK(worst_grad < 1e-6);
  CHECK(yd.value()(n - 1) == doctest::Approx(10.0));
}

TEST_CASE("masked_fill: values, broadcast mask, gradient zero where filled") {
  Array<double> x = test::random_array<double>({2, 3, 4}, 9);
  Mask mask = xt::zeros<bool>({3, 4});
  mask(0, 1) = mask(2, 3) = mask(1, 0) = true;
  Variable<double> v(x, true);
  Variable<double> y = masked_fill(v, mask, -1e9);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 4; ++j) CHECK(y.value()(b, i, j) == (mask(i, j) ? -1e9 : x(b, i, j)));
  sum(y).backward();
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 4; ++j) CHECK(v.grad()(b, i, j) == (mask(i, j) ? 0.0 : 1.0));

  Mask col = xt::zeros<bool>({2, 1, 4});
  col(1, 0, 2) = true;
  test::check_grad([col](const Vars& in) { return masked_fill(in[0], col, 0.5); }, {x});
  test::check_grad([mask](const Vars& in) { return masked_fill(in[0], mask, 0.5); }, {x});

  Mask bad = xt::zeros<bool>({2, 4});
  CHECK_THROWS_WITH_AS(masked_fill(v, bad, 0.0), doctest::Contains("masked_fill: shapes (2, 4) and (2, 3, 4)"),
                       ShapeError);
  Mask larger = xt::zeros<bool>({5, 2, 3, 4});
  CHECK_THROWS_WITH_AS(masked_fill(v, larger, 0.0),
                       doctest::Contains("masked_fill: mask of shape (5, 2, 3, 4) does not broadcast to the "
                                         "input's shape (2, 3, 4)"),
                       ShapeError);
}

TEST_CASE("sum_to: reduces broadcast dimensions, rejects shapes that do not broadcast") {
  Array<double> g = test::random_array<double>({2, 3, 4}, 4);
  Array<double> r = sum_to(g, {3, 1});
  REQUIRE(r.shape() == Shape{3, 1});
  for (std::size_t i = 0; i < 3; ++i) {
    double s = 0;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t j = 0; j < 4; ++j) s += g(b, i, j);
    CHECK(r(i, 0) == doctest::Approx(s).epsilon(1e-12));
  }
  Array<double> c = sum_to(g, {4});
  for (std::size_t j = 0; j < 4; ++j) {
    double s = 0;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < 3; ++i) s += g(b, i, j);
    CHECK(c(j) == doctest::Approx(s).epsilon(1e-12));
  }
  CHECK(sum_to(g, {}).shape() == Shape{});
  CHECK(test::bitwise_equal(sum_to(g, {2, 3, 4}), g));
  CHECK_THROWS_WITH_AS(sum_to(g, {3}), doctest::Contains("sum_to: cannot sum a gradient of shape (2, 3, 4) to shape (3)"),
                       ShapeError);
  CHECK_THROWS_AS(sum_to(g, {1, 2, 3, 4, 5}), ShapeError);
}

TEST_CASE("elementwise: shape errors name the op and both shapes") {
  Variable<float> a(zeros<float>({2, 3})), b(zeros<float>({4})), c(zeros<float>({3, 2}));
  CHECK_THROWS_WITH_AS(add(a, b), doctest::Contains("add: shapes (2, 3) and (4) do not broadcast"), ShapeError);
  CHECK_THROWS_WITH_AS(sub(a, c), doctest::Contains("sub: shapes (2, 3) and (3, 2) do not broadcast"), ShapeError);
  CHECK_THROWS_WITH_AS(mul(b, a), doctest::Contains("mul: shapes (4) and (2, 3) do not broadcast"), ShapeError);
  CHECK_THROWS_WITH_AS(div(a, c), doctest::Contains("div: shapes (2, 3) and (3, 2) do not broadcast"), ShapeError);
}

TEST_CASE("elementwise: float32 forward and backward agree with float64") {
  Array<double> xd = test::random_array<double>({4, 5, 6}, 21), bd = test::random_array<double>({5, 1}, 22, 0.5, 1.5);
  auto run = [](auto x, auto b) {
    using T = typename decltype(x)::value_type;
    Variable<T> vx(x, true), vb(b, true);
    Variable<T> y = gelu(div(mul(vx, add_scalar(vb, T(1))), vb)) + tanh(vx) * T(0.5);
    sum(y).backward();
    return std::make_tuple(y.value(), vx.grad(), vb.grad());
  };
  auto [yd, gxd, gbd] = run(xd, bd);
  auto [yf, gxf, gbf] = run(cast<float>(xd), cast<float>(bd));
  check_close(yf, yd, 1e-5);
  check_close(gxf, gxd, 1e-5);
  check_close(gbf, gbd, 1e-4);
}

TEST_CASE("elementwise: bitwise identical results with 1 and 2 threads") {
  const int saved = num_threads();
  Array<float> x = test::random_array<float>({64, 50, 48}, 31);  // 153600 elements
  Array<float> row = test::random_array<float>({48}, 32);
  Array<float> col = test::random_array<float>({64, 50, 1}, 33, 0.5, 1.5);
  Mask mask = xt::zeros<bool>({50, 48});
  for (std::size_t i = 0; i < 50; ++i) mask(i, (i * 7) % 48) = true;
  auto run = [&](int threads) {
    set_num_threads(threads);
    Variable<float> vx(x, true), vr(row, true), vc(col, true);
    Variable<float> y = gelu(masked_fill(div(add(vx, vr), vc), mask, 0.0f)) * vx;
    sum(y).backward();
    return std::make_tuple(y.value(), vx.grad(), vr.grad(), vc.grad());
  };
  auto one = run(1);
  auto two = run(2);
  set_num_threads(saved);
  CHECK(test::bitwise_equal(std::get<0>(one), std::get<0>(two)));
  CHECK(test::bitwise_equal(std::get<1>(one), std::get<1>(two)));
  CHECK(test::bitwise_equal(std::get<2>(one), std::get<2>(two)));
  CHECK(test::bitwise_equal(std::get<3>(one), std::get<3>(two)));
}
