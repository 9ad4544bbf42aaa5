#include "qkv/ops/elementwise.hpp"

#include <cmath>

#include "qkv/kernels/elementwise.hpp"

namespace qkv {
namespace {

namespace k = kernels;

// f over one array.
template <class T, class F>
Array<T> map(const Array<T>& a, F f) {
  Array<T> out = Array<T>::from_shape(a.shape());
  k::map(a.data(), out.data(), a.size(), f);
  return out;
}

// f over two arrays of the same shape.
template <class T, class F>
Array<T> zip(const Array<T>& a, const Array<T>& b, F f) {
  Array<T> out = Array<T>::from_shape(a.shape());
  k::zip(a.data(), b.data(), out.data(), a.size(), f);
  return out;
}

// f over two arrays broadcast to `shape`.
template <class T, class F>
Array<T> broadcast(const Array<T>& a, const Array<T>& b, const Shape& shape, F f) {
  Array<T> out = Array<T>::from_shape(shape);
  if (a.shape() == shape && b.shape() == shape)
    k::zip(a.data(), b.data(), out.data(), out.size(), f);
  else
    k::broadcast_map(a.data(), b.data(), out.data(), k::broadcast_plan(a.shape(), b.shape(), shape), f);
  return out;
}

// x itself when a backward reads its value (`needed`), else a handle without the value.
template <class T>
Variable<T> keep_if(const Variable<T>& x, bool needed) {
  return needed ? x : x.without_value();
}

// Add a gradient of the output's (broadcast) shape into x, summed down to x's shape.
template <class T>
void accumulate(const Variable<T>& x, const Array<T>& g, const char* op) {
  if (g.shape() == x.shape())
    x.accumulate_grad(g, op);
  else
    x.accumulate_grad(sum_to(g, x.shape()), op);
}
template <class T>
void accumulate(const Variable<T>& x, Array<T>&& g, const char* op) {
  if (g.shape() == x.shape())
    x.accumulate_grad(std::move(g), op);
  else
    x.accumulate_grad(sum_to(g, x.shape()), op);
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t da = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
    const std::size_t db = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                       " do not broadcast (dimension " + std::to_string(d) + " from the left of the "
                       "result: " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    out[d] = da == 1 ? db : da;
  }
  return out;
}

template <class T>
Array<T> sum_to(const Array<T>& g, const Shape& shape) {
  const Shape& gs = g.shape();
  if (gs == shape) return g;
  const std::size_t lead = gs.size() - std::min(gs.size(), shape.size());
  bool ok = shape.size() <= gs.size();
  xt::svector<bool, 4> reduce(gs.size(), true);
  for (std::size_t d = lead; ok && d < gs.size(); ++d) {
    const std::size_t target = shape[d - lead];
    ok = target == gs[d] || target == 1;
    reduce[d] = target != gs[d];
  }
  if (!ok)
    throw ShapeError("sum_to: cannot sum a gradient of shape " + shape_str(gs) + " to shape " +
                     shape_str(shape) + " (the target must broadcast to the gradient's shape)");
  Array<T> out = Array<T>::from_shape(shape);
  k::sum_axes(g.data(), gs, reduce.data(), out.data());
  return out;
}

template <class T>
Variable<T> add(const Variable<T>& a, const Variable<T>& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "add");
  Array<T> y = broadcast(a.value(), b.value(), shape, [](T x, T z) { return x + z; });
  return record_op<T>("add", std::move(y), needs_grad(a, b), [a = a.without_value(), b = b.without_value()](const Array<T>& g) {
    // y = a + b: each input gets g, summed over the dimensions it was broadcast along.
    if (a.requires_grad()) accumulate(a, g, "add");
    if (b.requires_grad()) accumulate(b, g, "add");
  });
}

template <class T>
Variable<T> sub(const Variable<T>& a, const Variable<T>& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "sub");
  Array<T> y = broadcast(a.value(), b.value(), shape, [](T x, T z) { return x - z; });
  return record_op<T>("sub", std::move(y), needs_grad(a, b), [a = a.without_value(), b = b.without_value()](const Array<T>& g) {
    if (a.requires_grad()) accumulate(a, g, "sub");
    if (b.requires_grad()) accumulate(b, map(g, [](T v) { return -v; }), "sub");
  });
}

template <class T>
Variable<T> mul(const Variable<T>& a, const Variable<T>& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "mul");
  auto times = [](T x, T z) { return x * z; };
  Array<T> y = broadcast(a.value(), b.value(), shape, times);
  return record_op<T>("mul", std::move(y), needs_grad(a, b),
                      [a = keep_if(a, b.requires_grad()), b = keep_if(b, a.requires_grad()), shape, times](const Array<T>& g) {
    // y = a * b: da = g * b, db = g * a (each summed back to its input's shape).
    if (a.requires_grad()) accumulate(a, broadcast(g, b.value(), shape, times), "mul");
    if (b.requires_grad()) accumulate(b, broadcast(g, a.value(), shape, times), "mul");
  });
}

template <class T>
Variable<T> div(const Variable<T>& a, const Variable<T>& b) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "div");
  Array<T> y = broadcast(a.value(), b.value(), shape, [](T x, T z) { return x / z; });
  return record_op<T>("div", std::move(y), needs_grad(a, b), [a, b, shape](const Array<T>& g) {
    // y = a / b: da = g / b, db = -g a / b^2.
    if (a.requires_grad()) accumulate(a, broadcast(g, b.value(), shape, [](T u, T z) { return u / z; }), "div");
    if (b.requires_grad()) {
      Array<T> ga = broadcast(g, a.value(), shape, [](T u, T x) { return u * x; });
      accumulate(b, broadcast(ga, b.value(), shape, [](T u, T z) { return -u / (z * z); }), "div");
    }
  });
}

template <class T>
Variable<T> neg(const Variable<T>& a) {
  return record_op<T>("neg", map(a.value(), [](T x) { return -x; }), needs_grad(a), [a = a.without_value()](const Array<T>& g) {
    a.accumulate_grad(map(g, [](T v) { return -v; }), "neg");
  });
}

template <class T>
Variable<T> add_scalar(const Variable<T>& a, T s) {
  return record_op<T>("add_scalar", map(a.value(), [s](T x) { return x + s; }), needs_grad(a),
                      [a = a.without_value()](const Array<T>& g) { a.accumulate_grad(g, "add_scalar"); });
}

template <class T>
Variable<T> mul_scalar(const Variable<T>& a, T s) {
  return record_op<T>("mul_scalar", map(a.value(), [s](T x) { return x * s; }), needs_grad(a),
                      [a = a.without_value(), s](const Array<T>& g) {
                        a.accumulate_grad(map(g, [s](T v) { return v * s; }), "mul_scalar");
                      });
}

template <class T>
Variable<T> rsub_scalar(const Variable<T>& a, T s) {
  return record_op<T>("rsub_scalar", map(a.value(), [s](T x) { return s - x; }), needs_grad(a),
                      [a = a.without_value()](const Array<T>& g) {
                        a.accumulate_grad(map(g, [](T v) { return -v; }), "rsub_scalar");
                      });
}

template <class T>
Variable<T> rdiv_scalar(const Variable<T>& a, T s) {
  // y = s / a: da = -g s / a^2 = -g y / a.
  return record_op<T>("rdiv_scalar", map(a.value(), [s](T x) { return s / x; }), needs_grad(a),
                      [a, s](const Array<T>& g) {
                        a.accumulate_grad(zip(g, a.value(), [s](T v, T x) { return -v * s / (x * x); }),
                                          "rdiv_scalar");
                      });
}

template <class T>
Variable<T> exp(const Variable<T>& a) {
  return record_op<T>("exp", map(a.value(), [](T x) { return std::exp(x); }), needs_grad(a),
                      [a = a.without_value()](const Array<T>& g, const Array<T>& y) {
                        a.accumulate_grad(zip(g, y, [](T v, T e) { return v * e; }), "exp");
                      });
}

template <class T>
Variable<T> log(const Variable<T>& a) {
  return record_op<T>("log", map(a.value(), [](T x) { return std::log(x); }), needs_grad(a), [a](const Array<T>& g) {
    a.accumulate_grad(zip(g, a.value(), [](T v, T x) { return v / x; }), "log");
  });
}

template <class T>
Variable<T> sqrt(const Variable<T>& a) {
  return record_op<T>("sqrt", map(a.value(), [](T x) { return std::sqrt(x); }), needs_grad(a),
                      [a = a.without_value()](const Array<T>& g, const Array<T>& y) {
                        a.accumulate_grad(zip(g, y, [](T v, T r) { return v / (T(2) * r); }), "sqrt");
                      });
}

template <class T>
Variable<T> pow(const Variable<T>& a, T p) {
  return record_op<T>("pow", map(a.value(), [p](T x) { return std::pow(x, p); }), needs_grad(a),
                      [a, p](const Array<T>& g) {
                        // d/dx x^p = p x^(p-1); exactly 0 for p = 0 (also at x = 0, like torch).
                        a.accumulate_grad(zip(g, a.value(),
                                              [p](T v, T x) { return p == T(0) ? T(0) : v * p * std::pow(x, p - T(1)); }),
                                          "pow");
                      });
}

template <class T>
Variable<T> tanh(const Variable<T>& a) {
  return record_op<T>("tanh", map(a.value(), [](T x) { return std::tanh(x); }), needs_grad(a),
                      [a = a.without_value()](const Array<T>& g, const Array<T>& y) {
                        a.accumulate_grad(zip(g, y, [](T v, T t) { return v * (T(1) - t * t); }), "tanh");
                      });
}

template <class T>
Variable<T> relu(const Variable<T>& a) {
  return record_op<T>("relu", map(a.value(), [](T x) { return x > T(0) ? x : T(0); }), needs_grad(a),
                      [a](const Array<T>& g) {
                        a.accumulate_grad(zip(g, a.value(), [](T v, T x) { return x > T(0) ? v : T(0); }), "relu");
                      });
}

template <class T>
Variable<T> gelu(const Variable<T>& a, GeluApprox approx) {
  const bool tanh_approx = approx == GeluApprox::Tanh;
  Array<T> y = Array<T>::from_shape(a.shape());
  k::gelu_forward(a.data(), y.data(), a.size(), tanh_approx);
  return record_op<T>("gelu", std::move(y), needs_grad(a), [a, tanh_approx](const Array<T>& g) {
    Array<T> ga = Array<T>::from_shape(a.shape());
    k::gelu_backward(g.data(), a.data(), ga.data(), a.size(), tanh_approx);
    a.accumulate_grad(std::move(ga), "gelu");
  });
}

template <class T>
Variable<T> masked_fill(const Variable<T>& a, const Mask& mask, T value) {
  const Shape mshape(mask.shape().begin(), mask.shape().end());
  if (broadcast_shapes(mshape, a.shape(), "masked_fill") != a.shape())
    throw ShapeError("masked_fill: mask of shape " + shape_str(mshape) +
                     " does not broadcast to the input's shape " + shape_str(a.shape()));
  const k::BroadcastPlan plan = k::broadcast_plan(a.shape(), mshape, a.shape());
  Array<T> y = Array<T>::from_shape(a.shape());
  k::broadcast_map(a.data(), mask.data(), y.data(), plan, [value](T x, bool m) { return m ? value : x; });
  return record_op<T>("masked_fill", std::move(y), needs_grad(a), [a = a.without_value(), mask, plan](const Array<T>& g) {
    // Filled positions are constants: no gradient flows to a there.
    Array<T> ga = Array<T>::from_shape(a.shape());
    k::broadcast_map(g.data(), mask.data(), ga.data(), plan, [](T v, bool m) { return m ? T(0) : v; });
    a.accumulate_grad(std::move(ga), "masked_fill");
  });
}

#define QKV_INSTANTIATE(T)                                                        \
  template Array<T> sum_to(const Array<T>&, const Shape&);                        \
  template Variable<T> add(const Variable<T>&, const Variable<T>&);               \
  template Variable<T> sub(const Variable<T>&, const Variable<T>&);               \
  template Variable<T> mul(const Variable<T>&, const Variable<T>&);               \
  template Variable<T> div(const Variable<T>&, const Variable<T>&);               \
  template Variable<T> neg(const Variable<T>&);                                   \
  template Variable<T> add_scalar(const Variable<T>&, T);                         \
  template Variable<T> mul_scalar(const Variable<T>&, T);                         \
  template Variable<T> rsub_scalar(const Variable<T>&, T);                        \
  template Variable<T> rdiv_scalar(const Variable<T>&, T);                        \
  template Variable<T> exp(const Variable<T>&);                                   \
  template Variable<T> log(const Variable<T>&);                                   \
  template Variable<T> sqrt(const Variable<T>&);                                  \
  template Variable<T> pow(const Variable<T>&, T);                                \
  template Variable<T> tanh(const Variable<T>&);                                  \
  template Variable<T> relu(const Variable<T>&);                                  \
  template Variable<T> gelu(const Variable<T>&, GeluApprox);                      \
  template Variable<T> masked_fill(const Variable<T>&, const Mask&, T);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv
