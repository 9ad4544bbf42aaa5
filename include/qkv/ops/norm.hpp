#pragma once
/// @file
/// Layer normalisation over the last dimension.

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last dimension C, with the biased
/// variance (like torch.nn.functional.layer_norm). x (..., C); gamma and beta (C) or undefined.
template <class T>
Variable<T> layer_norm(const Variable<T>& x, const Variable<T>& gamma, const Variable<T>& beta, double eps = 1e-5);

}  // namespace qkv
