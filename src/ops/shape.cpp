#include "qkv/ops/shape.hpp"

#include <algorithm>

#include "qkv/kernels/elementwise.hpp"

namespace qkv {
namespace {

namespace k = kernels;

template <class T>
Array<T> copy_as(const Array<T>& a, const Shape& shape) {
  Array<T> out = Array<T>::from_shape(shape);
  std::copy(a.data(), a.data() + a.size(), out.data());
  return out;
}

// x read as `view` (same elements, e.g. (B, T, H*D) read as (B, T, H, D)), its dimensions
// reordered by perm, stored with shape `out_shape` (empty: the permuted view itself).
template <class T>
Variable<T> permute_impl(const Variable<T>& x, const Shape& view, const Axes& perm, const char* op,
                         Shape out_shape = {}) {
  Shape permuted;
  Axes inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    permuted.push_back(view[perm[i]]);
    inverse[perm[i]] = i;
  }
  if (out_shape.empty()) out_shape = permuted;
  Array<T> y = Array<T>::from_shape(out_shape);
  k::permute(x.data(), view, perm.data(), y.data());
  return record_op<T>(op, std::move(y), needs_grad(x), [x = x.without_value(), permuted, inverse, op](const Array<T>& g) {
    // The gradient moves back through the inverse permutation.
    Array<T> gx = Array<T>::from_shape(x.shape());
    k::permute(g.data(), permuted, inverse.data(), gx.data());
    x.accumulate_grad(std::move(gx), op);
  });
}

// x[..., start:stop, ...] along dimension d, keeping the dimension or (select) dropping it.
template <class T>
Variable<T> slice_impl(const Variable<T>& x, std::size_t d, std::size_t start, std::size_t stop, bool keep,
                       const char* op) {
  const Shape& shape = x.shape();
  std::size_t O = 1, I = 1;
  for (std::size_t q = 0; q < d; ++q) O *= shape[q];
  for (std::size_t q = d + 1; q < shape.size(); ++q) I *= shape[q];
  const std::size_t R = shape[d], len = stop - start;
  Shape out_shape = shape;
  if (keep)
    out_shape[d] = len;
  else
    out_shape.erase(out_shape.begin() + long(d));
  // As (O, R, I) -> (O, len, I): O rows of len * I contiguous values.
  Array<T> y = Array<T>::from_shape(out_shape);
  k::copy_rows(x.data() + start * I, R * I, y.data(), len * I, O, len * I);
  return record_op<T>(op, std::move(y), needs_grad(x), [x = x.without_value(), O, R, I, start, len, op](const Array<T>& g) {
    Array<T> gx = zeros<T>(x.shape());
    k::copy_rows(g.data(), len * I, gx.data() + start * I, R * I, O, len * I);
    x.accumulate_grad(std::move(gx), op);
  });
}

}  // namespace

std::size_t normalize_axis(int axis, const Shape& shape, const char* op) {
  const int n = static_cast<int>(shape.size());
  if (axis < -n || axis >= n)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " out of range for shape " +
                     shape_str(shape));
  return static_cast<std::size_t>(axis < 0 ? axis + n : axis);
}

template <class T>
Variable<T> reshape(const Variable<T>& x, const ShapeSpec& shape) {
  Shape out_shape;
  std::size_t known = 1;
  long infer = -1;
  auto fail = [&](const std::string& why) {
    std::string target = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) target += (i ? ", " : "") + std::to_string(shape[i]);
    throw ShapeError("reshape: cannot reshape " + shape_str(x.shape()) + " (" + std::to_string(x.size()) +
                     " elements) to " + target + "): " + why);
  };
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail("only one dimension can be -1");
      infer = long(i);
      out_shape.push_back(1);
    } else if (shape[i] < 0) {
      fail("negative size " + std::to_string(shape[i]));
    } else {
      out_shape.push_back(std::size_t(shape[i]));
      known *= std::size_t(shape[i]);
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.size() % known != 0) fail("the -1 dimension cannot be inferred");
    out_shape[std::size_t(infer)] = x.size() / known;
  } else if (known != x.size()) {
    fail("sizes differ");
  }
  return record_op<T>("reshape", copy_as(x.value(), out_shape), needs_grad(x), [x = x.without_value()](const Array<T>& g) {
    x.accumulate_grad(copy_as(g, x.shape()), "reshape");
  });
}

template <class T>
Variable<T> transpose(const Variable<T>& x, int dim0, int dim1) {
  const std::size_t d0 = normalize_axis(dim0, x.shape(), "transpose");
  const std::size_t d1 = normalize_axis(dim1, x.shape(), "transpose");
  Axes perm(x.ndim());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::swap(perm[d0], perm[d1]);
  return permute_impl(x, x.shape(), perm, "transpose");
}

template <class T>
Variable<T> permute(const Variable<T>& x, const Axes& perm) {
  bool ok = perm.size() == x.ndim();
  for (std::size_t p : perm) ok = ok && p < perm.size() && std::count(perm.begin(), perm.end(), p) == 1;
  if (!ok) {
    std::string s = "(";
    for (std::size_t i = 0; i < perm.size(); ++i) s += (i ? ", " : "") + std::to_string(perm[i]);
    throw ShapeError("permute: " + s + ") is not a permutation of the " + std::to_string(x.ndim()) +
                     " dimensions of shape " + shape_str(x.shape()));
  }
  return permute_impl(x, x.shape(), perm, "permute");
}

template <class T>
Variable<T> split_heads(const Variable<T>& x, std::size_t H) {
  const Shape& s = x.shape();
  if (s.size() != 3 || H == 0 || s[2] % H != 0)
    throw ShapeError("split_heads: expected x of shape (B, T, H*D) with H = " + std::to_string(H) +
                     " dividing the last dimension, found " + shape_str(s));
  return permute_impl(x, {s[0], s[1], H, s[2] / H}, {0, 2, 1, 3}, "split_heads");
}

template <class T>
Variable<T> merge_heads(const Variable<T>& x) {
  const Shape& s = x.shape();
  if (s.size() != 4) throw ShapeError("merge_heads: expected x of shape (B, H, T, D), found " + shape_str(s));
  return permute_impl(x, s, {0, 2, 1, 3}, "merge_heads", {s[0], s[2], s[1] * s[3]});
}

template <class T>
Variable<T> concat(const std::vector<Variable<T>>& xs, int axis) {
  if (xs.empty()) throw ValueError("concat: no inputs");
  const Shape& first = xs[0].shape();
  const std::size_t d = normalize_axis(axis, first, "concat");
  Shape out_shape = first;
  out_shape[d] = 0;
  for (std::size_t j = 0; j < xs.size(); ++j) {
    const Shape& s = xs[j].shape();
    bool ok = s.size() == first.size();
    for (std::size_t q = 0; ok && q < s.size(); ++q) ok = q == d || s[q] == first[q];
    if (!ok)
      throw ShapeError("concat: input " + std::to_string(j) + " has shape " + shape_str(s) +
                       ", which does not match input 0's shape " + shape_str(first) +
                       " outside axis " + std::to_string(axis));
    out_shape[d] += s[d];
  }
  std::size_t O = 1, I = 1;
  for (std::size_t q = 0; q < d; ++q) O *= first[q];
  for (std::size_t q = d + 1; q < first.size(); ++q) I *= first[q];
  const std::size_t R = out_shape[d];
  Array<T> y = Array<T>::from_shape(out_shape);
  std::vector<std::size_t> offsets;  // start of each input along the axis
  bool grad = false;
  for (std::size_t j = 0, at = 0; j < xs.size(); ++j) {
    const std::size_t r = xs[j].shape()[d];
    k::copy_rows(xs[j].data(), r * I, y.data() + at * I, R * I, O, r * I);
    offsets.push_back(at);
    at += r;
    grad = grad || needs_grad(xs[j]);
  }
  return record_op<T>("concat", std::move(y), grad, [xs, offsets, d, O, R, I](const Array<T>& g) {
    for (std::size_t j = 0; j < xs.size(); ++j) {
      if (!xs[j].requires_grad()) continue;
      const std::size_t r = xs[j].shape()[d];
      Array<T> gx = Array<T>::from_shape(xs[j].shape());
      k::copy_rows(g.data() + offsets[j] * I, R * I, gx.data(), r * I, O, r * I);
      xs[j].accumulate_grad(std::move(gx), "concat");
    }
  });
}

template <class T>
std::vector<Variable<T>> split(const Variable<T>& x, const std::vector<std::size_t>& sizes, int axis) {
  const std::size_t d = normalize_axis(axis, x.shape(), "split");
  std::size_t total = 0;
  for (std::size_t s : sizes) total += s;
  if (total != x.shape()[d]) {
    std::string s = "(";
    for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
    throw ShapeError("split: sizes " + s + ") add up to " + std::to_string(total) + ", but axis " +
                     std::to_string(axis) + " of shape " + shape_str(x.shape()) + " has size " +
                     std::to_string(x.shape()[d]));
  }
  std::vector<Variable<T>> out;
  std::size_t at = 0;
  for (std::size_t s : sizes) {
    out.push_back(slice_impl(x, d, at, at + s, true, "split"));
    at += s;
  }
  return out;
}

template <class T>
Variable<T> slice(const Variable<T>& x, int axis, std::size_t start, std::size_t stop) {
  const std::size_t d = normalize_axis(axis, x.shape(), "slice");
  if (start > stop || stop > x.shape()[d])
    throw ShapeError("slice: range [" + std::to_string(start) + ", " + std::to_string(stop) +
                     ") is not within axis " + std::to_string(axis) + " of shape " + shape_str(x.shape()) +
                     " (expected 0 <= start <= stop <= " + std::to_string(x.shape()[d]) + ")");
  return slice_impl(x, d, start, stop, true, "slice");
}

template <class T>
Variable<T> select(const Variable<T>& x, int axis, std::size_t index) {
  const std::size_t d = normalize_axis(axis, x.shape(), "select");
  if (index >= x.shape()[d])
    throw ShapeError("select: index " + std::to_string(index) + " out of range for axis " +
                     std::to_string(axis) + " of shape " + shape_str(x.shape()));
  return slice_impl(x, d, index, index + 1, false, "select");
}

#define QKV_INSTANTIATE(T)                                                                         \
  template Variable<T> reshape(const Variable<T>&, const ShapeSpec&);                              \
  template Variable<T> transpose(const Variable<T>&, int, int);                                    \
  template Variable<T> permute(const Variable<T>&, const Axes&);                                   \
  template Variable<T> split_heads(const Variable<T>&, std::size_t);                               \
  template Variable<T> merge_heads(const Variable<T>&);                                            \
  template Variable<T> concat(const std::vector<Variable<T>>&, int);                               \
  template std::vector<Variable<T>> split(const Variable<T>&, const std::vector<std::size_t>&, int); \
  template Variable<T> slice(const Variable<T>&, int, std::size_t, std::size_t);                   \
  template Variable<T> select(const Variable<T>&, int, std::size_t);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv
