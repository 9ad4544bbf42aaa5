#include "qkv/kernels/layer_norm.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/tensor/allocator.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::kernels {
namespace {
constexpr std::size_t kRowChunk = 32;        // rows per dgamma/dbeta partial sum (fixed: determinism)
}  // namespace

template <class T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, std::size_t rows,
                        std::size_t C, T eps) {
  parallel_for(rows, 2 * C, [&](std::size_t r) {
    const T* X = x + std::size_t(r) * C;
    T* Y = y + std::size_t(r) * C;
    // Two passes (mean, then squared deviations): the one-pass E[x^2] - E[x]^2 cancels
    // catastrophically when |mean| >> std. Sums and centring in double (as PyTorch's CPU
    // accumulate type): in float, the mean of a row sitting at 1e4 is off by ~ulp(1e4) = 1e-3,
    // which becomes a 1e-3 error in every normalised value.
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (std::size_t j = 0; j < C; ++j) s += X[j];
    const double m = s / double(C);
    double v = 0;
#pragma omp simd reduction(+ : v)
    for (std::size_t j = 0; j < C; ++j) v += (X[j] - m) * (X[j] - m);
    const double rs = 1.0 / std::sqrt(v / double(C) + double(eps));
    mean[r] = T(m);
    rstd[r] = T(rs);
#pragma omp simd
    for (std::size_t j = 0; j < C; ++j) {
      const T h = T((X[j] - m) * rs);
      Y[j] = (gamma ? h * gamma[j] : h) + (beta ? beta[j] : T(0));
    }
  });
}

template <class T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* x, const T* mean, const T* rstd,
                         const T* gamma, std::size_t rows, std::size_t C) {
  // dgamma and dbeta sum over every row. Each fixed chunk of kRowChunk rows writes its own partial
  // sums (row-major, streaming), then the partials are added chunk by chunk in order: the same
  // sums in the same order for any thread count. (Splitting by columns instead, each thread
  // walking all rows for its columns, was also deterministic but 13x slower: strided access.)
  const bool params = dgamma || dbeta;
  const std::size_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  PooledVector<double> partial(params ? chunks * 2 * C : 0);
  parallel_for(chunks, 2 * kRowChunk * C, [&](std::size_t k) {
    // gamma read through the closure (a reference) is reloaded in every iteration of an omp simd
    // loop: GCC 12 vectorised `gamma ? G[j] * gamma[j] : G[j]` into two gathers per batch, and
    // this kernel ran 2x slower. A local copy is a loop invariant.
    const T* const gm = gamma;
    double* pg = params ? partial.data() + std::size_t(k) * 2 * C : nullptr;
    double* pb = params ? pg + C : nullptr;
    if (params) std::fill(pg, pg + 2 * C, 0.0);
    const std::size_t r1 = std::min(rows, (std::size_t(k) + 1) * kRowChunk);
    for (std::size_t r = std::size_t(k) * kRowChunk; r < r1; ++r) {
      const T *X = x + r * C, *G = dy + r * C;
      const T m = mean[r], rs = rstd[r];
      // In the forward pass y = xhat * gamma + beta with xhat = (x - mean) rstd, and mean and
      // rstd depend on every x of the row; with g = dy * gamma, the chain rule through both gives
      // dx = rstd (g - mean(g) - xhat mean(g xhat)). One pass gathers the row sums (and the
      // partial dgamma/dbeta), the next writes dx.
      double sg = 0, sgh = 0;
      if (params) {
#pragma omp simd reduction(+ : sg, sgh)
        for (std::size_t j = 0; j < C; ++j) {
          const T h = (X[j] - m) * rs;
          const T g = gm ? G[j] * gm[j] : G[j];
          pg[j] += double(G[j] * h);
          pb[j] += double(G[j]);
          sg += g;
          sgh += g * h;
        }
      } else {
#pragma omp simd reduction(+ : sg, sgh)
        for (std::size_t j = 0; j < C; ++j) {
          const T g = gm ? G[j] * gm[j] : G[j];
          sg += g;
          sgh += g * ((X[j] - m) * rs);
        }
      }
      if (!dx) continue;
      const T mg = T(sg / double(C)), mgh = T(sgh / double(C));
      T* D = dx + r * C;
#pragma omp simd
      for (std::size_t j = 0; j < C; ++j) {
        const T g = gm ? G[j] * gm[j] : G[j];
        D[j] = rs * (g - mg - ((X[j] - m) * rs) * mgh);
      }
    }
  });
  if (!params) return;
  parallel_for(C, 2 * chunks, [&](std::size_t j) {
    double sg = 0, sb = 0;
    for (std::size_t k = 0; k < chunks; ++k) {
      sg += partial[k * 2 * C + std::size_t(j)];
      sb += partial[k * 2 * C + C + std::size_t(j)];
    }
    if (dgamma) dgamma[j] = T(sg);
    if (dbeta) dbeta[j] = T(sb);
  });
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
