#pragma once
/// @file
/// What attention does, measured: statistics of attention weights w (B, H, Tq, Tk), rows summing
/// to 1 (fully masked rows, all zero, are skipped).

#include <cmath>
#include <string>
#include <vector>

#include "qkv/autograd/variable.hpp"
#include "qkv/data/tasks.hpp"
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

/// Variance of the raw scores q_i . k_j (before the softmax scale) over every example, head and
/// query-key pair (masked pairs included) of q (B, H, Tq, D) and k (B, H, Tk, D): the scores in float
/// (one GEMM per batch and head), their moments in double,
/// E[s^2] - E[s]^2. The quantity the 1/sqrt(d_k) argument is about (Vaswani et al. 2017,
/// footnote 4: with unit-variance components it is d_k); the scaled softmax sees it times scale^2.
double score_variance(const Array<float>& q, const Array<float>& k);

/// L2 norm of one parameter's gradient (0 when it has none), summed in order in double.
double gradient_norm(const Variable<float>& parameter);

}  // namespace qkv::train
namespace qkv::model {
class TaskModel;
}
namespace qkv::train {
/// What one attention layer does on held-out data, and the gradients reaching its W_q and W_k.
struct LayerDiagnostics {
  std::string name;            ///< the layer's dotted name ("blocks.0.attn")
  AttentionStats stats{NAN, NAN};
  double redundancy = NAN;
  double qk_var = NAN;                ///< score_variance of the layer's q and k
  double grad_q = NAN, grad_k = NAN;  ///< L2 norms of the W_q and W_k gradients (set by the caller)
};
/// Per attention layer (model order): statistics of its weights on the first `n` examples of
/// `eval`, read through the layers' hook_pattern, hook_q and hook_k points in eval mode without
/// recording (the model's mode is restored), `batch_size` examples per forward pass. The sums are
/// added in example order, so `batch_size` changes the result only by the forward pass's rounding
/// (OpenBLAS picks its kernel by the matrix sizes); the trainer passes its eval_batch_size (the
/// training micro-batch), whose forward pass reuses the training step's memory.
/// Metric column suffixes: ".entropy", ".max_weight", ".grad_q", ".grad_k", ".redundancy",
/// ".qk_var".
std::vector<LayerDiagnostics> attention_diagnostics(model::TaskModel& model, const data::Batch& eval, std::size_t n,
                                                    std::size_t batch_size);

}  // namespace qkv::train
