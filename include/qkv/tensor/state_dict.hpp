#pragma once
/// @file
/// State dicts: named tensors in order, what modules and optimizers save and checkpoints store.
/// Below nn, so that optim and io need nothing from the layers to handle them.

#include <string>
#include <utility>
#include <vector>

#include "qkv/tensor/tensor.hpp"

namespace qkv {

/// (dotted name, tensor) pairs in registration order: "blocks.0.attn.w_q.weight" -> (H*D, C).
template <class T>
using StateDict = std::vector<std::pair<std::string, Array<T>>>;

/// Names and shapes of two state dicts compared: one line per difference, each starting with
/// "\n  " ("missing: NAME (shape)", "unexpected: NAME (shape)", "duplicate: NAME", "shape of
/// NAME: <expected_label> (a), <found_label> (b)"); empty when both hold the same names with the
/// same shapes (order may differ). `expected` is what the reader needs, `found` what it was given.
template <class A, class B>
std::string state_dict_diff(const std::vector<std::pair<std::string, A>>& expected,
                            const std::vector<std::pair<std::string, B>>& found,
                            const char* expected_label = "expected", const char* found_label = "found") {
  std::string problems;
  auto find = [](const auto& v, const std::string& name) {
    auto it = v.begin();
    while (it != v.end() && it->first != name) ++it;
    return it;
  };
  for (auto& [name, value] : expected) {
    auto it = find(found, name);
    if (it == found.end())
      problems += "\n  missing: " + name + " " + shape_str(value.shape());
    else if (Shape(it->second.shape().begin(), it->second.shape().end()) !=
             Shape(value.shape().begin(), value.shape().end()))
      problems += "\n  shape of " + name + ": " + expected_label + " " + shape_str(value.shape()) + ", " +
                  found_label + " " + shape_str(it->second.shape());
  }
  for (auto it = found.begin(); it != found.end(); ++it) {
    if (find(expected, it->first) == expected.end())
      problems += "\n  unexpected: " + it->first + " " + shape_str(it->second.shape());
    else if (find(found, it->first) != it)
      problems += "\n  duplicate: " + it->first;
  }
  return problems;
}

}  // namespace qkv
