#pragma once
/// @file
/// Fused scaled dot-product attention (FlashAttention-style, on the CPU), forward and backward.
///
///   S = scale * Q K^T + bias, S[i,j] = -inf where not allowed (mask false, or j > i when causal)
///   P = softmax(S) row by row;  Pd = P * keep / (1 - p) (dropout);  O = Pd V
///
/// The forward visits keys block by block with an online softmax (running row maximum m, running
/// sum l, accumulator rescaled by exp(m_old - m_new)) and keeps one log-sum-exp per query row,
/// lse = m + log l. The backward recomputes P = exp(S - lse) block by block. Memory beyond the
/// inputs and outputs is a few blocks per thread: no Tq x Tk buffer unless weights are requested.
///
/// A query row with no allowed key gets O = 0 and lse = +inf (so the backward gives it zero
/// gradients), never NaN.
///
/// Dropout: element (b, h, i, j) is dropped iff DropoutDraws(seed, p).dropped(first + ((b*H + h)*Tq + i)*Tk + j),
/// the mask qkv::dropout draws on a (B, H, Tq, Tk) tensor with the same generator state.
///
/// Results do not depend on the number of threads (bitwise).
///
/// bfloat16 products (float only; `lowered` given and not empty): the products of the forward and
/// the backward take bfloat16 operands (q, k, v rounded once by lower_attention for both, dout
/// once; each block of weights, and of dS, rounded before its product) and accumulate in float32;
/// softmax, lse, out and the gradients stay float32.

#include <cstddef>
#include <cstdint>

#include "qkv/kernels/bf16.hpp"

namespace qkv::kernels {

/// Element strides of a mask broadcast to (B, H, Tq, Tk): element (b, h, i, j) is at
/// ptr[b*b_ + h*h_ + i*i_ + j*j_]; a stride of 0 broadcasts that dimension.
struct Strides4 {
  std::size_t b = 0, h = 0, i = 0, j = 0;
};

/// The masks of one attention call; all optional (nullptr / false).
template <class T>
struct AttentionMasks {
  const bool* allowed = nullptr;  ///< true = may attend
  Strides4 allowed_strides;
  const T* bias = nullptr;  ///< added to the scaled scores
  Strides4 bias_strides;
  bool causal = false;  ///< key j allowed only when j <= i + causal_offset
  /// 0: top-left aligned (PyTorch's is_causal); Tk - Tq: bottom-right, for Tq new queries that
  /// follow Tk - Tq cached keys (decoding with a KV cache).
  std::size_t causal_offset = 0;
};

/// q (B, H, Tq, D), k and v rounded to bfloat16 for a call's forward and backward products.
struct AttentionLowered {
  Bf16Buffer q, k, v;
  bool empty() const { return q.empty(); }
};
/// The copies when `lower` (and T is float), else empty ones (float32 products).
template <class T>
AttentionLowered lower_attention(const T* q, const T* k, const T* v, std::size_t q_size, std::size_t k_size,
                                 std::size_t v_size, bool lower) {
  return {lowered(q, q_size, lower), lowered(k, k_size, lower), lowered(v, v_size, lower)};
}

/// Dropout on the weights: p == 0 disables it.
struct AttentionDropout {
  double p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t first = 0;  ///< first counter, from Generator::reserve(B*H*Tq*Tk)
};

/// Forward.
/// out (B, H, Tq, Dv), lse (B, H, Tq), weights (B, H, Tq, Tk) or nullptr (then never computed);
/// q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv); all contiguous row-major.
/// weights = Pd (after dropout, as PyTorch returns them). kv_capacity > 0: k and v are caches
/// (B, H, kv_capacity, D) and (B, H, kv_capacity, Dv) of which the first Tk rows per (b, h) are
/// read (decoding with a KV cache); 0 means kv_capacity = Tk.
template <class T>
void attention_forward(T* out, T* lse, T* weights, const T* q, const T* k, const T* v,
                       const AttentionMasks<T>& masks, const AttentionDropout& dropout, T scale,
                       std::size_t B, std::size_t H, std::size_t Tq, std::size_t Tk, std::size_t D,
                       std::size_t Dv, std::size_t kv_capacity = 0, const AttentionLowered* lowered = nullptr);

/// Backward: writes (assigns, does not add) dq (B, H, Tq, D), dk (B, H, Tk, D), dv (B, H, Tk, Dv);
/// any of them may be nullptr (not computed). dout, out (B, H, Tq, Dv) and lse (B, H, Tq) are the
/// upstream gradient and the forward's outputs; the masks, dropout and scale those of the forward.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const AttentionMasks<T>& masks,
                        const AttentionDropout& dropout, T scale, std::size_t B, std::size_t H,
                        std::size_t Tq, std::size_t Tk, std::size_t D, std::size_t Dv,
                        const AttentionLowered* lowered = nullptr);

}  // namespace qkv::kernels
