#include <doctest/doctest.h>

#include "qkv/autograd/gradcheck.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/matmul.hpp"
#include "test_util.hpp"

using namespace qkv;

TEST_CASE("matmul: forward matches a naive loop, 2-D and batched") {
  Array<double> a = test::random_array<double>({2, 3, 4}, 1);
  Array<double> b = test::random_array<double>({2, 4, 5}, 2);
  Variable<double> c = matmul(Variable<double>(a), Variable<double>(b));
  REQUIRE(c.shape() == Shape{2, 3, 5});
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        double s = 0;
        for (std::size_t k = 0; k < 4; ++k) s += a(n, i, k) * b(n, k, j);
        CHECK(c.value()(n, i, j) == doctest::Approx(s).epsilon(1e-12));
      }
}

TEST_CASE("matmul: gradcheck 2-D, batched, shared operand on either side") {
  auto f = [](const std::vector<Variable<double>>& x) { return matmul(x[0], x[1]); };
  test::check_grad(f, {test::random_array<double>({3, 4}, 1), test::random_array<double>({4, 2}, 2)});
  test::check_grad(f, {test::random_array<double>({2, 3, 4}, 1), test::random_array<double>({2, 4, 2}, 2)});
  test::check_grad(f, {test::random_array<double>({2, 2, 3, 4}, 1), test::random_array<double>({4, 2}, 2)});
  test::check_grad(f, {test::random_array<double>({3, 4}, 1), test::random_array<double>({2, 4, 2}, 2)});
}

TEST_CASE("matmul: an input used twice gets the sum of both gradients") {
  auto f = [](const std::vector<Variable<double>>& x) { return matmul(x[0], x[0]); };
  test::check_grad(f, {test::random_array<double>({3, 3}, 4)});
}

TEST_CASE("linear: gradcheck with and without bias") {
  test::check_grad([](const std::vector<Variable<double>>& x) { return linear(x[0], x[1], x[2]); },
                   {test::random_array<double>({2, 3, 4}, 1), test::random_array<double>({5, 4}, 2),
                    test::random_array<double>({5}, 3)});
  test::check_grad([](const std::vector<Variable<double>>& x) { return linear(x[0], x[1]); },
                   {test::random_array<double>({3, 4}, 1), test::random_array<double>({2, 4}, 2)});
}

TEST_CASE("linear: gradients add in place, for an input of three layers and over two backward calls") {
  // The q, k and v projections share their input: the second and third dx are added into the
  // first by the GEMM itself (accumulate_grad_into, beta 1).
  test::check_grad(
      [](const std::vector<Variable<double>>& x) {
        return add(add(linear(x[0], x[1]), linear(x[0], x[2], x[4])), linear(x[0], x[3]));
      },
      {test::random_array<double>({2, 3, 4}, 1), test::random_array<double>({5, 4}, 2),
       test::random_array<double>({5, 4}, 3), test::random_array<double>({5, 4}, 4),
       test::random_array<double>({5}, 5)});
  // Without zero_grad, a second backward adds the same gradients again: exactly twice the first.
  Variable<double> x(test::random_array<double>({6, 4}, 6), true), w(test::random_array<double>({3, 4}, 7), true);
  const Array<double> g = test::random_array<double>({6, 3}, 8);
  linear(x, w).backward(g);
  const Array<double> gx1 = x.grad(), gw1 = w.grad();
  linear(x, w).backward(g);
  CHECK(x.grad() == gx1 * 2.0);
  CHECK(w.grad() == gw1 * 2.0);
}

TEST_CASE("matmul: shape errors name the op and both shapes") {
  Variable<float> a(zeros<float>({2, 3})), b(zeros<float>({4, 5}));
  CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("matmul: cannot multiply shapes (2, 3) and (4, 5)"), ShapeError);
  Variable<float> c(zeros<float>({2, 3, 4})), d(zeros<float>({3, 4, 5}));
  CHECK_THROWS_WITH_AS(matmul(c, d), doctest::Contains("(2, 3, 4) and (3, 4, 5)"), ShapeError);
  CHECK_THROWS_AS(linear(a, Variable<float>(zeros<float>({3, 4}))), ShapeError);
}
