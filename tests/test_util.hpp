#pragma once
// Helpers shared by the tests.

#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "qkv/autograd/gradcheck.hpp"
#include "qkv/tensor/random.hpp"
#include "qkv/tensor/tensor.hpp"
#include "test_paths.hpp"

namespace qkv::test {

/// Uniform values in [-1, 1) from a seed.
template <class T>
Array<T> random_array(const Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator gen(seed);
  Array<T> a = Array<T>::from_shape(shape);
  for (auto& v : a) v = static_cast<T>(gen.uniform(lo, hi));
  return a;
}

/// gradcheck with the default tolerances; the report is printed when it fails.
inline void check_grad(const std::function<Variable<double>(const std::vector<Variable<double>>&)>& f,
                       const std::vector<Array<double>>& inputs, const GradcheckOptions& opt = {}) {
  GradcheckReport r = gradcheck(f, inputs, opt);
  INFO(r.str());
  CHECK(r.ok);
}

/// Bitwise equality of two arrays (same shape, same bits).
template <class A, class B>
bool bitwise_equal(const A& a, const B& b) {
  if (a.shape() != b.shape()) return false;
  return std::equal(a.begin(), a.end(), b.begin(), [](auto x, auto y) {
    return std::memcmp(&x, &y, sizeof(x)) == 0;
  });
}

/// Temporary directory under the build tree, emptied first.
std::string temp_dir(const std::string& name);

}  // namespace qkv::test
