#pragma once
/// @file
/// Softmax kernels over raw contiguous memory. A tensor is viewed as (outer, n, inner) with the
/// softmax taken along n: inner == 1 is the hot row case (rows contiguous, OpenMP over rows,
/// xsimd exp); inner > 1 is the strided case (OpenMP over outer and blocks of inner).
///
/// Stability: the slice maximum m is subtracted before exp, so large logits never overflow.
/// A slice that is entirely -inf (m = -inf) gives y = 0 (softmax) / -inf (log_softmax) and a zero
/// gradient, where exp(-inf - -inf) would give NaN. Every slice is computed by the same code
/// whatever the thread count, so results are bitwise identical for any number of threads.

#include <cstddef>

namespace qkv::kernels {

// ---- row primitives (one contiguous row of n elements, calling thread only) ----

/// max_j x_j (-inf for n == 0).
template <class T> T row_max(const T* x, std::size_t n);
/// y_j = exp(x_j - shift); returns sum_j y_j. y may alias x. exp(-inf) = 0.
template <class T> T row_exp_shift(T* y, const T* x, std::size_t n, T shift);
/// log sum_j exp(x_j), stable; -inf when every x_j is -inf.
template <class T> T row_logsumexp(const T* x, std::size_t n);

// ---- whole tensors, viewed as (outer, n, inner), softmax along n ----

/// y = softmax(x) along n. y may alias x.
template <class T>
void softmax_forward(T* y, const T* x, std::size_t outer, std::size_t n, std::size_t inner);
/// y = log_softmax(x) = x - m - log sum exp(x - m) along n. y may alias x.
template <class T>
void log_softmax_forward(T* y, const T* x, std::size_t outer, std::size_t n, std::size_t inner);
/// dx = y * (dy - sum_n(dy * y)), from the softmax output y. Overwrites dx.
template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, std::size_t outer, std::size_t n, std::size_t inner);
/// dx = dy - exp(y) * sum_n(dy), from the log_softmax output y; 0 on all -inf slices.
/// Overwrites dx.
template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, std::size_t outer, std::size_t n,
                          std::size_t inner);

}  // namespace qkv::kernels
