#include "qkv/ops/loss.hpp"

#include <sstream>

#include "qkv/kernels/cross_entropy.hpp"

namespace qkv {

template <class T>
Variable<T> cross_entropy(const Variable<T>& logits, const IndexArray& targets, Index ignore_index,
                          double label_smoothing) {
  const Shape& sl = logits.shape();
  if (sl.empty() || !std::equal(sl.begin(), sl.end() - 1, targets.shape().begin(), targets.shape().end()))
    throw ShapeError("cross_entropy: logits of shape " + shape_str(sl) + " do not fit targets of shape " +
                     shape_str(targets.shape()) + " (expected logits (..., V) and targets (...))");
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    std::ostringstream msg;
    msg << "cross_entropy: label_smoothing must be in [0, 1], got " << label_smoothing;
    throw ValueError(msg.str());
  }
  const std::size_t V = sl.back(), N = targets.size();
  const Index* t = targets.data();
  std::size_t count = 0;
  for (std::size_t i = 0; i < N; ++i) {
    if (t[i] == ignore_index) continue;
    if (t[i] < 0 || std::size_t(t[i]) >= V)
      throw ValueError("cross_entropy: target " + std::to_string(t[i]) + " at flat position " + std::to_string(i) +
                       " is outside the classes [0, " + std::to_string(V) + ") and is not ignore_index (" +
                       std::to_string(ignore_index) + ")");
    ++count;
  }

  Array<T> loss_rows = Array<T>::from_shape({N}), lse = Array<T>::from_shape({N});
  const T s = static_cast<T>(label_smoothing);
  kernels::cross_entropy_forward<T>(loss_rows.data(), lse.data(), logits.data(), t, N, V, ignore_index, s);
  // The mean in a fixed (row) order, accumulated in double; 0 when no target counts (PyTorch: NaN).
  double total = 0;
  for (std::size_t i = 0; i < N; ++i) total += double(loss_rows.data()[i]);
  Array<T> out = Array<T>::from_shape({});
  out() = count ? static_cast<T>(total / double(count)) : T(0);

  return record_op<T>("cross_entropy", std::move(out), needs_grad(logits),
                      [logits, targets, lse = std::move(lse), N, V, ignore_index, s, count](const Array<T>& gy) {
    Array<T> gl = Array<T>::from_shape(logits.shape());
    const T scale = count ? gy() / static_cast<T>(count) : T(0);
    kernels::cross_entropy_backward<T>(gl.data(), logits.data(), lse.data(), targets.data(), N, V,
                                       ignore_index, s, scale);
    logits.accumulate_grad(std::move(gl), "cross_entropy");
  });
}

template Variable<float> cross_entropy(const Variable<float>&, const IndexArray&, Index, double);
template Variable<double> cross_entropy(const Variable<double>&, const IndexArray&, Index, double);

}  // namespace qkv
