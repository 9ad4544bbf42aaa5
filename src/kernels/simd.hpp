#pragma once
// Private SIMD helpers for the kernels in this folder (not installed): xsimd batches of the
// widest instruction set the compiler targets (AVX-512 with -march=native, SSE2 otherwise).
// glibc only vectorises exp under -ffast-math, so exp goes through xsimd explicitly
// (TOOLCHAIN.md pitfall 5: ~8x faster than a scalar std::exp loop for row softmax).

// GCC 12 warns about the deliberately undefined registers in its own AVX-512 intrinsics once
// xsimd inlines them; silenced for the (few) files that include this private header.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>

namespace qkv::kernels::simd {

template <class T>
using Batch = xsimd::batch<T>;
template <class T>
constexpr std::size_t width = Batch<T>::size;

/// A partial batch: the n < width elements at p, padded with `pad`.
template <class T>
Batch<T> load_tail(const T* p, std::size_t n, T pad) {
  alignas(64) T buf[width<T>];
  std::fill(buf, buf + width<T>, pad);
  std::copy(p, p + n, buf);
  return Batch<T>::load_aligned(buf);
}
/// Store the first n < width lanes of b at p.
template <class T>
void store_tail(const Batch<T>& b, T* p, std::size_t n) {
  alignas(64) T buf[width<T>];
  b.store_aligned(buf);
  std::copy(buf, buf + n, p);
}
/// Horizontal maximum of a batch.
template <class T>
T hmax(const Batch<T>& b) {
  alignas(64) T buf[width<T>];
  b.store_aligned(buf);
  return *std::max_element(buf, buf + width<T>);
}

constexpr double neg_inf = -std::numeric_limits<double>::infinity();

}  // namespace qkv::kernels::simd
