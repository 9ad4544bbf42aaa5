#include "qkv/kernels/layer_norm.hpp"

#include <algorithm>
#include <cmath>

namespace qkv::kernels {
namespace {
constexpr std::size_t kParallelMin = 16384;  // elements below which one thread is faster
constexpr std::size_t kColBlock = 16;        // columns per dgamma/dbeta task: one cache line of float
}  // namespace

template <class T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, std::size_t rows,
                        std::size_t C, T eps) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (long r = 0; r < long(rows); ++r) {
    const T* X = x + std::size_t(r) * C;
    T* Y = y + std::size_t(r) * C;
    // Two passes (mean, then squared deviations): the one-pass E[x^2] - E[x]^2 cancels
    // catastrophically when |mean| >> std.
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (std::size_t j = 0; j < C; ++j) s += X[j];
    const T m = s / T(C);
    T v = 0;
#pragma omp simd reduction(+ : v)
    for (std::size_t j = 0; j < C; ++j) v += (X[j] - m) * (X[j] - m);
    const T rs = T(1) / std::sqrt(v / T(C) + eps);
    mean[r] = m;
    rstd[r] = rs;
#pragma omp simd
    for (std::size_t j = 0; j < C; ++j) {
      const T h = (X[j] - m) * rs;
      Y[j] = (gamma ? h * gamma[j] : h) + (beta ? beta[j] : T(0));
    }
  }
}

template <class T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                         const T* gamma, std::size_t rows, std::size_t C) {
  const bool parallel = rows * C >= kParallelMin;
  if (dx) {
    // In the forward pass y = xhat * gamma + beta with xhat = (x - mean) rstd, and mean and rstd
    // depend on every x of the row; with g = dy * gamma, the chain rule through both gives
    // dx = rstd (g - mean(g) - xhat mean(g xhat)).
#pragma omp parallel for schedule(static) if (parallel)
    for (long r = 0; r < long(rows); ++r) {
      const std::size_t off = std::size_t(r) * C;
      const T *X = x + off, *G = dy + off;
      const T m = mean[r], rs = rstd[r];
      T sg = 0, sgh = 0;
#pragma omp simd reduction(+ : sg, sgh)
      for (std::size_t j = 0; j < C; ++j) {
        const T g = gamma ? G[j] * gamma[j] : G[j];
        sg += g;
        sgh += g * (X[j] - m) * rs;
      }
      sg /= T(C);
      sgh /= T(C);
      T* D = dx + off;
#pragma omp simd
      for (std::size_t j = 0; j < C; ++j) {
        const T g = gamma ? G[j] * gamma[j] : G[j];
        D[j] = rs * (g - sg - (X[j] - m) * rs * sgh);
      }
    }
  }
  if (dgamma || dbeta) {
    // Column blocks are the unit of work: each is summed over all rows, in row order, by one thread.
    const long blocks = long((C + kColBlock - 1) / kColBlock);
#pragma omp parallel for schedule(static) if (parallel)
    for (long b = 0; b < blocks; ++b) {
      const std::size_t j0 = std::size_t(b) * kColBlock, j1 = std::min(C, j0 + kColBlock);
      T sg[kColBlock] = {}, sb[kColBlock] = {};
      for (std::size_t r = 0; r < rows; ++r) {
        const T *X = x + r * C, *G = dy + r * C;
        const T m = mean[r], rs = rstd[r];
        for (std::size_t j = j0; j < j1; ++j) {
          sg[j - j0] += G[j] * (X[j] - m) * rs;
          sb[j - j0] += G[j];
        }
      }
      if (dgamma) std::copy(sg, sg + (j1 - j0), dgamma + j0);
      if (dbeta) std::copy(sb, sb + (j1 - j0), dbeta + j0);
    }
  }
}

template void layer_norm_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        std::size_t, std::size_t, float);
template void layer_norm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         std::size_t, std::size_t, double);
template void layer_norm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                         const float*, const float*, std::size_t, std::size_t);
template void layer_norm_backward<double>(double*, double*, double*, const double*, const double*,
                                          const double*, const double*, const double*, std::size_t, std::size_t);

}  // namespace qkv::kernels
