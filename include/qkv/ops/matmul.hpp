#pragma once
/// @file
/// Matrix products on BLAS.

#include "qkv/autograd/variable.hpp"

namespace qkv {

/// Matrix product over the last two dimensions: a (..., M, K) @ b (..., K, N) -> (..., M, N).
/// Leading (batch) dimensions must be equal, or one operand is 2-D and is shared by every batch
/// entry (x (B, T, C) @ W (C, N)). Forward and both backward products are GEMMs.
template <class T> Variable<T> matmul(const Variable<T>& a, const Variable<T>& b);

/// Affine map like torch.nn.functional.linear: y = x @ W^T + b, x (..., in), W (out, in),
/// b (out) or undefined -> y (..., out). One GEMM per pass; the bias gradient is a column sum.
template <class T> Variable<T> linear(const Variable<T>& x, const Variable<T>& weight, const Variable<T>& bias = {});

}  // namespace qkv
