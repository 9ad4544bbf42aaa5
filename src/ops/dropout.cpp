#include "qkv/ops/dropout.hpp"
#include "qkv/kernels/parallel.hpp"

#include <sstream>

namespace qkv {
namespace {

// out[i] = in[i] * scale where element i survives (uniform_at(seed, first + i) >= p), else 0.
// The mask is recomputed from (seed, first) rather than stored: one hash per element costs about
// as much as reading a stored mask, and the backward needs no memory.
template <class T>
void apply_mask(T* out, const T* in, std::size_t n, std::uint64_t seed, std::uint64_t first, double p, T scale) {
  parallel_for(n, 1, [&](std::size_t i) {
    const bool keep = uniform_at(seed, first + std::uint64_t(i)) >= p;
    out[i] = keep ? in[i] * scale : T(0);
  });
}

}  // namespace

template <class T>
Variable<T> dropout(const Variable<T>& x, double p, bool training, Generator& gen) {
  if (!(p >= 0.0 && p < 1.0)) {
    std::ostringstream msg;
    msg << "dropout: probability p must be in [0, 1), got " << p;
    throw ValueError(msg.str());
  }
  if (!training || p == 0.0) return x;

  const std::size_t n = x.size();
  const std::uint64_t seed = gen.seed(), first = gen.reserve(n);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  Array<T> y = Array<T>::from_shape(x.shape());
  apply_mask(y.data(), x.data(), n, seed, first, p, scale);

  return record_op<T>("dropout", std::move(y), needs_grad(x), [x = x.without_value(), n, seed, first, p, scale](const Array<T>& gy) {
    // y = x * mask / (1 - p), so dx = dy * mask / (1 - p), with the same mask.
    Array<T> gx = Array<T>::from_shape(x.shape());
    apply_mask(gx.data(), gy.data(), n, seed, first, p, scale);
    x.accumulate_grad(std::move(gx), "dropout");
  });
}

template Variable<float> dropout(const Variable<float>&, double, bool, Generator&);
template Variable<double> dropout(const Variable<double>&, double, bool, Generator&);

}  // namespace qkv
