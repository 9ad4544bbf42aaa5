#include "qkv/nn/transformer_layer.hpp"

#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/shape.hpp"

namespace qkv::nn {

const NameTable<Norm>& norm_names() {
  static const NameTable<Norm> table{{"layer", Norm::Layer}, {"none", Norm::None}};
  return table;
}

MultiHeadAttentionOptions TransformerLayerOptions::attention() const {
  MultiHeadAttentionOptions a = attn;
  a.embed_dim = d_model;
  return a;
}

FeedForwardOptions TransformerLayerOptions::feed_forward() const {
  FeedForwardOptions f = ff;
  f.dim = d_model;
  f.dropout = dropout;
  return f;
}

void TransformerLayerOptions::validate() const {
  OptionChecker c("TransformerLayerOptions");
  c.positive(d_model, "d_model");
  c.nested("attn.", [&] { attention().validate(); }, {{"embed_dim", "d_model"}});
  c.nested("ff.", [&] { feed_forward().validate(); }, {{"dim", "d_model"}, {"dropout", "dropout"}});
  c.require(layer_norm_eps > 0, {"layer_norm_eps"}, "expected a positive number, found " + number_text(layer_norm_eps));
}

namespace {
// A block's LayerNorm, or none (norm none): then `norm` below is the identity, and the pre-LN and
// post-LN formulas both become x = x + f(x).
template <class T>
std::shared_ptr<LayerNorm<T>> make_norm(const TransformerLayerOptions& o) {
  if (o.norm == Norm::None) return nullptr;
  return std::make_shared<LayerNorm<T>>(LayerNormOptions{o.d_model, o.layer_norm_eps});
}
template <class T>
Variable<T> norm(const std::shared_ptr<LayerNorm<T>>& n, const Variable<T>& x) {
  return n ? n->forward(x) : x;
}
}  // namespace

template <class T>
TransformerEncoderLayer<T>::TransformerEncoderLayer(const TransformerLayerOptions& options, Generator& gen)
    : options_(options) {
  options.validate();
  attn = this->register_module("attn", std::make_shared<MultiHeadAttention<T>>(options.attention(), gen));
  if (!options.attn_only) ff = this->register_module("ff", std::make_shared<FeedForward<T>>(options.feed_forward(), gen));
  if (auto n = make_norm<T>(options)) norm1 = this->register_module("norm1", n);
  if (auto n = make_norm<T>(options); n && !options.attn_only) norm2 = this->register_module("norm2", n);
  drop1 = this->register_module("drop1", std::make_shared<Dropout<T>>(options.dropout));
  std::vector<std::pair<const char*, std::shared_ptr<HookPoint<T>>*>> points = {
      {"hook_resid_pre", &hook_resid_pre}, {"hook_q_input", &hook_q_input}, {"hook_k_input", &hook_k_input},
      {"hook_v_input", &hook_v_input}};
  if (ff) points.insert(points.end(), {{"hook_resid_mid", &hook_resid_mid}, {"hook_mlp_in", &hook_mlp_in}, {"hook_mlp_out", &hook_mlp_out}});
  points.push_back({"hook_resid_post", &hook_resid_post});
  for (auto [name, point] : points) *point = this->register_module(name, std::make_shared<HookPoint<T>>());
}

namespace {
// x (B, T, C) as H copies (B, H, T, C): the inputs of the heads, one each (split inputs).
template <class T>
Variable<T> per_head_copies(const Variable<T>& x, std::size_t H) {
  const Variable<T> one = reshape(x, {long(x.dim(0)), 1, long(x.dim(1)), long(x.dim(2))});
  return concat(std::vector<Variable<T>>(H, one), 1);
}
}  // namespace

template <class T>
Variable<T> TransformerEncoderLayer<T>::attention(const Variable<T>& x, const MultiHeadAttentionArgs<T>& args) const {
  auto whole = [&] {
    const Variable<T> h = options_.norm_first ? norm(norm1, x) : x;
    return attn->forward(h, h, h, args).output;
  };
  if (!(hook_q_input->has_forward_hooks() || hook_k_input->has_forward_hooks() || hook_v_input->has_forward_hooks()))
    return whole();
  // Split inputs: every head reads its own copy of the stream (normalised by norm1 per copy in
  // pre-LN), so a hook changes what one head's query, key or value reads and nothing else. Copies
  // that were only observed leave the layer's usual path (bit for bit), unless DifferentiableHooks.
  const std::size_t H = attn->num_heads();
  const Variable<T> copies = per_head_copies(x, H);
  const Variable<T> xq = (*hook_q_input)(copies), xk = (*hook_k_input)(copies), xv = (*hook_v_input)(copies);
  const bool replaced = xq.id() != copies.id() || xk.id() != copies.id() || xv.id() != copies.id();
  if (!replaced && !DifferentiableHooks::active()) return whole();
  auto normed = [&](const Variable<T>& c) { return options_.norm_first ? norm(norm1, c) : c; };
  return attn->forward_per_head(normed(xq), normed(xk), normed(xv), args).output;
}

template <class T>
Variable<T> TransformerEncoderLayer<T>::mlp(const Variable<T>& y) const {
  const Variable<T> in = (*hook_mlp_in)(y);  // an identity: the residual path below reads y itself
  const Variable<T> h = options_.norm_first ? norm(norm2, in) : in;
  // y + ff(h), the dropout and the add fused, unless the MLP's own output is hooked.
  return hook_mlp_out->has_forward_hooks() ? add(y, (*hook_mlp_out)(ff->forward(h))) : ff->forward_add(y, h);
}

template <class T>
Variable<T> TransformerEncoderLayer<T>::forward(const Variable<T>& x, const KeyPaddingMask& key_padding_mask,
                                                bool is_causal, KVCache<T>* cache) const {
  MultiHeadAttentionArgs<T> args;
  args.key_padding_mask = key_padding_mask;
  args.is_causal = is_causal;
  args.cache = cache;
  // Residual adds: x + drop1(attention), y + ff(...), each dropout fused into its add.
  const Variable<T> r = (*hook_resid_pre)(x);
  Variable<T> y = drop1->forward_add(r, attention(r, args));
  if (!options_.norm_first) y = norm(norm1, y);
  if (!ff) return this->hooked((*hook_resid_post)(y));
  y = (*hook_resid_mid)(y);
  const Variable<T> out = mlp(y);
  return this->hooked((*hook_resid_post)(options_.norm_first ? out : norm(norm2, out)));
}

template <class T>
TransformerDecoderLayer<T>::TransformerDecoderLayer(const TransformerLayerOptions& options, Generator& gen)
    : options_(options) {
  options.validate();
  self_attn = this->register_module("self_attn", std::make_shared<MultiHeadAttention<T>>(options.attention(), gen));
  cross_attn = this->register_module("cross_attn", std::make_shared<MultiHeadAttention<T>>(options.attention(), gen));
  ff = this->register_module("ff", std::make_shared<FeedForward<T>>(options.feed_forward(), gen));
  if (auto n = make_norm<T>(options)) norm1 = this->register_module("norm1", n);
  if (auto n = make_norm<T>(options)) norm2 = this->register_module("norm2", n);
  if (auto n = make_norm<T>(options)) norm3 = this->register_module("norm3", n);
  drop1 = this->register_module("drop1", std::make_shared<Dropout<T>>(options.dropout));
  drop2 = this->register_module("drop2", std::make_shared<Dropout<T>>(options.dropout));
}

template <class T>
Variable<T> TransformerDecoderLayer<T>::forward(const Variable<T>& x, const Variable<T>& memory,
                                                const KeyPaddingMask& tgt_key_padding_mask,
                                                const KeyPaddingMask& memory_key_padding_mask) const {
  MultiHeadAttentionArgs<T> self_args;
  self_args.key_padding_mask = tgt_key_padding_mask;
  self_args.is_causal = true;
  MultiHeadAttentionArgs<T> cross_args;
  cross_args.key_padding_mask = memory_key_padding_mask;
  auto sa = [&](const Variable<T>& h) { return self_attn->forward(h, h, h, self_args).output; };
  auto ca = [&](const Variable<T>& h) { return cross_attn->forward(h, memory, memory, cross_args).output; };
  if (options_.norm_first) {
    Variable<T> y = drop1->forward_add(x, sa(norm(norm1, x)));
    y = drop2->forward_add(y, ca(norm(norm2, y)));
    return this->hooked(ff->forward_add(y, norm(norm3, y)));
  }
  Variable<T> y = norm(norm1, drop1->forward_add(x, sa(x)));
  y = norm(norm2, drop2->forward_add(y, ca(y)));
  return this->hooked(norm(norm3, ff->forward_add(y, y)));
}

template <class T>
Variable<T> TransformerDecoderLayer<T>::forward(const Variable<T>& x, const Variable<T>& memory, KVCache<T>& self_cache,
                                                KVCache<T>& cross_cache) const {
  MultiHeadAttentionArgs<T> self_args, cross_args;
  self_args.cache = &self_cache;
  cross_args.cache = &cross_cache;
  cross_args.fixed_cache = true;
  auto sa = [&](const Variable<T>& h) { return self_attn->forward(h, h, h, self_args).output; };
  auto ca = [&](const Variable<T>& h) { return cross_attn->forward(h, memory, memory, cross_args).output; };
  if (options_.norm_first) {
    Variable<T> y = add(x, sa(norm(norm1, x)));
    y = add(y, ca(norm(norm2, y)));
    return add(y, ff->forward(norm(norm3, y)));
  }
  Variable<T> y = norm(norm1, add(x, sa(x)));
  y = norm(norm2, add(y, ca(y)));
  return norm(norm3, add(y, ff->forward(y)));
}

template class TransformerEncoderLayer<float>;
template class TransformerEncoderLayer<double>;
template class TransformerDecoderLayer<float>;
template class TransformerDecoderLayer<double>;

}  // namespace qkv::nn
