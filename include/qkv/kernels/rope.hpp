#pragma once
/// @file
/// Rotary position embedding (Su et al. 2021, "RoFormer"), in the "rotate half" layout of
/// GPT-NeoX and Llama. For x (R, T, D) (R = B*H independent rows of T positions, D even),
/// position p = offset + t and frequencies theta_d = base^(-2d / D), d < D/2:
///
///   y[.., t, d]       = x[.., t, d] cos(p theta_d) - x[.., t, d + D/2] sin(p theta_d)
///   y[.., t, d + D/2] = x[.., t, d + D/2] cos(p theta_d) + x[.., t, d] sin(p theta_d)
///
/// A rotation, so its inverse (`inverse`: angle -p theta_d) is its transpose: the backward. The
/// angles are computed in double. y may alias x.

#include <cstddef>

namespace qkv::kernels {

template <class T>
void rope(T* y, const T* x, std::size_t R, std::size_t T_len, std::size_t D, std::size_t offset, double base,
          bool inverse);

}  // namespace qkv::kernels
