#pragma once
/// @file
/// Scaled dot-product attention, the functional core of every attention layer:
///
///   scores = (q @ k^T) * scale  (+ float mask)   (masked positions: -inf)
///   weights = dropout(softmax(scores, axis=-1), p)
///   out = weights @ v
///
/// q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv) -> out (B, H, Tq, Dv),
/// weights (B, H, Tq, Tk).
///
/// Mask polarity is that of torch.nn.functional.scaled_dot_product_attention: in a boolean mask,
/// **true means "may attend"**. Where a boolean mask is built, its polarity is named
/// (AttentionMask<T>::attend_where / ignore_where, KeyPaddingMask::ignore_where / attend_where),
/// so a mask of the other polarity cannot be passed unnoticed. A query row whose keys are all
/// masked gives a zero output row and zero gradients, never NaN.
///
/// Dropout draws the mask qkv::dropout would draw on the (B, H, Tq, Tk) weights from the same
/// generator state, so both implementations agree under dropout. See docs/attention.md.

#include <functional>
#include <optional>

#include "qkv/autograd/variable.hpp"
#include "qkv/kernels/attention.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv {

/// What the scores are masked with; each part broadcastable (NumPy rules, rank <= 4) to
/// (B, H, Tq, Tk). A boolean mask says which way it points where it is made, so that a mask of
/// the other polarity cannot be passed by mistake (a plain Mask does not convert):
///
///   AttentionMask<T>::attend_where(m)   true = may attend (qkv's polarity)
///   AttentionMask<T>::ignore_where(m)   true = may not attend: PyTorch's boolean attn_mask
///                                        (torch.nn.MultiheadAttention, F.scaled_dot_product_attention
///                                        takes the opposite: use attend_where there)
///   AttentionMask<T>::additive(b)       added to the scores (PyTorch's float attn_mask; -inf forbids)
///
/// `.with_additive(b)` adds a float part to a boolean mask. PyTorch's 3-D (B * H, Tq, Tk) masks
/// are reshaped to (B, H, Tq, Tk) first (the error for one says so).
template <class T>
class AttentionMask {
 public:
  AttentionMask() = default;  ///< no mask
  static AttentionMask attend_where(Mask allowed) {
    AttentionMask m;
    m.allowed_ = std::move(allowed);
    return m;
  }
  static AttentionMask ignore_where(const Mask& ignored) { return attend_where(Mask(!ignored)); }
  static AttentionMask additive(Array<T> bias) { return AttentionMask().with_additive(std::move(bias)); }
  AttentionMask with_additive(Array<T> bias) const {
    AttentionMask m = *this;
    m.bias_ = std::move(bias);
    return m;
  }
  const std::optional<Mask>& allowed() const { return allowed_; }  ///< true = may attend
  const std::optional<Array<T>>& bias() const { return bias_; }    ///< added to the scores
  bool empty() const { return !allowed_ && !bias_; }

 private:
  std::optional<Mask> allowed_;
  std::optional<Array<T>> bias_;
};

/// Which keys of each batch row may be attended: a (B, Tk) boolean mask whose polarity is named
/// where it is built (a plain Mask does not convert):
///
///   KeyPaddingMask::ignore_where(pad)    true = padding, ignore that key: PyTorch's
///                                        key_padding_mask (nn.MultiheadAttention, nn.Transformer*)
///   KeyPaddingMask::attend_where(valid)  true = a real token that may be attended
///
/// Default-constructed: no key is ignored.
class KeyPaddingMask {
 public:
  KeyPaddingMask() = default;  ///< every key may be attended
  static KeyPaddingMask ignore_where(Mask ignored) {
    KeyPaddingMask m;
    m.ignored_ = std::move(ignored);
    return m;
  }
  static KeyPaddingMask attend_where(const Mask& valid) { return ignore_where(Mask(!valid)); }
  const std::optional<Mask>& ignored() const { return ignored_; }  ///< (B, Tk), true = ignore
  bool empty() const { return !ignored_; }

 private:
  std::optional<Mask> ignored_;
};

/// Which implementation runs. Both give the same results (1e-10 in float64, 1e-5 in float32).
enum class AttentionImpl {
  Fused,     ///< one OpenMP kernel, online softmax, O(T) memory without weights (the default);
             ///< see kernels/attention.hpp
  Composite  ///< engine ops: matmul, scale, mask, softmax, dropout, matmul (the reference)
};

struct AttentionOptions {
  double dropout_p = 0.0;               ///< dropout on the weights (applied as given: pass 0 in eval)
  bool is_causal = false;               ///< query i may attend keys j <= i (top-left aligned, as PyTorch)
  /// With is_causal: query i may attend keys j <= i + causal_offset (Tk - Tq aligns the last
  /// query with the last key: new queries after cached keys).
  std::size_t causal_offset = 0;
  std::optional<double> scale;          ///< default 1/sqrt(D); 1 disables scaling
  bool need_weights = false;            ///< also return the (B, H, Tq, Tk) weights
  AttentionImpl impl = AttentionImpl::Fused;
  Generator* generator = nullptr;       ///< dropout randomness; default_generator() when null
};

template <class T>
struct AttentionOutput {
  Variable<T> output;   ///< (B, H, Tq, Dv)
  /// (B, H, Tq, Tk) after dropout (as PyTorch returns them); undefined unless need_weights.
  /// Composite: part of the graph. Fused: a detached copy (gradients flow through `output`).
  Variable<T> weights;
};

/// Element strides that read a mask of `shape` as if broadcast (NumPy rules, rank <= 4) to the
/// rank-4 `target` (B, H, Tq, Tk): element (b, h, i, j) is at b*s.b + h*s.h + i*s.i + j*s.j, a
/// stride of 0 repeating a dimension. Throws ShapeError "<what> of shape ... does not broadcast to
/// the scores' shape (B, H, Tq, Tk) = ..." otherwise. The one mask-broadcast rule of qkv.
kernels::Strides4 mask_strides(const Shape& shape, const Shape& target, const std::string& what);

/// Called on the masked, scaled scores (B, H, Tq, Tk) before the softmax, which softmaxes what it
/// returns (a layer's hook_attn_scores); it makes the composite implementation run.
template <class T> using ScoresHook = std::function<Variable<T>(const Variable<T>&)>;

/// See the file comment. Throws ShapeError on mismatched shapes (naming q, k, v, mask and their
/// shapes) and ValueError on dropout_p outside [0, 1).
template <class T>
AttentionOutput<T> scaled_dot_product_attention(const Variable<T>& q, const Variable<T>& k,
                                                const Variable<T>& v,
                                                const AttentionMask<T>& mask = {},
                                                const AttentionOptions& options = {},
                                                const ScoresHook<T>& on_scores = {});

/// Attention of new queries over a KV cache, for decoding (inference: records nothing; throws
/// Error when grad is enabled and q requires it). q (B, H, Tq, D); k_cache (B, H, capacity, D)
/// and v_cache (B, H, capacity, Dv) of which the first `length` positions hold keys and values.
/// causal: query i sits at position length - Tq + i and attends keys j <= length - Tq + i (the
/// decoder's self-attention); otherwise every cached key (cross-attention over a memory).
/// Returns (B, H, Tq, Dv), the numbers of scaled_dot_product_attention on the first `length`
/// keys (the fused kernel, reading the caches in place).
template <class T>
Array<T> cached_attention(const Variable<T>& q, const Array<T>& k_cache, const Array<T>& v_cache, std::size_t length,
                          bool causal, std::optional<double> scale = std::nullopt);

}  // namespace qkv
