#pragma once
/// @file
/// Shape ops: all return contiguous row-major copies.

#include <vector>

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// `axis` in [-ndim, ndim) as an index in [0, ndim); otherwise ShapeError
/// "op: axis 3 out of range for shape (2, 3)".
std::size_t normalize_axis(int axis, const Shape& shape, const char* op);

/// Target sizes of reshape, -1 for the one to infer, e.g. reshape(x, {B, T, -1}). Like Shape, a
/// small vector: no heap use up to 4 dimensions.
using ShapeSpec = xt::svector<long, 4>;
/// An order of dimensions, e.g. permute(x, {0, 2, 1, 3}); no heap use up to 4 dimensions.
using Axes = xt::svector<std::size_t, 4>;

/// Same elements in a new shape; one entry may be -1 (inferred). Throws when sizes differ.
template <class T> Variable<T> reshape(const Variable<T>& x, const ShapeSpec& shape);
/// Swap two dimensions (negative counts from the end).
template <class T> Variable<T> transpose(const Variable<T>& x, int dim0, int dim1);
/// Reorder dimensions: out.shape[i] = x.shape[perm[i]].
template <class T> Variable<T> permute(const Variable<T>& x, const Axes& perm);
/// Attention heads of a projection: x (B, T, H*D) -> (B, H, T, D), out[b, h, t, d] = x[b, t, h*D + d].
/// The same values as permute(reshape(x, {B, T, H, D}), {0, 2, 1, 3}) with one copy instead of two.
template <class T> Variable<T> split_heads(const Variable<T>& x, std::size_t H);
/// The inverse of split_heads: x (B, H, T, D) -> (B, T, H*D), in one copy.
template <class T> Variable<T> merge_heads(const Variable<T>& x);
/// Join along `axis`; every other dimension must agree.
template <class T> Variable<T> concat(const std::vector<Variable<T>>& xs, int axis);
/// Split along `axis` into pieces of the given sizes (which must add up to the dimension).
template <class T> std::vector<Variable<T>> split(const Variable<T>& x, const std::vector<std::size_t>& sizes, int axis);
/// x[..., start:stop, ...] along `axis` (0 <= start <= stop <= size).
template <class T> Variable<T> slice(const Variable<T>& x, int axis, std::size_t start, std::size_t stop);
/// x[..., index, ...] along `axis`, which is removed from the shape.
template <class T> Variable<T> select(const Variable<T>& x, int axis, std::size_t index);

}  // namespace qkv
