#include "qkv/optim/clip.hpp"

#include <cmath>

#include "for_ranges.hpp"

namespace qkv::optim {
namespace {

// Sum of squares of x[0..n) in double. The chunk size is fixed (not derived from the thread
// count) and the partial sums are added in chunk order, so the result has the same bits however
// many threads run.
template <class T>
double sum_squares(const T* x, std::size_t n) {
  constexpr std::size_t kChunk = 1 << 14;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  PooledVector<double> partial(chunks, 0.0);
  parallel_for(chunks, kChunk, [&](std::size_t c) {
    double s = 0;
    const std::size_t end = std::min(n, (c + 1) * kChunk);
    for (std::size_t i = c * kChunk; i < end; ++i) s += double(x[i]) * double(x[i]);
    partial[c] = s;
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

template <class T>
double grad_norm(const std::vector<Variable<T>>& params, const std::vector<double>& gains) {
  if (!gains.empty() && gains.size() != params.size())
    throw ValueError("grad_norm: expected one gain per parameter (" + std::to_string(params.size()) + "), found " +
                     std::to_string(gains.size()));
  double total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Variable<T>& p = params[i];
    if (!p.has_grad()) continue;
    const double s = sum_squares(p.grad().data(), p.grad().size());
    total += gains.empty() ? s : gains[i] * gains[i] * s;
  }
  return std::sqrt(total);
}

template <class T>
double clip_grad_norm(const std::vector<Variable<T>>& params, double max_norm, const std::vector<double>& gains) {
  if (!(max_norm > 0)) throw ValueError("clip_grad_norm: max_norm must be > 0, got " + std::to_string(max_norm));
  const double norm = grad_norm(params, gains);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    const T c = T(coef);
    for (const Variable<T>& p : params) {
      if (!p.has_grad()) continue;
      T* g = p.grad_mut().data();
      detail::for_ranges(p.size(), [&](std::size_t lo, std::size_t hi) {
        T* const x = g;  // locals: see update_range in adam.cpp
        const T k = c;
#pragma omp simd
        for (std::size_t i = lo; i < hi; ++i) x[i] *= k;
      });
    }
  }
  return norm;
}

template double grad_norm(const std::vector<Variable<float>>&, const std::vector<double>&);
template double grad_norm(const std::vector<Variable<double>>&, const std::vector<double>&);
template double clip_grad_norm(const std::vector<Variable<float>>&, double, const std::vector<double>&);
template double clip_grad_norm(const std::vector<Variable<double>>&, double, const std::vector<double>&);

}  // namespace qkv::optim
