#pragma once
/// @file
/// Dropout kernels over raw pointers: the mask of DropoutDraws applied alone, or fused with the
/// op around it so that the data passes through memory once. No autograd here.
///
/// `draws` and `first` give the mask: element i is dropped iff draws.dropped(first + i); the
/// survivors are scaled by `scale` = 1 / (1 - p). Work is cut into chunks of kDropoutChunk
/// elements, one thread each (parallel_for), and a chunk stays in L1 between the passes of a fused
/// kernel. Every fused kernel computes exactly what its separate kernels would, in the same order
/// per element, so the bits are those of the unfused ops, for any thread count.

#include <cstddef>
#include <cstdint>

#include "qkv/tensor/random.hpp"

namespace qkv::kernels {

/// Elements per chunk (a multiple of DropoutDraws::kBlock).
inline constexpr std::size_t kDropoutChunk = 4096;

/// out = dropout(in), n elements (out may alias in).
template <class T>
void dropout_forward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* in, T* out, std::size_t n);

/// out = x + dropout(y): the residual add after a dropped branch.
template <class T>
void dropout_add_forward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* x, const T* y, T* out,
                         std::size_t n);

/// out = dropout(gelu(x)) (gelu_forward's formula; tanh_approx as there).
template <class T>
void gelu_dropout_forward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* x, T* out, std::size_t n,
                          bool tanh_approx);

/// gx = dropout(g) * gelu'(x): the gradient of gelu_dropout_forward (gx may alias g).
template <class T>
void gelu_dropout_backward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* g, const T* x, T* gx,
                           std::size_t n, bool tanh_approx);

}  // namespace qkv::kernels
