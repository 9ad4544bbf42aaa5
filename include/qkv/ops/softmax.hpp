#pragma once
/// @file
/// Softmax and log-softmax over one axis, numerically stable (the row maximum is subtracted).
/// Entries of -inf get probability 0; a slice that is entirely -inf gives all zeros (softmax) and
/// -inf (log_softmax) with zero gradient, where PyTorch gives NaN: a deliberate difference, so
/// that fully masked attention rows stay finite.

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// y_i = exp(x_i - max) / sum_j exp(x_j - max) along `axis`.
template <class T> Variable<T> softmax(const Variable<T>& x, int axis = -1);
/// y_i = x_i - max - log sum_j exp(x_j - max) along `axis`.
template <class T> Variable<T> log_softmax(const Variable<T>& x, int axis = -1);

}  // namespace qkv
