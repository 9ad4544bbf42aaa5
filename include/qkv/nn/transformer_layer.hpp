#pragma once
/// @file
/// Transformer encoder and decoder layers, like torch.nn.TransformerEncoderLayer /
/// TransformerDecoderLayer (batch_first=True), pre-LN or post-LN.

#include <optional>

#include "qkv/nn/dropout.hpp"
#include "qkv/nn/feed_forward.hpp"
#include "qkv/nn/layer_norm.hpp"
#include "qkv/nn/multi_head_attention.hpp"

namespace qkv::nn {

/// The normalisation of every block and of the final output: LayerNorm (where norm_first puts
/// it), or none at all (x = x + attn(x); x = x + ff(x): the residual stream of Tracr's compiled
/// models, which qkv compile writes).
enum class Norm { Layer, None };
/// The names configs use: "layer", "none".
const NameTable<Norm>& norm_names();

/// The options of one layer: its width, and the options of its attention and feed-forward blocks
/// (nested, as PyTorch nests them). The layer fills in what its blocks share with it: the
/// attention's embed_dim and the feed-forward's dim are d_model, the feed-forward's dropout is
/// the layer's dropout (attention() and feed_forward() give the options the blocks get).
struct TransformerLayerOptions {
  TransformerLayerOptions() {
    attn.num_heads = 4;
    ff.hidden = 256;
  }
  std::size_t d_model = 64;        ///< C
  MultiHeadAttentionOptions attn;  ///< heads (num_heads, head_dim), attention dropout, impl, scale
  FeedForwardOptions ff;           ///< hidden (d_ff) and activation
  double dropout = 0.0;            ///< on residual branches and inside the feed-forward block
  bool norm_first = true;          ///< pre-LN (true) or post-LN (false, the 2017 paper's layout)
  Norm norm = Norm::Layer;         ///< none: no LayerNorm anywhere (norm_first then changes nothing)
  double layer_norm_eps = 1e-5;
  /// Encoder layers only: attention and its residual, no feed-forward block (and no norm2): the
  /// attention-only transformers of the induction-head literature (Elhage et al. 2021).
  bool attn_only = false;

  /// attn with embed_dim = d_model.
  MultiHeadAttentionOptions attention() const;
  /// ff with dim = d_model and dropout = dropout.
  FeedForwardOptions feed_forward() const;
  /// Every rule of the layer and its blocks, reported with this struct's field paths
  /// ("d_model", "attn.num_heads", "ff.hidden", ...); throws OptionError.
  void validate() const;
};

/// One encoder layer. x (B, T, C) -> (B, T, C):
///   pre-LN:  x = x + drop1(attn(norm1(x)));  x = x + ff(norm2(x))
///   post-LN: x = norm1(x + drop1(attn(x)));  x = norm2(x + ff(x))
///   norm none: x = x + drop1(attn(x));       x = x + ff(x)
/// where ff includes its own output dropout (PyTorch's dropout2).
/// Parameters: "attn.*" (MultiHeadAttention), "ff.fc1.*", "ff.fc2.*", "norm1.*", "norm2.*"
/// (with attn_only: "attn.*", "norm1.*"; with norm none no norm1, norm2). Init: attn, then ff,
/// from `gen` (norms start at weight 1, bias 0).
///
/// Hook points of the residual stream, named as TransformerLens names them (B, T, C):
///   hook_resid_pre   the layer's input
///   hook_resid_mid   after the attention's residual add (post-LN: after norm1); not attn_only
///   hook_mlp_in      the stream entering the feed-forward branch (before norm2 in pre-LN); the
///                    residual path does not pass it, so its gradient is the branch's alone
///   hook_mlp_out     the feed-forward branch's output, before it is added
///   hook_resid_post  the layer's output (the layer's own forward hooks see the same value)
/// and the split inputs of the attention (B, H, T, C): hook_q_input, hook_k_input, hook_v_input,
/// each head's own copy of the stream its query, key or value reads (before norm1 in pre-LN,
/// which then normalises each copy). A hook on any of them makes the layer run
/// MultiHeadAttention::forward_per_head (TransformerLens's use_split_qkv_input); unhooked, one
/// input serves every head, as without them.
template <class T>
class TransformerEncoderLayer : public Module<T> {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options, Generator& gen = default_generator());

  /// key_padding_mask (B, T): the keys to ignore (KeyPaddingMask::ignore_where(pad) for PyTorch's).
  /// is_causal: position t attends to positions <= t only. With `cache` (decoding, under
  /// NoGradGuard): x holds the next positions, whose keys and values join the cache.
  Variable<T> forward(const Variable<T>& x, const KeyPaddingMask& key_padding_mask = {},
                      bool is_causal = false, KVCache<T>* cache = nullptr) const;

  const TransformerLayerOptions& options() const { return options_; }
  std::shared_ptr<MultiHeadAttention<T>> attn;
  std::shared_ptr<FeedForward<T>> ff;
  std::shared_ptr<LayerNorm<T>> norm1, norm2;  ///< null with norm none (norm2 also with attn_only)
  std::shared_ptr<Dropout<T>> drop1;
  std::shared_ptr<HookPoint<T>> hook_resid_pre, hook_q_input, hook_k_input, hook_v_input, hook_resid_mid, hook_mlp_in,
      hook_mlp_out, hook_resid_post;  ///< hook_resid_mid, hook_mlp_in, hook_mlp_out: null without ff

 private:
  Variable<T> attention(const Variable<T>& x, const MultiHeadAttentionArgs<T>& args) const;
  Variable<T> mlp(const Variable<T>& y) const;
  TransformerLayerOptions options_;
};

/// One decoder layer. x (B, Tt, C), memory (B, Ts, C) -> (B, Tt, C):
///   pre-LN:  x = x + drop1(self_attn(norm1(x), causal))
///            x = x + drop2(cross_attn(norm2(x), memory))
///            x = x + ff(norm3(x))
///   post-LN: x = norm1(x + drop1(self_attn(x, causal)))
///            x = norm2(x + drop2(cross_attn(x, memory)))
///            x = norm3(x + ff(x))
///   norm none: as pre-LN without the norms.
/// Parameters: "self_attn.*", "cross_attn.*", "ff.*", "norm1.*", "norm2.*", "norm3.*" (no norms
/// with norm none).
template <class T>
class TransformerDecoderLayer : public Module<T> {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options, Generator& gen = default_generator());

  /// tgt_key_padding_mask (B, Tt) and memory_key_padding_mask (B, Ts): the keys to ignore.
  Variable<T> forward(const Variable<T>& x, const Variable<T>& memory,
                      const KeyPaddingMask& tgt_key_padding_mask = {},
                      const KeyPaddingMask& memory_key_padding_mask = {}) const;
  /// Decoding (under NoGradGuard): x (B, Tn, C) holds the next target positions; their
  /// self-attention keys join `self_cache`, and `cross_cache` holds the memory's keys and values
  /// (computed on the first call).
  Variable<T> forward(const Variable<T>& x, const Variable<T>& memory, KVCache<T>& self_cache, KVCache<T>& cross_cache) const;

  const TransformerLayerOptions& options() const { return options_; }
  std::shared_ptr<MultiHeadAttention<T>> self_attn, cross_attn;
  std::shared_ptr<FeedForward<T>> ff;
  std::shared_ptr<LayerNorm<T>> norm1, norm2, norm3;  ///< null with norm none
  std::shared_ptr<Dropout<T>> drop1, drop2;

 private:
  TransformerLayerOptions options_;
};

}  // namespace qkv::nn
