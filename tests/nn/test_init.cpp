#include <doctest/doctest.h>

#include <cmath>

#include "qkv/nn/init.hpp"
#include "test_util.hpp"

using namespace qkv;
namespace init = qkv::nn::init;

namespace {
double mean_of(const Array<double>& a) {
  double s = 0;
  for (double v : a) s += v;
  return s / double(a.size());
}
double max_abs(const Array<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::fabs(v));
  return m;
}
double var_of(const Array<double>& a) {
  const double m = mean_of(a);
  double s = 0;
  for (double v : a) s += (v - m) * (v - m);
  return s / double(a.size());
}
}  // namespace

TEST_CASE("init: fans follow PyTorch's convention") {
  CHECK(init::fans({5, 3}) == std::pair<std::size_t, std::size_t>{3, 5});
  CHECK(init::fans({7}) == std::pair<std::size_t, std::size_t>{7, 7});
  CHECK(init::fans({4, 2, 3, 3}) == std::pair<std::size_t, std::size_t>{18, 36});
  CHECK_THROWS_AS(init::fans({}), ValueError);
}

TEST_CASE("init: xavier_uniform fills U(-b, b) with b = gain sqrt(6 / (fan_in + fan_out))") {
  Generator gen(3);
  Array<double> w = init::xavier_uniform<double>({200, 100}, 2.0, gen);
  const double b = 2.0 * std::sqrt(6.0 / 300.0);
  CHECK(max_abs(w) <= b);
  CHECK(max_abs(w) > 0.99 * b);
  CHECK(std::fabs(mean_of(w)) < 0.02 * b);
  CHECK(var_of(w) == doctest::Approx(b * b / 3).epsilon(0.03));
}

TEST_CASE("init: kaiming_uniform with a = sqrt(5) is PyTorch's Linear bound 1/sqrt(fan_in)") {
  Generator gen(4);
  Array<double> w = init::linear_default<double>({300, 64}, gen);
  const double b = 1.0 / 8.0;
  CHECK(max_abs(w) <= b);
  CHECK(max_abs(w) > 0.99 * b);
  Generator gen2(4);
  Array<double> w0 = init::kaiming_uniform<double>({300, 64}, 0.0, gen2);  // b = sqrt(6 / fan_in)
  CHECK(max_abs(w0) <= std::sqrt(6.0 / 64));
  CHECK(max_abs(w0) > 0.99 * std::sqrt(6.0 / 64));
}

TEST_CASE("init: normal has the requested mean and standard deviation") {
  Generator gen(5);
  Array<double> w = init::normal<double>({20000}, 0.5, 2.0, gen);
  CHECK(mean_of(w) == doctest::Approx(0.5).epsilon(0.1));
  CHECK(std::sqrt(var_of(w)) == doctest::Approx(2.0).epsilon(0.03));
}

TEST_CASE("init: the same seed gives the same values, another seed other values, float matches double") {
  Generator a(9), b(9), c(10), d(9);
  Array<double> x = init::xavier_uniform<double>({4, 5}, 1.0, a);
  Array<double> y = init::xavier_uniform<double>({4, 5}, 1.0, b);
  Array<double> z = init::xavier_uniform<double>({4, 5}, 1.0, c);
  Array<float> f = init::xavier_uniform<float>({4, 5}, 1.0, d);
  CHECK(test::bitwise_equal(x, y));
  CHECK_FALSE(test::bitwise_equal(x, z));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(f.data()[i] == float(x.data()[i]));
}
