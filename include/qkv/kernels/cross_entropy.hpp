#pragma once
/// @file
/// Fused cross-entropy over class logits: log-softmax, target pick and label smoothing in one
/// pass per row, without materialising the (N, V) log-probabilities. logits (N, V), targets (N).
/// With lse = log sum_c exp(x_c) and smoothing s, a counted row's loss is
///   (1 - s) (lse - x_target) + s (lse - mean_c x_c)
/// i.e. (1 - s) (-log p_target) + s mean_c(-log p_c). Rows whose target is ignore_index count 0.
/// Rows run in parallel; results do not depend on the thread count. Targets must be valid
/// (in [0, V) or ignore_index): the op checks them.

#include <cstddef>
#include <cstdint>

namespace qkv::kernels {

/// Writes loss (N) (0 for ignored rows) and lse (N), which the backward reuses.
template <class T>
void cross_entropy_forward(T* loss, T* lse, const T* logits, const std::int64_t* targets, std::size_t N,
                           std::size_t V, std::int64_t ignore_index, T smoothing);

/// dlogits = scale * (softmax(x) - (1 - s) one_hot(target) - s / V) for counted rows, 0 for
/// ignored rows (scale is the upstream gradient over the number of counted rows). Overwrites.
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const std::int64_t* targets,
                            std::size_t N, std::size_t V, std::int64_t ignore_index, T smoothing, T scale);

}  // namespace qkv::kernels
