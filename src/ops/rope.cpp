#include "qkv/ops/rope.hpp"

#include "qkv/kernels/rope.hpp"

namespace qkv {

template <class T>
Variable<T> rope(const Variable<T>& x, std::size_t offset, double base) {
  const Shape& s = x.shape();
  if (s.size() != 4 || s[3] % 2 != 0)
    throw ShapeError("rope: expected x of shape (B, H, T, D) with D even, found " + shape_str(s));
  const std::size_t R = s[0] * s[1], T_len = s[2], D = s[3];
  Array<T> y = Array<T>::from_shape(s);
  kernels::rope(y.data(), x.data(), R, T_len, D, offset, base, false);
  return record_op<T>("rope", std::move(y), needs_grad(x), [x = x.without_value(), R, T_len, D, offset, base](const Array<T>& g) {
    // y = R_p x with R_p a rotation, so dx = R_p^T dy: the same rotation backwards.
    Array<T> gx = Array<T>::from_shape(g.shape());
    kernels::rope(gx.data(), g.data(), R, T_len, D, offset, base, true);
    x.accumulate_grad(std::move(gx), "rope");
  });
}

template Variable<float> rope(const Variable<float>&, std::size_t, double);
template Variable<double> rope(const Variable<double>&, std::size_t, double);

}  // namespace qkv
