#include <doctest/doctest.h>

#include "qkv/autograd/gradcheck.hpp"
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

TEST_CASE("matmul: shape errors name the op and both shapes") {
  Variable<float> a(zeros<float>({2, 3})), b(zeros<float>({4, 5}));
  CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("matmul: cannot multiply shapes (2, 3) and (4, 5)"), ShapeError);
  Variable<float> c(zeros<float>({2, 3, 4})), d(zeros<float>({3, 4, 5}));
  CHECK_THROWS_WITH_AS(matmul(c, d), doctest::Contains("(2, 3, 4) and (3, 4, 5)"), ShapeError);
  CHECK_THROWS_AS(linear(a, Variable<float>(zeros<float>({3, 4}))), ShapeError);
}
