#include "qkv/kernels/softmax.hpp"
#include "qkv/tensor/parallel.hpp"

#include <cmath>
#include <limits>

#include "simd.hpp"

namespace qkv::kernels {
namespace {

using simd::Batch;
using simd::width;

template <class T>
constexpr T ninf = -std::numeric_limits<T>::infinity();

// Inner-dimension block of the strided path: one block's maxima and sums live on the stack.
constexpr std::size_t kBlock = 64;

// Run body(o, j0, w) over (outer, blocks of inner); body owns y[o, :, j0:j0+w].
template <class F>
void for_strided_blocks(std::size_t outer, std::size_t n, std::size_t inner, F&& body) {
  const std::size_t blocks = (inner + kBlock - 1) / kBlock;
  parallel_for(outer * blocks, 2 * n * kBlock, [&](std::size_t t) {
    const std::size_t o = t / blocks, j0 = (t % blocks) * kBlock;
    body(o, j0, std::min(kBlock, inner - j0));
  });
}

// The slices of one softmax call: contiguous rows (inner == 1; row(off), the row at off) in
// parallel, or strided blocks of columns (block(off, w): w columns at off, a stride of inner).
template <class Row, class Block>
void for_slices(std::size_t outer, std::size_t n, std::size_t inner, Row&& row, Block&& block) {
  if (inner == 1) return parallel_for(outer, 2 * n, [&](std::size_t r) { row(r * n); });
  for_strided_blocks(outer, n, inner, [&](std::size_t o, std::size_t j0, std::size_t w) { block(o * n * inner + j0, w); });
}

// One strided block (w <= kBlock columns of an (n, inner) slice starting at X): column maxima m
// and sums s of exp(x - m). A fully -inf column gets m = 0, so its exps are exp(-inf) = 0 (not
// exp(-inf - -inf) = NaN) and s = 0. The exps of row k are left at E + k * e_stride (stride 0:
// one scratch row, overwritten).
template <class T>
void block_max_sum_exp(const T* X, std::size_t n, std::size_t inner, std::size_t w, T* m, T* s, T* E,
                       std::size_t e_stride) {
  std::fill(m, m + w, ninf<T>);
  std::fill(s, s + w, T(0));
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t j = 0; j < w; ++j) m[j] = std::max(m[j], X[k * inner + j]);
  for (std::size_t j = 0; j < w; ++j) m[j] = m[j] == ninf<T> ? T(0) : m[j];
  for (std::size_t k = 0; k < n; ++k) {
    T* ek = E + k * e_stride;
    for (std::size_t j = 0; j < w; ++j) ek[j] = X[k * inner + j] - m[j];
    row_exp_shift(ek, ek, w, T(0));
    for (std::size_t j = 0; j < w; ++j) s[j] += ek[j];
  }
}

template <class T>
void row_softmax(T* y, const T* x, std::size_t n) {
  const T m = row_max(x, n);
  if (m == ninf<T>) {  // fully masked: zeros, not NaN
    std::fill(y, y + n, T(0));
    return;
  }
  const T inv = T(1) / row_exp_shift(y, x, n, m);
#pragma omp simd
  for (std::size_t j = 0; j < n; ++j) y[j] *= inv;
}

// sum_j exp(x_j - m), the exps themselves discarded.
template <class T>
T row_sum_exp(const T* x, std::size_t n, T m) {
  alignas(64) T scratch[1024];
  T s = 0;
  for (std::size_t j0 = 0; j0 < n; j0 += 1024) s += row_exp_shift(scratch, x + j0, std::min<std::size_t>(1024, n - j0), m);
  return s;
}

template <class T>
void row_log_softmax(T* y, const T* x, std::size_t n) {
  const T m = row_max(x, n);
  if (m == ninf<T>) {
    std::fill(y, y + n, ninf<T>);
    return;
  }
  // (x - m) - log s rather than x - (m + log s): with logits of 1e4 the rounding of m + log s
  // would cost ~1e-12 absolute in double (~1e-3 in float).
  const T log_s = std::log(row_sum_exp(x, n, m));
#pragma omp simd
  for (std::size_t j = 0; j < n; ++j) y[j] = (x[j] - m) - log_s;
}

}  // namespace

template <class T>
T row_max(const T* x, std::size_t n) {
  std::size_t j = 0;
  Batch<T> acc(ninf<T>);
  for (; j + width<T> <= n; j += width<T>) acc = xsimd::max(acc, Batch<T>::load_unaligned(x + j));
  T m = simd::hmax(acc);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

template <class T>
T row_exp_shift(T* y, const T* x, std::size_t n, T shift) {
  const Batch<T> s(shift);
  Batch<T> acc(T(0));
  std::size_t j = 0;
  for (; j + width<T> <= n; j += width<T>) {
    Batch<T> e = xsimd::exp(Batch<T>::load_unaligned(x + j) - s);
    e.store_unaligned(y + j);
    acc += e;
  }
  if (j < n) {  // the tail through the same exp, padded with exp(-inf) = 0
    Batch<T> e = xsimd::exp(simd::load_tail(x + j, n - j, ninf<T>) - s);
    simd::store_tail(e, y + j, n - j);
    acc += e;
  }
  return xsimd::hadd(acc);
}

template <class T>
T row_logsumexp(const T* x, std::size_t n) {
  const T m = row_max(x, n);
  return m == ninf<T> ? m : m + std::log(row_sum_exp(x, n, m));
}

template <class T>
void softmax_forward(T* y, const T* x, std::size_t outer, std::size_t n, std::size_t inner) {
  for_slices(outer, n, inner, [&](std::size_t off) { row_softmax(y + off, x + off, n); }, [&](std::size_t off, std::size_t w) {
    const T* X = x + off;
    T* Y = y + off;
    T m[kBlock], s[kBlock];
    block_max_sum_exp(X, n, inner, w, m, s, Y, inner);  // the exps go straight to y
    for (std::size_t j = 0; j < w; ++j) s[j] = s[j] > 0 ? T(1) / s[j] : T(0);
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < w; ++j) Y[k * inner + j] *= s[j];
  });
}

template <class T>
void log_softmax_forward(T* y, const T* x, std::size_t outer, std::size_t n, std::size_t inner) {
  for_slices(outer, n, inner, [&](std::size_t off) { row_log_softmax(y + off, x + off, n); }, [&](std::size_t off, std::size_t w) {
    const T* X = x + off;
    T* Y = y + off;
    T m[kBlock], s[kBlock], e[kBlock];
    block_max_sum_exp(X, n, inner, w, m, s, e, 0);
    // A fully -inf column (s = 0) subtracts +inf: -inf - inf = -inf, not NaN.
    for (std::size_t j = 0; j < w; ++j) s[j] = s[j] > 0 ? std::log(s[j]) : -ninf<T>;
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < w; ++j) Y[k * inner + j] = (X[k * inner + j] - m[j]) - s[j];
  });
}

template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, std::size_t outer, std::size_t n, std::size_t inner) {
  // In the forward pass y = softmax(x), so dx_i = sum_j dy_j y_j (delta_ij - y_i)
  // = y_i (dy_i - sum_j dy_j y_j). A fully masked slice has y = 0 and gets dx = 0.
  auto row = [&](std::size_t off) {
    const T *Y = y + off, *G = dy + off;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::size_t j = 0; j < n; ++j) dot += G[j] * Y[j];
    T* D = dx + off;
#pragma omp simd
    for (std::size_t j = 0; j < n; ++j) D[j] = Y[j] * (G[j] - dot);
  };
  for_slices(outer, n, inner, row, [&](std::size_t off, std::size_t w) {
    const T *Y = y + off, *G = dy + off;
    T* D = dx + off;
    T dot[kBlock];
    std::fill(dot, dot + w, T(0));
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < w; ++j) dot[j] += G[k * inner + j] * Y[k * inner + j];
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < w; ++j) D[k * inner + j] = Y[k * inner + j] * (G[k * inner + j] - dot[j]);
  });
}

template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, std::size_t outer, std::size_t n,
                          std::size_t inner) {
  // In the forward pass y = x - logsumexp(x), so dx_i = dy_i - softmax_i sum_j dy_j with
  // softmax = exp(y). A fully masked slice (every y = -inf) is constant: dx = 0.
  auto row = [&](std::size_t off) {
    const T *Y = y + off, *G = dy + off;
    T* D = dx + off;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::size_t j = 0; j < n; ++j) sum += G[j];
    if (row_max(Y, n) == ninf<T>) {
      std::fill(D, D + n, T(0));
      return;
    }
    row_exp_shift(D, Y, n, T(0));
#pragma omp simd
    for (std::size_t j = 0; j < n; ++j) D[j] = G[j] - D[j] * sum;
  };
  for_slices(outer, n, inner, row, [&](std::size_t off, std::size_t w) {
    const T *Y = y + off, *G = dy + off;
    T* D = dx + off;
    T sum[kBlock], ymax[kBlock];
    std::fill(sum, sum + w, T(0));
    std::fill(ymax, ymax + w, ninf<T>);
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < w; ++j) {
        sum[j] += G[k * inner + j];
        ymax[j] = std::max(ymax[j], Y[k * inner + j]);
      }
    for (std::size_t j = 0; j < w; ++j) sum[j] = ymax[j] == ninf<T> ? T(0) : sum[j];
    for (std::size_t k = 0; k < n; ++k) {
      T* dk = D + k * inner;
      row_exp_shift(dk, Y + k * inner, w, T(0));
      for (std::size_t j = 0; j < w; ++j)
        dk[j] = ymax[j] == ninf<T> ? T(0) : G[k * inner + j] - dk[j] * sum[j];
    }
  });
}

#define QKV_INSTANTIATE(T)                                                                          \
  template T row_max<T>(const T*, std::size_t);                                                     \
  template T row_exp_shift<T>(T*, const T*, std::size_t, T);                                        \
  template T row_logsumexp<T>(const T*, std::size_t);                                               \
  template void softmax_forward<T>(T*, const T*, std::size_t, std::size_t, std::size_t);            \
  template void log_softmax_forward<T>(T*, const T*, std::size_t, std::size_t, std::size_t);        \
  template void softmax_backward<T>(T*, const T*, const T*, std::size_t, std::size_t, std::size_t); \
  template void log_softmax_backward<T>(T*, const T*, const T*, std::size_t, std::size_t, std::size_t);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv::kernels
