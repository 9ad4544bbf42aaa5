#pragma once
/// @file
/// Reductions. Axes may be negative (counted from the end); an empty axis list means all axes.
/// Reductions run in a fixed order, so results do not depend on the thread count.

#include <vector>

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// Sum over `axes` (all when empty); keepdims keeps reduced axes with size 1.
template <class T> Variable<T> sum(const Variable<T>& x, const std::vector<int>& axes = {}, bool keepdims = false);
/// Mean over `axes` (all when empty).
template <class T> Variable<T> mean(const Variable<T>& x, const std::vector<int>& axes = {}, bool keepdims = false);
/// Maximum over one axis. The gradient flows to the first maximal element of each slice.
template <class T> Variable<T> max(const Variable<T>& x, int axis, bool keepdims = false);

}  // namespace qkv
