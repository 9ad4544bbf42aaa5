#pragma once
/// @file
/// Rotary position embedding as a differentiable op (formula: kernels/rope.hpp).

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// x (B, H, T, D) with D even -> x rotated per position p = offset + t: pairs (d, d + D/2) turn
/// by the angle p * base^(-2d/D). The gradient is the inverse rotation of the upstream gradient.
/// Throws ShapeError for x of another rank or an odd D.
template <class T>
Variable<T> rope(const Variable<T>& x, std::size_t offset = 0, double base = 10000.0);

}  // namespace qkv
