#include "qkv/ops/dropout.hpp"
#include "qkv/kernels/parallel.hpp"

#include <algorithm>
#include <sstream>

namespace qkv {
namespace {

// out[i] = in[i] * scale where element first + i survives (DropoutDraws), else 0. The mask is
// recomputed from (seed, first) rather than stored: half a 32-bit hash per element, vectorised,
// costs less than reading a stored mask, and the backward needs no memory. Chunks of kChunk
// elements (a multiple of DropoutDraws::kBlock) per thread.
template <class T>
void apply_mask(T* out, const T* in, std::size_t n, std::uint64_t seed, std::uint64_t first, double p, T scale) {
  constexpr std::size_t kChunk = 4096;
  const DropoutDraws draws(seed, p);
  parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](std::size_t c) {
    const std::size_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    draws.apply(in + lo, out + lo, len, first + lo, scale);
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
  const std::uint64_t seed = gen.seed(), first = gen.reserve(n, DropoutDraws::kBlock);
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
