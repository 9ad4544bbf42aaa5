#include "qkv/ops/reduce.hpp"

#include "qkv/kernels/elementwise.hpp"
#include "qkv/ops/shape.hpp"

namespace qkv {
namespace {

namespace k = kernels;

struct Reduction {
  xt::svector<bool, 4> reduce;  // per input dimension
  Shape keep_shape;             // input shape with reduced dimensions set to 1
  Shape out_shape;              // keep_shape, or without the reduced dimensions
  std::size_t count = 1;        // elements summed into each output
};

Reduction plan_reduction(const Shape& shape, const std::vector<int>& axes, bool keepdims, const char* op) {
  Reduction r;
  r.reduce.assign(shape.size(), axes.empty());
  for (int axis : axes) {
    const std::size_t d = normalize_axis(axis, shape, op);
    if (r.reduce[d])
      throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " appears twice for shape " +
                       shape_str(shape));
    r.reduce[d] = true;
  }
  for (std::size_t d = 0; d < shape.size(); ++d) {
    r.keep_shape.push_back(r.reduce[d] ? 1 : shape[d]);
    if (r.reduce[d]) r.count *= shape[d];
    if (!r.reduce[d] || keepdims) r.out_shape.push_back(r.keep_shape.back());
  }
  return r;
}

template <class T>
Variable<T> sum_or_mean(const Variable<T>& x, const std::vector<int>& axes, bool keepdims, bool mean) {
  const char* op = mean ? "mean" : "sum";
  Reduction r = plan_reduction(x.shape(), axes, keepdims, op);
  Array<T> y = Array<T>::from_shape(r.out_shape);
  k::sum_axes(x.data(), x.shape(), r.reduce.data(), y.data());
  const T scale = mean ? T(1) / T(r.count) : T(1);
  if (mean) {
    const T n = T(r.count);
    k::map(y.data(), y.data(), y.size(), [n](T v) { return v / n; });
  }
  return record_op<T>(op, std::move(y), needs_grad(x), [x = x.without_value(), keep = r.keep_shape, scale, op](const Array<T>& g) {
    // Every input element of a slice contributed once (sum) or 1/count (mean) to its output.
    Array<T> gx = Array<T>::from_shape(x.shape());
    k::broadcast_to(g.data(), keep, gx.data(), x.shape(), scale);
    x.accumulate_grad(std::move(gx), op);
  });
}

}  // namespace

template <class T>
Variable<T> sum(const Variable<T>& x, const std::vector<int>& axes, bool keepdims) {
  return sum_or_mean(x, axes, keepdims, false);
}

template <class T>
Variable<T> mean(const Variable<T>& x, const std::vector<int>& axes, bool keepdims) {
  return sum_or_mean(x, axes, keepdims, true);
}

template <class T>
Variable<T> max(const Variable<T>& x, int axis, bool keepdims) {
  const Shape& shape = x.shape();
  const std::size_t d = normalize_axis(axis, shape, "max");
  const std::size_t R = shape[d];
  if (R == 0) throw ShapeError("max: cannot reduce an empty axis " + std::to_string(axis) + " of shape " + shape_str(shape));
  std::size_t O = 1, I = 1;
  for (std::size_t q = 0; q < d; ++q) O *= shape[q];
  for (std::size_t q = d + 1; q < shape.size(); ++q) I *= shape[q];
  Shape out_shape = shape;
  if (keepdims)
    out_shape[d] = 1;
  else
    out_shape.erase(out_shape.begin() + long(d));
  Array<T> y = Array<T>::from_shape(out_shape);
  std::vector<std::int64_t> arg(O * I);
  k::max_middle(x.data(), y.data(), arg.data(), O, R, I);
  return record_op<T>("max", std::move(y), needs_grad(x), [x = x.without_value(), arg = std::move(arg), O, R, I](const Array<T>& g) {
    // Only the element that was selected (the first maximum) moves the output.
    Array<T> gx = zeros<T>(x.shape());
    T* GX = gx.data();
    const T* G = g.data();
    for (std::size_t o = 0; o < O; ++o)
      for (std::size_t i = 0; i < I; ++i) GX[(o * R + std::size_t(arg[o * I + i])) * I + i] = G[o * I + i];
    x.accumulate_grad(std::move(gx), "max");
  });
}

#define QKV_INSTANTIATE(T)                                                    \
  template Variable<T> sum(const Variable<T>&, const std::vector<int>&, bool); \
  template Variable<T> mean(const Variable<T>&, const std::vector<int>&, bool); \
  template Variable<T> max(const Variable<T>&, int, bool);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv
