#pragma once
/// @file
/// Layer normalisation kernels over the last dimension: x and y are (rows, C), contiguous.
///   mean = sum_j x_j / C,  var = sum_j (x_j - mean)^2 / C (biased),  rstd = 1 / sqrt(var + eps)
///   xhat = (x - mean) * rstd,  y = xhat * gamma + beta
/// Rows run in parallel; dgamma/dbeta are summed per fixed chunk of rows, then the chunks in
/// order, so every result is bitwise identical for any thread count.

#include <cstddef>

namespace qkv::kernels {

/// Forward. gamma/beta (C) may be null (scale 1 / shift 0). Writes y (rows, C) and the per-row
/// mean and rstd (rows) that the backward needs.
template <class T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, std::size_t rows,
                        std::size_t C, T eps);

/// Backward, from dy (rows, C) and the saved mean/rstd. Each output may be null to skip it; all
/// are overwritten:
///   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)),  g = dy * gamma
///   dgamma = sum_rows dy * xhat,  dbeta = sum_rows dy
template <class T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                         const T* gamma, std::size_t rows, std::size_t C);

}  // namespace qkv::kernels
