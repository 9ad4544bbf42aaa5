#include "qkv/nn/transformer_layer.hpp"

#include "qkv/ops/elementwise.hpp"

namespace qkv::nn {

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
LayerNormOptions norm_options(const TransformerLayerOptions& o) { return LayerNormOptions{o.d_model, o.layer_norm_eps}; }
}  // namespace

template <class T>
TransformerEncoderLayer<T>::TransformerEncoderLayer(const TransformerLayerOptions& options, Generator& gen)
    : options_(options) {
  options.validate();
  attn = this->register_module("attn", std::make_shared<MultiHeadAttention<T>>(options.attention(), gen));
  if (!options.attn_only) ff = this->register_module("ff", std::make_shared<FeedForward<T>>(options.feed_forward(), gen));
  norm1 = this->register_module("norm1", std::make_shared<LayerNorm<T>>(norm_options(options)));
  if (!options.attn_only) norm2 = this->register_module("norm2", std::make_shared<LayerNorm<T>>(norm_options(options)));
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
    Variable<T> y = drop1->forward_add(x, sa(norm1->forward(x)));
    return this->hooked(ff ? ff->forward_add(y, norm2->forward(y)) : y);
  }
  Variable<T> y = norm1->forward(drop1->forward_add(x, sa(x)));
  return this->hooked(ff ? norm2->forward(ff->forward_add(y, y)) : y);
}

template <class T>
TransformerDecoderLayer<T>::TransformerDecoderLayer(const TransformerLayerOptions& options, Generator& gen)
    : options_(options) {
  options.validate();
  self_attn = this->register_module("self_attn", std::make_shared<MultiHeadAttention<T>>(options.attention(), gen));
  cross_attn = this->register_module("cross_attn", std::make_shared<MultiHeadAttention<T>>(options.attention(), gen));
  ff = this->register_module("ff", std::make_shared<FeedForward<T>>(options.feed_forward(), gen));
  norm1 = this->register_module("norm1", std::make_shared<LayerNorm<T>>(norm_options(options)));
  norm2 = this->register_module("norm2", std::make_shared<LayerNorm<T>>(norm_options(options)));
  norm3 = this->register_module("norm3", std::make_shared<LayerNorm<T>>(norm_options(options)));
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
    Variable<T> y = drop1->forward_add(x, sa(norm1->forward(x)));
    y = drop2->forward_add(y, ca(norm2->forward(y)));
    return this->hooked(ff->forward_add(y, norm3->forward(y)));
  }
  Variable<T> y = norm1->forward(drop1->forward_add(x, sa(x)));
  y = norm2->forward(drop2->forward_add(y, ca(y)));
  return this->hooked(norm3->forward(ff->forward_add(y, y)));
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
    Variable<T> y = add(x, sa(norm1->forward(x)));
    y = add(y, ca(norm2->forward(y)));
    return add(y, ff->forward(norm3->forward(y)));
  }
  Variable<T> y = norm1->forward(add(x, sa(x)));
  y = norm2->forward(add(y, ca(y)));
  return norm3->forward(add(y, ff->forward(y)));
}

template class TransformerEncoderLayer<float>;
template class TransformerEncoderLayer<double>;
template class TransformerDecoderLayer<float>;
template class TransformerDecoderLayer<double>;

}  // namespace qkv::nn
