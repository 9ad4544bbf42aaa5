#include <doctest/doctest.h>

#include <cmath>

#include "qkv/tensor/parallel.hpp"
#include "qkv/optim/clip.hpp"
#include "test_util.hpp"

using namespace qkv;

namespace {
Variable<double> with_grad(const std::vector<double>& g) {
  Variable<double> p(zeros<double>({g.size()}), true);
  p.accumulate_grad(from_vector<double>(g, {g.size()}));
  return p;
}
}  // namespace

TEST_CASE("clip_grad_norm: returns the global norm and scales to max_norm / (norm + 1e-6)") {
  Variable<double> a = with_grad({3, 4}), b = with_grad({12});
  Variable<double> no_grad(zeros<double>({2}), true);
  const double norm = optim::clip_grad_norm<double>({a, no_grad, b}, 6.5);
  CHECK(norm == doctest::Approx(13.0).epsilon(1e-15));
  const double c = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad()(0) == doctest::Approx(3 * c).epsilon(1e-15));
  CHECK(a.grad()(1) == doctest::Approx(4 * c).epsilon(1e-15));
  CHECK(b.grad()(0) == doctest::Approx(12 * c).epsilon(1e-15));
  CHECK_FALSE(no_grad.has_grad());
  CHECK(optim::grad_norm<double>({a, b}) == doctest::Approx(6.5).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm: gradients under the limit are unchanged") {
  Variable<double> a = with_grad({3, 4});
  CHECK(optim::clip_grad_norm<double>({a}, 5.5) == doctest::Approx(5.0));
  CHECK(a.grad()(0) == 3.0);
  CHECK(a.grad()(1) == 4.0);
  CHECK(optim::clip_grad_norm<double>({}, 1.0) == 0.0);
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm<double>({a}, 0.0), doctest::Contains("max_norm"), ValueError);
}

TEST_CASE("clip_grad_norm: large float tensors, independent sum, same bits for 1 and 2 threads") {
  auto make = [] {
    Variable<float> p(zeros<float>({400, 300}), true);
    p.accumulate_grad(test::random_array<float>({400, 300}, 3));
    return p;
  };
  Variable<float> p1 = make(), p2 = make();
  double expected = 0;
  for (float g : p1.grad()) expected += double(g) * double(g);
  expected = std::sqrt(expected);
  const int saved = num_threads();
  set_num_threads(1);
  const double n1 = optim::clip_grad_norm<float>({p1}, 1.0);
  set_num_threads(2);
  const double n2 = optim::clip_grad_norm<float>({p2}, 1.0);
  set_num_threads(saved);
  CHECK(n1 == doctest::Approx(expected).epsilon(1e-12));
  CHECK(std::memcmp(&n1, &n2, sizeof n1) == 0);
  CHECK(test::bitwise_equal(p1.grad(), p2.grad()));
  CHECK(optim::grad_norm<float>({p1}) == doctest::Approx(1.0).epsilon(1e-5));
}
