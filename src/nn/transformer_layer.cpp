#include "qkv/nn/transformer_layer.hpp"

#include "qkv/ops/elementwise.hpp"

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
}

template <class T>
Variable<T> TransformerEncoderLayer<T>::forward(const Variable<T>& x, const KeyPaddingMask& key_padding_mask,
                                                bool is_causal, KVCache<T>* cache) const {
  MultiHeadAttentionArgs<T> args;
  args.key_padding_mask = key_padding_mask;
  args.is_causal = is_causal;
  args.cache = cache;
  // Residual adds: x + drop1(attention), y + ff(...), each dropout fused into its add.
  auto sa = [&](const Variable<T>& h) { return attn->forward(h, h, h, args).output; };
  if (options_.norm_first) {
    Variable<T> y = drop1->forward_add(x, sa(norm(norm1, x)));
    return this->hooked(ff ? ff->forward_add(y, norm(norm2, y)) : y);
  }
  Variable<T> y = norm(norm1, drop1->forward_add(x, sa(x)));
  return this->hooked(ff ? norm(norm2, ff->forward_add(y, y)) : y);
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
