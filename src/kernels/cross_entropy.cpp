#include "qkv/kernels/cross_entropy.hpp"

#include <algorithm>

#include "qkv/kernels/softmax.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::kernels {

template <class T>
void cross_entropy_forward(T* loss, T* lse, const T* logits, const std::int64_t* targets, std::size_t N,
                           std::size_t V, std::int64_t ignore_index, T smoothing) {
  parallel_for(N, 2 * V, [&](std::size_t i) {
    const T* x = logits + std::size_t(i) * V;
    const T l = row_logsumexp(x, V);
    lse[i] = l;
    if (targets[i] == ignore_index) {
      loss[i] = T(0);
      return;
    }
    T li = (T(1) - smoothing) * (l - x[targets[i]]);
    if (smoothing > 0) {  // skipped at s = 0: 0 * inf would turn a -inf logit into NaN
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (std::size_t c = 0; c < V; ++c) sum += x[c];
      li += smoothing * (l - sum / T(V));
    }
    loss[i] = li;
  });
}

template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const std::int64_t* targets,
                            std::size_t N, std::size_t V, std::int64_t ignore_index, T smoothing, T scale) {
  // In the forward pass loss = sum_c q_c (lse - x_c) with target distribution
  // q = (1 - s) one_hot + s / V (sum_c q_c = 1), so d loss / d x_c = softmax_c - q_c.
  const T uniform = smoothing / T(V);
  parallel_for(N, 2 * V, [&](std::size_t i) {
    T* d = dlogits + std::size_t(i) * V;
    if (targets[i] == ignore_index) {
      std::fill(d, d + V, T(0));
      return;
    }
    row_exp_shift(d, logits + std::size_t(i) * V, V, lse[i]);
#pragma omp simd
    for (std::size_t c = 0; c < V; ++c) d[c] = (d[c] - uniform) * scale;
    d[targets[i]] -= (T(1) - smoothing) * scale;
  });
}

template void cross_entropy_forward<float>(float*, float*, const float*, const std::int64_t*, std::size_t,
                                           std::size_t, std::int64_t, float);
template void cross_entropy_forward<double>(double*, double*, const double*, const std::int64_t*, std::size_t,
                                            std::size_t, std::int64_t, double);
template void cross_entropy_backward<float>(float*, const float*, const float*, const std::int64_t*,
                                            std::size_t, std::size_t, std::int64_t, float, float);
template void cross_entropy_backward<double>(double*, const double*, const double*, const std::int64_t*,
                                             std::size_t, std::size_t, std::int64_t, double, double);

}  // namespace qkv::kernels
