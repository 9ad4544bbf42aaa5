#include "qkv/ops/softmax.hpp"

#include "qkv/kernels/softmax.hpp"

namespace qkv {
namespace {

// The tensor as (outer, n, inner) around `axis`.
struct Split {
  std::size_t outer = 1, n = 1, inner = 1;
};

Split split_axis(const Shape& shape, int axis, const char* op) {
  const int nd = static_cast<int>(shape.size());
  if (axis < -nd || axis >= nd || nd == 0)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " out of range for shape " +
                     shape_str(shape));
  const std::size_t a = static_cast<std::size_t>(axis < 0 ? axis + nd : axis);
  Split s;
  for (std::size_t d = 0; d < shape.size(); ++d) (d < a ? s.outer : d == a ? s.n : s.inner) *= shape[d];
  return s;
}

// Both backwards read the op's output y, which record_op hands them (no copy: that would double
// the memory of attention weights).
template <class T, class Forward, class Backward>
Variable<T> softmax_like(const char* op, const Variable<T>& x, int axis, Forward forward, Backward backward) {
  const Split s = split_axis(x.shape(), axis, op);
  Array<T> y = Array<T>::from_shape(x.shape());
  forward(y.data(), x.data(), s.outer, s.n, s.inner);
  return record_op<T>(op, std::move(y), needs_grad(x), [x = x.without_value(), s, backward, op](const Array<T>& gy, const Array<T>& y) {
    Array<T> gx = Array<T>::from_shape(x.shape());
    backward(gx.data(), gy.data(), y.data(), s.outer, s.n, s.inner);
    x.accumulate_grad(std::move(gx), op);
  });
}

}  // namespace

template <class T>
Variable<T> softmax(const Variable<T>& x, int axis) {
  return softmax_like("softmax", x, axis, kernels::softmax_forward<T>, kernels::softmax_backward<T>);
}

template <class T>
Variable<T> log_softmax(const Variable<T>& x, int axis) {
  return softmax_like("log_softmax", x, axis, kernels::log_softmax_forward<T>, kernels::log_softmax_backward<T>);
}

template Variable<float> softmax(const Variable<float>&, int);
template Variable<double> softmax(const Variable<double>&, int);
template Variable<float> log_softmax(const Variable<float>&, int);
template Variable<double> log_softmax(const Variable<double>&, int);

}  // namespace qkv
