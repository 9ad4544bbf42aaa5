#pragma once
/// @file
/// Embedding lookup.

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// out[..., :] = weight[ids[...], :]. weight (V, C), ids any shape -> (ids.shape..., C).
/// Ids outside [0, V) throw ValueError naming the id and its position. The backward scatter-adds
/// rows into weight's gradient (an id used twice gets both gradients).
template <class T> Variable<T> embedding(const Variable<T>& weight, const IndexArray& ids);

}  // namespace qkv
