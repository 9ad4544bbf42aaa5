#include "qkv/kernels/dropout.hpp"

#include <algorithm>

#include "qkv/kernels/elementwise.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::kernels {
namespace {

// body(lo, len) over chunks, one thread each; each thread owns the chunks it writes.
template <class F>
void for_chunks(std::size_t n, F&& body) {
  parallel_for((n + kDropoutChunk - 1) / kDropoutChunk, kDropoutChunk, [&](std::size_t c) {
    const std::size_t lo = c * kDropoutChunk;
    body(lo, std::min(kDropoutChunk, n - lo));
  });
}

}  // namespace

template <class T>
void dropout_forward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* in, T* out, std::size_t n) {
  for_chunks(n, [&](std::size_t lo, std::size_t len) { draws.apply(in + lo, out + lo, len, first + lo, scale); });
}

template <class T>
void dropout_add_forward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* x, const T* y, T* out,
                         std::size_t n) {
  for_chunks(n, [&](std::size_t lo, std::size_t len) {
    draws.apply(y + lo, out + lo, len, first + lo, scale);
#pragma omp simd
    for (std::size_t i = lo; i < lo + len; ++i) out[i] = x[i] + out[i];  // as add(x, dropout(y))
  });
}

template <class T>
void gelu_dropout_forward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* x, T* out, std::size_t n,
                          bool tanh_approx) {
  for_chunks(n, [&](std::size_t lo, std::size_t len) {
    gelu_forward(x + lo, out + lo, len, tanh_approx);  // serial here: already inside parallel_for
    draws.apply(out + lo, out + lo, len, first + lo, scale);
  });
}

template <class T>
void gelu_dropout_backward(const DropoutDraws& draws, std::uint64_t first, T scale, const T* g, const T* x, T* gx,
                           std::size_t n, bool tanh_approx) {
  // In the forward pass this was out = gelu(x) * mask * scale, so dx = (g * mask * scale) gelu'(x):
  // dropout's backward, then GELU's, on the same chunk.
  for_chunks(n, [&](std::size_t lo, std::size_t len) {
    draws.apply(g + lo, gx + lo, len, first + lo, scale);
    gelu_backward(gx + lo, x + lo, gx + lo, len, tanh_approx);
  });
}

#define QKV_INSTANTIATE(T)                                                                                      \
  template void dropout_forward<T>(const DropoutDraws&, std::uint64_t, T, const T*, T*, std::size_t);          \
  template void dropout_add_forward<T>(const DropoutDraws&, std::uint64_t, T, const T*, const T*, T*,          \
                                       std::size_t);                                                           \
  template void gelu_dropout_forward<T>(const DropoutDraws&, std::uint64_t, T, const T*, T*, std::size_t, bool); \
  template void gelu_dropout_backward<T>(const DropoutDraws&, std::uint64_t, T, const T*, const T*, T*,        \
                                         std::size_t, bool);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv::kernels
