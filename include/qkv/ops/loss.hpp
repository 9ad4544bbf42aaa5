#pragma once
/// @file
/// Losses.

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// Cross-entropy over class logits, like torch.nn.functional.cross_entropy with reduction "mean":
/// logits (..., V), targets (...) of class ids in [0, V) or `ignore_index`. With label smoothing
/// s, the target distribution is (1 - s) one_hot + s / V. The result is the mean over counted
/// (non-ignored) targets; 0 with zero gradient when every target is ignored. A target outside
/// [0, V) that is not ignore_index throws ValueError.
template <class T>
Variable<T> cross_entropy(const Variable<T>& logits, const IndexArray& targets, Index ignore_index = -100,
                          double label_smoothing = 0.0);

}  // namespace qkv
