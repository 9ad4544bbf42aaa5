#pragma once
/// @file
/// Multi-head attention, batch-first, like torch.nn.MultiheadAttention(batch_first=True) with
/// separate projections.
///
///   q = w_q(query), k = w_k(key), v = w_v(value), each split into H heads of width D
///   o_h = softmax(q_h k_h^T * scale + mask) v_h          (qkv::scaled_dot_product_attention)
///   output = w_o(concat_h o_h)
///
/// Shapes: query (B, Tq, E), key (B, Tk, kdim), value (B, Tk, vdim) -> output (B, Tq, E);
/// weights (B, H, Tq, Tk), or (B, Tq, Tk) averaged over heads.
///
/// Hook points (children; see HookPoint), named as TransformerLens names them; per-head values
/// are head-major (B, H, ...), where TransformerLens's are (B, T, H, ...):
///   hook_q, hook_k    (B, H, T, D)   the queries and keys that enter the dot products
///   hook_v            (B, H, Tk, Dv) the values
///   hook_attn_scores  (B, H, Tq, Tk) the scaled scores q . k * scale after the masks (-inf where
///                                    a key is masked), before the softmax
///   hook_pattern      (B, H, Tq, Tk) the attention weights (after dropout, as `weights`)
///   hook_z            (B, H, Tq, Dv) each head's output, before the heads are merged and projected
///   hook_head_result  (B, H, Tq, E)  each head's share of the output, z_h W_o[:, h]^T (no bias):
///                                    the output is their sum over h plus w_o's bias
///                                    (TransformerLens: hook_result, (B, T, H, E))
///   hook_result       (B, Tq, E)     the layer's output, after w_o (TransformerLens: hook_attn_out)
/// Decoding with a KV cache runs hook_z and hook_result only (on the new positions).
/// A hook on hook_pattern makes the fused implementation compute the weights (it never builds a
/// Tq x Tk buffer otherwise); a hook on hook_attn_scores, or on hook_pattern while recording a
/// tape, makes the layer run the composite implementation, so the scores and the pattern are part
/// of the graph (gradients reach q and k through them). A hook that replaces the pattern makes the
/// layer attend with the replacement (z = pattern @ v). A hook on hook_head_result makes the layer
/// compute the per-head results (H products instead of one); nothing of this runs unhooked.

#include <optional>
#include <string>

#include "qkv/nn/linear.hpp"
#include "qkv/ops/attention.hpp"
#include "qkv/tensor/names.hpp"
#include "qkv/tensor/options.hpp"

namespace qkv::nn {

struct MultiHeadAttentionOptions {
  std::size_t embed_dim = 0;  ///< E: width of query and output
  std::size_t num_heads = 1;  ///< H
  double dropout = 0.0;       ///< dropout on the attention weights (training mode only)
  bool bias = true;           ///< biases on w_q, w_k, w_v and w_o
  std::size_t kdim = 0;       ///< width of key; 0 = E
  std::size_t vdim = 0;       ///< width of value; 0 = E
  /// D, the width of one head; 0 = E / H (then H must divide E). Nonzero decouples D from E:
  /// the projections map to H * D and w_o maps H * D back to E.
  std::size_t head_dim = 0;
  /// Dv, the width of one head's value and output z; 0 = D. Nonzero decouples the value width
  /// from the query/key width: w_v maps to H * Dv and w_o maps H * Dv back to E (Vaswani et al.
  /// 2017, Table 3 row B varies d_k with d_v fixed). torch.nn.MultiheadAttention has no such option.
  std::size_t value_dim = 0;
  AttentionImpl impl = AttentionImpl::Fused;
  std::optional<double> scale;  ///< default 1 / sqrt(D)
  /// Gain of the Xavier-uniform init of w_q and w_k (w_v keeps gain 1): both are multiplied by
  /// qk_init_gain, so every q . k at step 0 by qk_init_gain^2. With scale 1 (unscaled) and
  /// qk_init_gain = D^(-1/4) the layer computes at step 0 exactly what the scaled default does
  /// (experiments/scale/README.md). Positive; torch.nn.MultiheadAttention has no such option.
  double qk_init_gain = 1.0;
  /// Rotary position embedding of q and k (qkv::rope) at each query's and key's position, after
  /// the heads are split (self-attention of a decoder; Su et al. 2021). Needs D even.
  bool rope = false;
  double rope_base = 10000.0;
  /// embed_dim and num_heads positive, H divides E unless head_dim is set, dropout in [0, 1),
  /// scale positive when set, qk_init_gain positive, D even with rope; throws OptionError.
  void validate() const;
};

/// The keys and values an attention layer has seen, for decoding one step at a time: k (B, H,
/// capacity, D), v (B, H, capacity, Dv), the first `length` positions filled. Capacity grows as
/// needed (reserve() avoids the copies).
template <class T>
struct KVCache {
  Array<T> k, v;
  std::size_t length = 0;
  std::size_t capacity() const { return k.dimension() == 4 ? k.shape()[2] : 0; }
  void clear() { length = 0; }
};

/// The names configs use for AttentionImpl: "fused", "composite".
const NameTable<AttentionImpl>& attention_impl_names();

/// What one forward call attends with.
template <class T>
struct MultiHeadAttentionArgs {
  /// (B, Tk): which keys to ignore, its polarity named where it is built
  /// (`KeyPaddingMask::ignore_where(pad)` for PyTorch's key_padding_mask, true = padding).
  KeyPaddingMask key_padding_mask;
  /// Broadcastable to (B, H, Tq, Tk), e.g. (Tq, Tk): `allowed` is boolean with qkv polarity
  /// (**true = may attend**, the opposite of PyTorch's boolean attn_mask); `bias` is added to the
  /// scores (a float mask; -inf forbids). Both may be given.
  AttentionMask<T> attn_mask;
  bool need_weights = false;         ///< return the attention weights (PyTorch's default is true)
  bool average_attn_weights = true;  ///< weights averaged over heads: (B, Tq, Tk)
  bool is_causal = false;            ///< query i attends keys j <= i only (combined with the masks)
  /// Position of the first query and key (the rotary angle offset; 0 for a whole sequence).
  std::size_t position = 0;
  /// Decoding (inference: under NoGradGuard, no masks, no dropout): the new keys and values are
  /// appended to `cache` and the queries attend everything cached, causally (query i sits at
  /// position cache->length + i). With `fixed_cache` (cross-attention over a memory) the cache
  /// is filled from key and value on first use and read, not appended to, afterwards.
  KVCache<T>* cache = nullptr;
  bool fixed_cache = false;
};

template <class T>
struct MultiHeadAttentionOutput {
  Variable<T> output;   ///< (B, Tq, E)
  /// (B, H, Tq, Tk), or (B, Tq, Tk) when averaged; undefined unless need_weights. After dropout,
  /// as PyTorch. With the Fused impl they are detached (no gradient flows through them).
  Variable<T> weights;
};

/// Parameters (in this order): "w_q.weight" (H*D, E), "w_q.bias" (H*D), "w_k.weight" (H*D, kdim),
/// "w_k.bias", "w_v.weight" (H*D, vdim), "w_v.bias", "w_o.weight" (E, H*D), "w_o.bias" (E).
/// Init (as PyTorch's _reset_parameters): w_q, w_k, w_v weights Xavier-uniform (each matrix on
/// its own fans; PyTorch's packed in_proj_weight uses the fans of the (3E, E) block), w_o weight
/// the nn.Linear default U(-1/sqrt(H*D), 1/sqrt(H*D)), all biases zero.
/// A query whose keys are all masked gives zero attention output (so output = w_o.bias), never
/// NaN (PyTorch gives NaN).
template <class T>
class MultiHeadAttention : public Module<T> {
 public:
  explicit MultiHeadAttention(const MultiHeadAttentionOptions& options, Generator& gen = default_generator());

  /// See the file comment. Throws ShapeError for inputs or masks that do not fit.
  MultiHeadAttentionOutput<T> forward(const Variable<T>& query, const Variable<T>& key, const Variable<T>& value,
                                      const MultiHeadAttentionArgs<T>& args = {}) const;
  /// The same with one input per head: query (B, H, Tq, E), key (B, H, Tk, kdim), value
  /// (B, H, Tk, vdim); head h's q, k and v are projected from its own inputs (rows h D .. (h + 1) D
  /// of w_q, w_k, w_v). Equal to forward() when every head's inputs are the same: the split inputs
  /// of a layer's hook_q_input, hook_k_input, hook_v_input (TransformerLens's use_split_qkv_input).
  MultiHeadAttentionOutput<T> forward_per_head(const Variable<T>& query, const Variable<T>& key, const Variable<T>& value,
                                               const MultiHeadAttentionArgs<T>& args = {}) const;

  /// Attention dropout draws from `gen` (not owned); nullptr = default_generator().
  void set_generator(Generator* gen) { generator_ = gen; }

  const MultiHeadAttentionOptions& options() const { return options_; }
  std::size_t num_heads() const { return options_.num_heads; }
  std::size_t head_dim() const { return head_dim_; }    ///< D, of queries and keys
  std::size_t value_dim() const { return value_dim_; }  ///< Dv, of values and z

  std::shared_ptr<Linear<T>> w_q, w_k, w_v, w_o;
  std::shared_ptr<HookPoint<T>> hook_q, hook_k, hook_v, hook_attn_scores, hook_pattern, hook_z, hook_head_result,
      hook_result;

 private:
  void check_inputs(const Variable<T>& query, const Variable<T>& key, const Variable<T>& value, bool per_head) const;
  // q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv) through the hook points, the attention and w_o.
  MultiHeadAttentionOutput<T> attend(const Variable<T>& q, const Variable<T>& k, const Variable<T>& v,
                                     const MultiHeadAttentionArgs<T>& args) const;
  MultiHeadAttentionOutput<T> forward_cached(const Variable<T>& query, const Variable<T>& key, const Variable<T>& value,
                                             const MultiHeadAttentionArgs<T>& args) const;
  MultiHeadAttentionOptions options_;
  std::size_t head_dim_ = 0, value_dim_ = 0;
  Generator* generator_ = nullptr;
};

}  // namespace qkv::nn
