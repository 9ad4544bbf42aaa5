#include "qkv/kernels/rope.hpp"

#include <cmath>

#include "qkv/tensor/parallel.hpp"
#include "qkv/tensor/allocator.hpp"

namespace qkv::kernels {

template <class T>
void rope(T* y, const T* x, std::size_t R, std::size_t T_len, std::size_t D, std::size_t offset, double base,
          bool inverse) {
  const std::size_t half = D / 2;
  // cos and sin of p theta_d for every (t, d): one table for all rows.
  PooledVector<T> cs(2 * T_len * half);
  for (std::size_t t = 0; t < T_len; ++t)
    for (std::size_t d = 0; d < half; ++d) {
      const double angle = double(offset + t) * std::pow(base, -2.0 * double(d) / double(D));
      cs[2 * (t * half + d)] = T(std::cos(angle));
      cs[2 * (t * half + d) + 1] = T(inverse ? -std::sin(angle) : std::sin(angle));
    }
  parallel_for(R * T_len, D, [&](std::size_t rt) {
    const std::size_t t = rt % T_len;
    const T* a = x + rt * D;
    T* b = y + rt * D;
    const T* c = cs.data() + 2 * t * half;
    for (std::size_t d = 0; d < half; ++d) {
      const T lo = a[d], hi = a[d + half], cos = c[2 * d], sin = c[2 * d + 1];
      b[d] = lo * cos - hi * sin;
      b[d + half] = hi * cos + lo * sin;
    }
  });
}

template void rope<float>(float*, const float*, std::size_t, std::size_t, std::size_t, std::size_t, double, bool);
template void rope<double>(double*, const double*, std::size_t, std::size_t, std::size_t, std::size_t, double, bool);

}  // namespace qkv::kernels
