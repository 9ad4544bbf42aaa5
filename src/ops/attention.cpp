#include "qkv/ops/attention.hpp"

#include <cmath>
#include <limits>

#include "qkv/kernels/attention.hpp"
#include "qkv/ops/dropout.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/shape.hpp"
#include "qkv/ops/softmax.hpp"

namespace qkv {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Sizes of one call: q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv).
struct Dims {
  std::size_t B, H, Tq, Tk, D, Dv;
  Shape scores() const { return {B, H, Tq, Tk}; }
};

template <class T>
Dims check_shapes(const Variable<T>& q, const Variable<T>& k, const Variable<T>& v) {
  const Shape &sq = q.shape(), &sk = k.shape(), &sv = v.shape();
  const bool ok = sq.size() == 4 && sk.size() == 4 && sv.size() == 4 && sk[0] == sq[0] &&
                  sv[0] == sq[0] && sk[1] == sq[1] && sv[1] == sq[1] && sk[3] == sq[3] &&
                  sv[2] == sk[2];
  if (!ok)
    throw ShapeError(std::string(kOp) +
                     ": expected q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv); got q " +
                     shape_str(sq) + ", k " + shape_str(sk) + ", v " + shape_str(sv));
  return {sq[0], sq[1], sq[2], sk[2], sq[3], sv[3]};
}

template <class T>
kernels::AttentionMasks<T> kernel_masks(const AttentionMask<T>& mask, bool causal, std::size_t causal_offset,
                                        const Dims& dims) {
  kernels::AttentionMasks<T> m;
  m.causal = causal;
  m.causal_offset = causal_offset;
  if (mask.allowed()) {
    m.allowed = mask.allowed()->data();
    m.allowed_strides =
        mask_strides(Shape(mask.allowed()->shape().begin(), mask.allowed()->shape().end()), dims.scores(),
                     std::string(kOp) + ": boolean mask");
  }
  if (mask.bias()) {
    m.bias = mask.bias()->data();
    m.bias_strides = mask_strides(mask.bias()->shape(), dims.scores(), std::string(kOp) + ": float mask");
  }
  return m;
}

template <class T>
AttentionOutput<T> fused(const Variable<T>& q, const Variable<T>& k, const Variable<T>& v,
                         const AttentionMask<T>& mask, const AttentionOptions& opt, const Dims& n,
                         T scale) {
  kernels::AttentionDropout drop;
  if (opt.dropout_p > 0) {
    Generator& gen = opt.generator ? *opt.generator : default_generator();
    drop = {opt.dropout_p, gen.seed(), gen.reserve(n.B * n.H * n.Tq * n.Tk, DropoutDraws::kBlock)};
  }
  Array<T> out = Array<T>::from_shape({n.B, n.H, n.Tq, n.Dv});
  Array<T> lse = Array<T>::from_shape({n.B, n.H, n.Tq});
  Array<T> weights;
  if (opt.need_weights) weights = Array<T>::from_shape(n.scores());
  kernels::attention_forward<T>(out.data(), lse.data(), opt.need_weights ? weights.data() : nullptr,
                                q.data(), k.data(), v.data(), kernel_masks(mask, opt.is_causal, opt.causal_offset, n),
                                drop, scale, n.B, n.H, n.Tq, n.Tk, n.D, n.Dv);

  AttentionOutput<T> result;
  if (opt.need_weights) result.weights = Variable<T>(std::move(weights));
  result.output = record_op<T>(
      kOp, std::move(out), needs_grad(q, k, v),
      [q, k, v, mask, causal = opt.is_causal, offset = opt.causal_offset, drop, scale, n, lse = std::move(lse)](const Array<T>& gout,
                                                                                   const Array<T>& o) {
        // The kernel recomputes the weights block by block from the saved log-sum-exp and the
        // output o.
        Array<T> gq, gk, gv;
        if (q.requires_grad()) gq = Array<T>::from_shape(q.shape());
        if (k.requires_grad()) gk = Array<T>::from_shape(k.shape());
        if (v.requires_grad()) gv = Array<T>::from_shape(v.shape());
        kernels::attention_backward<T>(
            q.requires_grad() ? gq.data() : nullptr, k.requires_grad() ? gk.data() : nullptr,
            v.requires_grad() ? gv.data() : nullptr, gout.data(), q.data(), k.data(), v.data(),
            o.data(), lse.data(), kernel_masks(mask, causal, offset, n), drop, scale, n.B, n.H, n.Tq, n.Tk,
            n.D, n.Dv);
        if (q.requires_grad()) q.accumulate_grad(std::move(gq), kOp);
        if (k.requires_grad()) k.accumulate_grad(std::move(gk), kOp);
        if (v.requires_grad()) v.accumulate_grad(std::move(gv), kOp);
      });
  return result;
}

// The reference, written with engine ops (every intermediate a (B, H, Tq, Tk) tensor of the graph).
template <class T>
Variable<T> masked_scores(const Variable<T>& q, const Variable<T>& k, const AttentionMask<T>& mask,
                          const AttentionOptions& opt, const Dims& n, T scale, const ScoresHook<T>& on_scores) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  Variable<T> scores = mul_scalar(matmul(q, transpose(k, -2, -1)), scale);
  if (mask.bias()) scores = add(scores, Variable<T>(*mask.bias()));
  if (mask.allowed()) scores = masked_fill(scores, Mask(!*mask.allowed()), kNegInf);
  if (opt.is_causal) {
    Mask future = Mask::from_shape({n.Tq, n.Tk});
    for (std::size_t i = 0; i < n.Tq; ++i)
      for (std::size_t j = 0; j < n.Tk; ++j) future(i, j) = j > i + opt.causal_offset;
    scores = masked_fill(scores, future, kNegInf);
  }
  return on_scores ? on_scores(scores) : scores;
}

template <class T>
AttentionOutput<T> composite(const Variable<T>& q, const Variable<T>& k, const Variable<T>& v,
                             const AttentionMask<T>& mask, const AttentionOptions& opt,
                             const Dims& n, T scale, const ScoresHook<T>& on_scores) {
  Variable<T> weights = softmax(masked_scores(q, k, mask, opt, n, scale, on_scores), -1);
  if (opt.dropout_p > 0)
    weights =
        dropout(weights, opt.dropout_p, true, opt.generator ? *opt.generator : default_generator());
  AttentionOutput<T> result;
  result.output = matmul(weights, v);
  if (opt.need_weights) result.weights = weights;
  return result;
}

}  // namespace

kernels::Strides4 mask_strides(const Shape& shape, const Shape& target, const std::string& what) {
  std::size_t strides[4] = {0, 0, 0, 0};
  bool ok = shape.size() <= 4 && target.size() == 4;
  std::size_t stride = 1;
  for (std::size_t d = shape.size(); ok && d-- > 0;) {
    const std::size_t t = 4 - shape.size() + d;
    if (shape[d] == target[t])
      strides[t] = target[t] == 1 ? 0 : stride;
    else if (shape[d] != 1)
      ok = false;
    stride *= shape[d];
  }
  if (!ok) {
    // PyTorch also takes a 3-D (B * H, Tq, Tk) attn_mask; qkv wants its 4-D view.
    const bool torch_3d = shape.size() == 3 && target.size() == 4 && shape[0] == target[0] * target[1] &&
                          shape[1] == target[2] && shape[2] == target[3] && target[1] > 1;
    throw ShapeError(what + " of shape " + shape_str(shape) +
                     " does not broadcast to the scores' shape (B, H, Tq, Tk) = " + shape_str(target) +
                     (torch_3d ? "; a PyTorch-style (B * H, Tq, Tk) mask must be reshaped to (B, H, Tq, Tk) = " +
                                     shape_str(target) + " first (batch-major, heads within a batch row)"
                               : std::string()));
  }
  return {strides[0], strides[1], strides[2], strides[3]};
}

template <class T>
AttentionOutput<T> scaled_dot_product_attention(const Variable<T>& q, const Variable<T>& k,
                                                const Variable<T>& v, const AttentionMask<T>& mask,
                                                const AttentionOptions& options, const ScoresHook<T>& on_scores) {
  const Dims n = check_shapes(q, k, v);
  kernel_masks(mask, options.is_causal, options.causal_offset, n);  // validates the mask shapes
  if (!(options.dropout_p >= 0.0 && options.dropout_p < 1.0))
    throw ValueError(std::string(kOp) + ": dropout_p must be in [0, 1), got " +
                     std::to_string(options.dropout_p));
  const T scale = options.scale ? T(*options.scale) : T(1.0 / std::sqrt(double(n.D)));
  return options.impl == AttentionImpl::Fused && !on_scores ? fused(q, k, v, mask, options, n, scale)
                                                            : composite(q, k, v, mask, options, n, scale, on_scores);
}

template <class T>
Array<T> cached_attention(const Variable<T>& q, const Array<T>& k_cache, const Array<T>& v_cache, std::size_t length,
                          bool causal, std::optional<double> scale) {
  if (needs_grad(q))
    throw Error("cached_attention: decoding with a KV cache records no gradient; run it under NoGradGuard");
  const Shape& sq = q.shape();
  const bool ok = sq.size() == 4 && k_cache.dimension() == 4 && v_cache.dimension() == 4 && k_cache.shape()[0] == sq[0] &&
                  k_cache.shape()[1] == sq[1] && k_cache.shape()[3] == sq[3] && v_cache.shape()[0] == sq[0] &&
                  v_cache.shape()[1] == sq[1] && v_cache.shape()[2] == k_cache.shape()[2] &&
                  length <= k_cache.shape()[2] && length >= (causal ? sq[2] : 1);
  if (!ok)
    throw ShapeError("cached_attention: expected q (B, H, Tq, D), caches (B, H, capacity, D) and (B, H, capacity, Dv) "
                     "holding length >= Tq keys; got q " + shape_str(sq) + ", k " + shape_str(k_cache.shape()) + ", v " +
                     shape_str(v_cache.shape()) + ", length " + std::to_string(length));
  const std::size_t B = sq[0], H = sq[1], Tq = sq[2], D = sq[3], Dv = v_cache.shape()[3], cap = k_cache.shape()[2];
  kernels::AttentionMasks<T> m;
  m.causal = causal;
  m.causal_offset = causal ? length - Tq : 0;
  Array<T> out = Array<T>::from_shape({B, H, Tq, Dv});
  Array<T> lse = Array<T>::from_shape({B, H, Tq});
  kernels::attention_forward<T>(out.data(), lse.data(), nullptr, q.data(), k_cache.data(), v_cache.data(), m, {},
                                scale ? T(*scale) : T(1.0 / std::sqrt(double(D))), B, H, Tq, length, D, Dv, cap);
  return out;
}

template Array<float> cached_attention(const Variable<float>&, const Array<float>&, const Array<float>&, std::size_t, bool,
                                       std::optional<double>);
template Array<double> cached_attention(const Variable<double>&, const Array<double>&, const Array<double>&, std::size_t,
                                        bool, std::optional<double>);

template AttentionOutput<float> scaled_dot_product_attention(const Variable<float>&,
                                                             const Variable<float>&,
                                                             const Variable<float>&,
                                                             const AttentionMask<float>&,
                                                             const AttentionOptions&, const ScoresHook<float>&);
template AttentionOutput<double> scaled_dot_product_attention(const Variable<double>&,
                                                              const Variable<double>&,
                                                              const Variable<double>&,
                                                              const AttentionMask<double>&,
                                                              const AttentionOptions&, const ScoresHook<double>&);

}  // namespace qkv
