#pragma once
// Helpers for the layer tests.

#include <functional>
#include <vector>

#include "qkv/tensor/parallel.hpp"
#include "qkv/nn/module.hpp"
#include "test_util.hpp"

namespace qkv::test {

/// A float64 leaf that requires grad, uniform in [-1, 1).
inline Variable<double> leaf(const Shape& shape, std::uint64_t seed) {
  return Variable<double>(random_array<double>(shape, seed), true);
}

/// A (B, T) id array from nested braces: ids({{1, 2}, {3, 4}}).
inline IndexArray ids(std::initializer_list<std::initializer_list<Index>> rows) {
  IndexArray out = IndexArray::from_shape({rows.size(), rows.begin()->size()});
  std::size_t i = 0;
  for (auto& r : rows) {
    REQUIRE(r.size() == out.shape()[1]);
    for (Index v : r) out.data()[i++] = v;
  }
  return out;
}

/// gradcheck of f with respect to every parameter of `m` plus `extra` inputs.
inline void check_module_grad(const std::function<Variable<double>()>& f, const nn::Module<double>& m,
                              const std::vector<Variable<double>>& extra = {}) {
  std::vector<Variable<double>> inputs = m.parameters();
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  GradcheckReport r = gradcheck(f, inputs);
  INFO(r.str());
  CHECK(r.ok);
}

/// Dotted parameter names of a module, in order.
template <class T>
std::vector<std::string> param_names(const nn::Module<T>& m) {
  std::vector<std::string> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

/// Every module in the tree (including `m`) is in training mode `on`.
template <class T>
bool all_training(const nn::Module<T>& m, bool on) {
  if (m.is_training() != on) return false;
  for (auto& [name, child] : m.named_children())
    if (!all_training(*child, on)) return false;
  return true;
}

/// run() on 1 and on 2 threads gives bitwise identical arrays.
inline void check_same_on_1_and_2_threads(const std::function<std::vector<Array<float>>()>& run) {
  const int saved = num_threads();
  set_num_threads(1);
  auto a = run();
  set_num_threads(2);
  auto b = run();
  set_num_threads(saved);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(bitwise_equal(a[i], b[i]));
}

/// max |a - b| over two arrays of the same shape.
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  REQUIRE(a.shape() == b.shape());
  double m = 0;
  auto ib = b.begin();
  for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) m = std::max(m, std::fabs(double(*ia) - double(*ib)));
  return m;
}

}  // namespace qkv::test
