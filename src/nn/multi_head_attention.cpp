#include "qkv/nn/multi_head_attention.hpp"

#include <array>
#include <cmath>

#include "qkv/nn/init.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/rope.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/ops/shape.hpp"

namespace qkv::nn {
namespace {

constexpr const char* kWho = "MultiHeadAttention";

// qkv polarity (true = may attend) of the keys to ignore (B, Tk), true = ignore, as
// (B, 1, 1, Tk), ANDed with the optional boolean attn_mask (broadcast).
Mask allowed_keys(const Mask& padding, const std::optional<Mask>& allowed, std::size_t B, std::size_t Tk) {
  if (padding.dimension() != 2 || padding.shape()[0] != B || padding.shape()[1] != Tk)
    throw ShapeError(std::string(kWho) + ": key_padding_mask of shape " + shape_str(padding.shape()) +
                     " does not fit (B, Tk) = " + shape_str(Shape{B, Tk}));
  const Shape keep_shape{B, 1, 1, Tk};
  if (!allowed) {
    Mask keep = Mask::from_shape({B, 1, 1, Tk});
    for (std::size_t i = 0; i < B * Tk; ++i) keep.data()[i] = !padding.data()[i];
    return keep;
  }
  const Shape a_shape(allowed->shape().begin(), allowed->shape().end());
  if (a_shape.size() > 4)
    throw ShapeError(std::string(kWho) + ": attn_mask of shape " + shape_str(a_shape) +
                     " has more than 4 dimensions (expected broadcastable to (B, H, Tq, Tk))");
  const Shape out_shape = broadcast_shapes(keep_shape, a_shape, "MultiHeadAttention: key_padding_mask and attn_mask");
  const auto ks = mask_strides(keep_shape, out_shape, std::string(kWho) + ": key_padding_mask");
  const auto as = mask_strides(a_shape, out_shape, std::string(kWho) + ": attn_mask");
  Mask out = Mask::from_shape({out_shape[0], out_shape[1], out_shape[2], out_shape[3]});
  bool* o = out.data();
  const bool* a = allowed->data();
  const bool* p = padding.data();
  for (std::size_t i0 = 0; i0 < out_shape[0]; ++i0)
    for (std::size_t i1 = 0; i1 < out_shape[1]; ++i1)
      for (std::size_t i2 = 0; i2 < out_shape[2]; ++i2)
        for (std::size_t i3 = 0; i3 < out_shape[3]; ++i3) {
          const std::size_t ki = i0 * ks.b + i3 * ks.j;
          const std::size_t ai = i0 * as.b + i1 * as.h + i2 * as.i + i3 * as.j;
          *o++ = !p[ki] && a[ai];
        }
  return out;
}

}  // namespace

void MultiHeadAttentionOptions::validate() const {
  OptionChecker c("MultiHeadAttentionOptions");
  c.positive(embed_dim, "embed_dim");
  c.positive(num_heads, "num_heads");
  c.require(head_dim != 0 || embed_dim % num_heads == 0, {"num_heads", "embed_dim"},
            "{embed_dim} (" + std::to_string(embed_dim) + ") must be divisible by {num_heads} (" +
                std::to_string(num_heads) + ") when {head_dim} is 0; set head_dim or change heads");
  c.in_range(dropout, "dropout", 0, false, 1, true);
  c.require(!scale || *scale > 0, {"scale"},
            "expected a positive scale (or none, meaning 1/sqrt(head_dim)), found " + number_text(scale.value_or(0)));
  c.require(qk_init_gain > 0 && std::isfinite(qk_init_gain), {"qk_init_gain"},
            "expected a positive gain, found " + number_text(qk_init_gain));
  const std::size_t D = head_dim ? head_dim : (num_heads ? embed_dim / num_heads : 0);
  c.require(!rope || D % 2 == 0, {"rope", "head_dim"}, "rotary embeddings turn pairs of dimensions: the head width D = " +
                                                          std::to_string(D) + " must be even");
}

const NameTable<AttentionImpl>& attention_impl_names() {
  static const NameTable<AttentionImpl> table{{"fused", AttentionImpl::Fused}, {"composite", AttentionImpl::Composite}};
  return table;
}

template <class T>
MultiHeadAttention<T>::MultiHeadAttention(const MultiHeadAttentionOptions& options, Generator& gen)
    : options_(options) {
  options.validate();
  const std::size_t E = options.embed_dim, H = options.num_heads;
  head_dim_ = options.head_dim ? options.head_dim : E / H;
  if (!options_.kdim) options_.kdim = E;
  if (!options_.vdim) options_.vdim = E;
  value_dim_ = options.value_dim ? options.value_dim : head_dim_;
  const std::size_t HD = H * head_dim_, HDv = H * value_dim_;
  const bool bias = options.bias;
  w_q = this->register_module("w_q", std::make_shared<Linear<T>>(E, HD, bias, gen));
  w_k = this->register_module("w_k", std::make_shared<Linear<T>>(options_.kdim, HD, bias, gen));
  w_v = this->register_module("w_v", std::make_shared<Linear<T>>(options_.vdim, HDv, bias, gen));
  w_o = this->register_module("w_o", std::make_shared<Linear<T>>(HDv, E, bias, gen));
  // PyTorch's MultiheadAttention._reset_parameters: Xavier projections, zero biases; out_proj
  // keeps the nn.Linear weight init. qk_init_gain (default 1) scales the w_q and w_k draws.
  if (!MetaGuard::active()) {
    for (auto* l : {w_q.get(), w_k.get(), w_v.get()})
      l->weight.value() = init::xavier_uniform<T>(l->weight.shape(), l == w_v.get() ? 1.0 : options.qk_init_gain, gen);
  }
  if (bias && !MetaGuard::active())
    for (auto* l : {w_q.get(), w_k.get(), w_v.get(), w_o.get()}) l->bias.value() = zeros<T>(l->bias.shape());
  for (auto [name, point] : {std::pair{"hook_q", &hook_q}, {"hook_k", &hook_k}, {"hook_v", &hook_v},
                             {"hook_attn_scores", &hook_attn_scores}, {"hook_pattern", &hook_pattern}, {"hook_z", &hook_z},
                             {"hook_head_result", &hook_head_result}, {"hook_result", &hook_result}})
    *point = this->register_module(name, std::make_shared<HookPoint<T>>());
}

namespace {

// Each head's own projection of its own input: x (B, H, T, in) -> (B, H, T, D), head h through rows
// h D .. (h + 1) D of the weight (the split inputs of hook_q_input, ...).
template <class T>
Variable<T> project_per_head(const Variable<T>& x, const Linear<T>& w, std::size_t H) {
  const std::size_t D = w.weight.dim(0) / H, B = x.dim(0), Tn = x.dim(2);
  std::vector<Variable<T>> heads;
  for (std::size_t h = 0; h < H; ++h) {
    const Variable<T> bias = w.bias.defined() ? slice(w.bias, 0, h * D, (h + 1) * D) : Variable<T>();
    heads.push_back(reshape(linear(select(x, 1, h), slice(w.weight, 0, h * D, (h + 1) * D), bias),
                            {long(B), 1, long(Tn), long(D)}));
  }
  return concat(heads, 1);
}

}  // namespace

template <class T>
void MultiHeadAttention<T>::check_inputs(const Variable<T>& query, const Variable<T>& key, const Variable<T>& value,
                                         bool per_head) const {
  const std::size_t E = options_.embed_dim, H = options_.num_heads, n = per_head ? 4 : 3;
  auto fail = [&](const std::string& why) {
    throw ShapeError(std::string(kWho) + ": query " + shape_str(query.shape()) + ", key " + shape_str(key.shape()) +
                     ", value " + shape_str(value.shape()) + ": " + why);
  };
  const std::string lead = per_head ? "(B, " + std::to_string(H) + ", " : "(B, ";
  if (query.ndim() != n || query.dim(-1) != E) fail("expected query " + lead + "Tq, " + std::to_string(E) + ")");
  if (key.ndim() != n || key.dim(-1) != options_.kdim) fail("expected key " + lead + "Tk, " + std::to_string(options_.kdim) + ")");
  if (value.ndim() != n || value.dim(-1) != options_.vdim)
    fail("expected value " + lead + "Tk, " + std::to_string(options_.vdim) + ")");
  if (per_head && (query.dim(1) != H || key.dim(1) != H || value.dim(1) != H)) fail("expected one input per head on axis 1");
  if (key.dim(0) != query.dim(0) || value.dim(0) != query.dim(0)) fail("batch sizes differ");
  if (key.dim(-2) != value.dim(-2)) fail("key and value lengths differ");
}

template <class T>
MultiHeadAttentionOutput<T> MultiHeadAttention<T>::forward(const Variable<T>& query, const Variable<T>& key,
                                                           const Variable<T>& value,
                                                           const MultiHeadAttentionArgs<T>& args) const {
  check_inputs(query, key, value, false);
  if (args.cache) return forward_cached(query, key, value, args);
  const std::size_t H = options_.num_heads;
  // (B, T, H*D) -> (B, H, T, D), rotated by position when the layer uses rotary embeddings
  auto heads = [&](const Variable<T>& x, const Linear<T>& w) {
    Variable<T> h = split_heads(w.forward(x), H);
    return options_.rope ? rope(h, args.position, options_.rope_base) : h;
  };
  return attend(heads(query, *w_q), heads(key, *w_k), split_heads(w_v->forward(value), H), args);
}

template <class T>
MultiHeadAttentionOutput<T> MultiHeadAttention<T>::forward_per_head(const Variable<T>& query, const Variable<T>& key,
                                                                    const Variable<T>& value,
                                                                    const MultiHeadAttentionArgs<T>& args) const {
  check_inputs(query, key, value, true);
  if (args.cache) throw ValueError(std::string(kWho) + ": per-head inputs are not for decoding with a KV cache");
  const std::size_t H = options_.num_heads;
  auto heads = [&](const Variable<T>& x, const Linear<T>& w) {
    Variable<T> h = project_per_head(x, w, H);
    return options_.rope ? rope(h, args.position, options_.rope_base) : h;
  };
  return attend(heads(query, *w_q), heads(key, *w_k), project_per_head(value, *w_v, H), args);
}

template <class T>
MultiHeadAttentionOutput<T> MultiHeadAttention<T>::attend(const Variable<T>& q_in, const Variable<T>& k_in,
                                                          const Variable<T>& v_in,
                                                          const MultiHeadAttentionArgs<T>& args) const {
  const std::size_t B = q_in.dim(0), Tk = k_in.dim(2), H = options_.num_heads;
  Variable<T> q = (*hook_q)(q_in), k = (*hook_k)(k_in), v = (*hook_v)(v_in);

  AttentionMask<T> mask = args.attn_mask;
  if (!args.key_padding_mask.empty()) {  // one boolean mask: keys allowed by both
    mask = AttentionMask<T>::attend_where(allowed_keys(*args.key_padding_mask.ignored(), args.attn_mask.allowed(), B, Tk));
    if (args.attn_mask.bias()) mask = mask.with_additive(*args.attn_mask.bias());
  }

  AttentionOptions opt;
  opt.dropout_p = this->is_training() ? options_.dropout : 0.0;
  opt.is_causal = args.is_causal;
  opt.scale = options_.scale;
  const bool pattern_hooked = hook_pattern->has_forward_hooks(), exact = DifferentiableHooks::active();
  opt.need_weights = args.need_weights || pattern_hooked;
  // With DifferentiableHooks a hooked pattern is part of the graph (the fused kernel's weights are
  // a detached copy): gradients reach q and k through it.
  opt.impl = pattern_hooked && exact ? AttentionImpl::Composite : options_.impl;
  opt.generator = generator_;
  AttentionOutput<T> att;
  bool scores_replaced = false;
  if (hook_attn_scores->has_forward_hooks()) {  // the composite attention, which has the scores
    const ScoresHook<T> on_scores = [&](const Variable<T>& s) {
      Variable<T> r = (*hook_attn_scores)(s);
      scores_replaced = r.id() != s.id();
      return r;
    };
    att = scaled_dot_product_attention(q, k, v, mask, opt, on_scores);
  }
  // Observed only: the layer's own computation, bit for bit as without the hook.
  if (!att.output.defined() || (!scores_replaced && !exact && opt.impl != AttentionImpl::Composite))
    att = scaled_dot_product_attention(q, k, v, mask, opt);
  Variable<T> z = att.output;
  if (pattern_hooked) {
    Variable<T> pattern = (*hook_pattern)(att.weights);
    if (pattern.id() != att.weights.id()) {  // replaced: attend with the hook's pattern
      if (pattern.shape() != att.weights.shape())
        throw ShapeError(std::string(kWho) + ": a hook_pattern hook returned shape " + shape_str(pattern.shape()) +
                         ", expected " + shape_str(att.weights.shape()));
      z = matmul(pattern, v);
    }
    att.weights = pattern;
  }
  z = (*hook_z)(z);

  // (B, H, Tq, Dv) -> (B, Tq, H*Dv) -> (B, Tq, E). With hook_head_result hooked, each head's share
  // of it, result_h = z_h W_o[:, h Dv .. (h + 1) Dv]^T (B, H, Tq, E); the output is their sum over
  // h plus the bias when the hook replaced them (or with DifferentiableHooks), else the usual product.
  MultiHeadAttentionOutput<T> out;
  Variable<T> merged;
  if (hook_head_result->has_forward_hooks()) {
    const std::size_t Dv = value_dim_, Tq = z.dim(2), E = options_.embed_dim;
    std::vector<Variable<T>> parts;
    for (std::size_t h = 0; h < H; ++h)
      parts.push_back(reshape(linear(select(z, 1, h), slice(w_o->weight, 1, h * Dv, (h + 1) * Dv)),
                              {long(B), 1, long(Tq), long(E)}));
    const Variable<T> results = concat(parts, 1), hooked = (*hook_head_result)(results);
    if (exact || hooked.id() != results.id()) {
      const Variable<T> summed = sum(hooked, {1});
      merged = w_o->bias.defined() ? add(summed, w_o->bias) : summed;
    }
  }
  out.output = (*hook_result)(merged.defined() ? merged : w_o->forward(merge_heads(z)));
  if (args.need_weights) out.weights = args.average_attn_weights ? mean(att.weights, {1}) : att.weights;
  return out;
}

namespace {
// cache[:, :, at : at + T] = x (B, H, T, D), growing the cache (doubling) when it is full.
template <class T>
void append(Array<T>& cache, const Array<T>& x, std::size_t at) {
  const std::size_t B = x.shape()[0], H = x.shape()[1], Tn = x.shape()[2], D = x.shape()[3];
  const std::size_t cap = cache.dimension() == 4 ? cache.shape()[2] : 0;
  if (at + Tn > cap) {
    const std::size_t grown = std::max(at + Tn, 2 * cap);
    Array<T> bigger = Array<T>::from_shape({B, H, grown, D});
    for (std::size_t bh = 0; bh < B * H; ++bh)
      std::copy(cache.data() + bh * cap * D, cache.data() + (bh * cap + at) * D, bigger.data() + bh * grown * D);
    cache = std::move(bigger);
  }
  const std::size_t c = cache.shape()[2];
  for (std::size_t bh = 0; bh < B * H; ++bh)
    std::copy(x.data() + bh * Tn * D, x.data() + (bh + 1) * Tn * D, cache.data() + (bh * c + at) * D);
}
}  // namespace

template <class T>
MultiHeadAttentionOutput<T> MultiHeadAttention<T>::forward_cached(const Variable<T>& query, const Variable<T>& key,
                                                                  const Variable<T>& value,
                                                                  const MultiHeadAttentionArgs<T>& args) const {
  if (autograd::grad_enabled())
    throw Error(std::string(kWho) + ": decoding with a KV cache is inference only: run it under NoGradGuard");
  if (!args.attn_mask.empty() || !args.key_padding_mask.empty())
    throw ValueError(std::string(kWho) + ": masks are not supported with a KV cache (causal decoding only)");
  KVCache<T>& cache = *args.cache;
  const std::size_t H = options_.num_heads, at = cache.length;
  Variable<T> q = split_heads(w_q->forward(query), H);
  if (options_.rope) q = rope(q, at, options_.rope_base);
  if (!args.fixed_cache || cache.length == 0) {
    Variable<T> k = split_heads(w_k->forward(key), H);
    if (options_.rope) k = rope(k, at, options_.rope_base);
    append(cache.k, k.value(), at);
    append(cache.v, split_heads(w_v->forward(value), H).value(), at);
    cache.length += key.dim(1);
  }
  Variable<T> z(cached_attention(q, cache.k, cache.v, cache.length, !args.fixed_cache, options_.scale));
  MultiHeadAttentionOutput<T> out;
  out.output = (*hook_result)(w_o->forward(merge_heads((*hook_z)(z))));
  return out;
}

template class MultiHeadAttention<float>;
template class MultiHeadAttention<double>;

}  // namespace qkv::nn
