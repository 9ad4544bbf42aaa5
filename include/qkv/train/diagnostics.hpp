#pragma once
/// @file
/// What attention does, measured: statistics of attention weights w (B, H, Tq, Tk), rows summing
/// to 1 (fully masked rows, all zero, are skipped).

#include "qkv/tensor/tensor.hpp"

namespace qkv::train {

struct AttentionStats {
  double entropy = 0;     ///< mean over rows of -sum_j w_j log w_j (nats); 0 = one-hot rows
  double max_weight = 0;  ///< mean over rows of max_j w_j (saturation; 1 = one-hot rows)
};
AttentionStats attention_stats(const Array<float>& weights);

/// Head redundancy: mean over examples and head pairs of the cosine similarity between two
/// heads' (Tq x Tk) maps. 1 = every head attends identically. NaN with a single head.
double head_redundancy(const Array<float>& weights);

}  // namespace qkv::train
