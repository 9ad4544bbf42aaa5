#pragma once
/// @file
/// Elementwise ops. Binary ops broadcast like NumPy (shapes aligned from the right; a size-1 or
/// missing dimension stretches); any other mismatch throws ShapeError naming the op and both
/// shapes. Gradients of broadcast inputs are reduced back to their shape by sum_to().

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// The NumPy broadcast of two shapes; throws ShapeError "op: shapes (..) and (..) do not broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Sum `g` (of a broadcast shape) down to `shape`: the one helper every broadcasting backward uses.
template <class T>
Array<T> sum_to(const Array<T>& g, const Shape& shape);

/// a + b, a - b, a * b, a / b with broadcasting.
template <class T> Variable<T> add(const Variable<T>& a, const Variable<T>& b);
template <class T> Variable<T> sub(const Variable<T>& a, const Variable<T>& b);
template <class T> Variable<T> mul(const Variable<T>& a, const Variable<T>& b);
template <class T> Variable<T> div(const Variable<T>& a, const Variable<T>& b);
/// -a
template <class T> Variable<T> neg(const Variable<T>& a);
/// Scalar variants: a + s, a * s, s - a, s / a.
template <class T> Variable<T> add_scalar(const Variable<T>& a, T s);
template <class T> Variable<T> mul_scalar(const Variable<T>& a, T s);
template <class T> Variable<T> rsub_scalar(const Variable<T>& a, T s);
template <class T> Variable<T> rdiv_scalar(const Variable<T>& a, T s);

/// exp(a), log(a), sqrt(a), a^p, tanh(a), max(a, 0).
template <class T> Variable<T> exp(const Variable<T>& a);
template <class T> Variable<T> log(const Variable<T>& a);
template <class T> Variable<T> sqrt(const Variable<T>& a);
template <class T> Variable<T> pow(const Variable<T>& a, T p);
template <class T> Variable<T> tanh(const Variable<T>& a);
template <class T> Variable<T> relu(const Variable<T>& a);
/// GELU. Exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). Tanh approximation:
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's approximate="tanh").
enum class GeluApprox { None, Tanh };
template <class T> Variable<T> gelu(const Variable<T>& a, GeluApprox approx = GeluApprox::None);

/// out = a where mask is false, `value` where mask is true (mask broadcasts to a's shape, like
/// torch.Tensor.masked_fill). The gradient is zero at filled positions.
template <class T> Variable<T> masked_fill(const Variable<T>& a, const Mask& mask, T value);

// Operators.
template <class T> Variable<T> operator+(const Variable<T>& a, const Variable<T>& b) { return add(a, b); }
template <class T> Variable<T> operator-(const Variable<T>& a, const Variable<T>& b) { return sub(a, b); }
template <class T> Variable<T> operator*(const Variable<T>& a, const Variable<T>& b) { return mul(a, b); }
template <class T> Variable<T> operator/(const Variable<T>& a, const Variable<T>& b) { return div(a, b); }
template <class T> Variable<T> operator-(const Variable<T>& a) { return neg(a); }
template <class T> Variable<T> operator+(const Variable<T>& a, T s) { return add_scalar(a, s); }
template <class T> Variable<T> operator+(T s, const Variable<T>& a) { return add_scalar(a, s); }
template <class T> Variable<T> operator-(const Variable<T>& a, T s) { return add_scalar(a, -s); }
template <class T> Variable<T> operator-(T s, const Variable<T>& a) { return rsub_scalar(a, s); }
template <class T> Variable<T> operator*(const Variable<T>& a, T s) { return mul_scalar(a, s); }
template <class T> Variable<T> operator*(T s, const Variable<T>& a) { return mul_scalar(a, s); }
template <class T> Variable<T> operator/(const Variable<T>& a, T s) { return mul_scalar(a, T(1) / s); }
template <class T> Variable<T> operator/(T s, const Variable<T>& a) { return rdiv_scalar(a, s); }

}  // namespace qkv
