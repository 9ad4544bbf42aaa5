#pragma once
/// @file
/// The tensor type: an xtensor container, row-major and contiguous, in qkv's pooled memory.
/// This is the one header that includes xtensor; everything else includes this.
///
/// Letters used in shape comments throughout qkv: B batch, T sequence (Tq queries, Tk keys),
/// C model width, H heads, D head dim (Dv for values), V vocabulary.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>

#include "qkv/tensor/allocator.hpp"

namespace qkv {

/// An n-dimensional, row-major, contiguous array of T (float for training, double for checks).
template <class T>
using Array = xt::xarray<T, xt::layout_type::row_major, Allocator<T>>;

/// A shape: sizes per dimension (small-vector, no heap use up to rank 4).
using Shape = xt::svector<std::size_t, 4>;

/// Token ids and class labels (pooled memory, like Array).
using Index = std::int64_t;
using IndexArray = xt::xarray<Index, xt::layout_type::row_major, Allocator<Index>>;
/// Boolean masks (attention masks, masked_fill), in pooled memory.
using Mask = xt::xarray<bool, xt::layout_type::row_major, Allocator<bool>>;

/// Base of every error qkv throws.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Shapes that do not fit an op; the message names the op and the shapes.
struct ShapeError : Error {
  using Error::Error;
};
/// A value outside what an op or a file allows (bad index, bad option, bad dtype...).
struct ValueError : Error {
  using Error::Error;
};

/// "(2, 3, 4)"; "()" for a scalar.
std::string shape_str(const Shape& shape);
template <class S>
std::string shape_str(const S& shape) {
  return shape_str(Shape(shape.begin(), shape.end()));
}
/// Product of the sizes.
std::size_t numel(const Shape& shape);

/// A tensor of the given shape, uninitialised / filled.
template <class T>
Array<T> empty(const Shape& shape) {
  return Array<T>::from_shape(shape);
}
template <class T>
Array<T> full(const Shape& shape, T value) {
  Array<T> a = Array<T>::from_shape(shape);
  std::fill(a.begin(), a.end(), value);
  return a;
}
template <class T>
Array<T> zeros(const Shape& shape) {
  return full<T>(shape, T(0));
}
/// A tensor of `shape` holding `values` (row-major); throws if the sizes differ.
template <class T>
Array<T> from_vector(const std::vector<T>& values, const Shape& shape) {
  if (values.size() != numel(shape))
    throw ShapeError("from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                     shape_str(shape));
  Array<T> a = Array<T>::from_shape(shape);
  std::copy(values.begin(), values.end(), a.begin());
  return a;
}
/// Same values in another element type.
template <class To, class From>
Array<To> cast(const Array<From>& a) {
  Array<To> out = Array<To>::from_shape(a.shape());
  const From* src = a.data();
  To* dst = out.data();
  for (std::size_t i = 0, n = a.size(); i < n; ++i) dst[i] = static_cast<To>(src[i]);
  return out;
}

}  // namespace qkv
