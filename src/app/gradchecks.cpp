#include "gradchecks.hpp"

#include <algorithm>

#include "qkv/autograd/gradcheck.hpp"
#include "qkv/nn/feed_forward.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/attention.hpp"

namespace qkv::app {
namespace {

using V = Variable<double>;

Array<double> random(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  Array<double> a = Array<double>::from_shape(shape);
  for (auto& x : a) x = gen.uniform(-1, 1);
  return a;
}

V input(const Shape& shape, std::uint64_t seed) { return V(random(shape, seed), true); }

IndexArray ids(const Shape& shape, Index vocab, std::uint64_t seed) {
  Generator gen(seed);
  IndexArray a = IndexArray::from_shape(shape);
  for (auto& x : a) x = Index(gen.randint(std::uint64_t(vocab)));
  return a;
}

LayerCheckResult check(const std::string& name, const std::function<V()>& f, std::vector<V> inputs) {
  GradcheckReport r = gradcheck(f, inputs);
  LayerCheckResult out{name, 0, 0, r.ok};
  for (auto& i : r.inputs) {
    out.worst_error = std::max(out.worst_error, i.error);
    out.worst_ratio = std::max(out.worst_ratio, i.ratio);
  }
  return out;
}

template <class M>
std::vector<V> with_params(const M& m, std::vector<V> inputs) {
  auto p = m.parameters();
  inputs.insert(inputs.end(), p.begin(), p.end());
  return inputs;
}

nn::TransformerLayerOptions layer_opts(bool norm_first, AttentionImpl impl) {
  nn::TransformerLayerOptions o;
  o.d_model = 4;
  o.attn.num_heads = 2;
  o.ff.hidden = 6;
  o.norm_first = norm_first;
  o.attn.impl = impl;
  return o;
}

}  // namespace

std::vector<LayerCheckResult> run_layer_gradchecks() {
  std::vector<LayerCheckResult> out;
  Generator gen(7);
  const std::size_t B = 2, T = 3, C = 4;

  {
    nn::Linear<double> m(C, 3, true, gen);
    V x = input({B, T, C}, 1);
    out.push_back(check("Linear", [&] { return m.forward(x); }, with_params(m, {x})));
  }
  {
    nn::Embedding<double> m(5, C, gen);
    IndexArray t = ids({B, T}, 5, 2);
    out.push_back(check("Embedding", [&] { return m.forward(t); }, with_params(m, {})));
  }
  {
    nn::LayerNorm<double> m(C);
    for (auto& p : m.parameters()) p.value() = random(p.shape(), 3);  // away from the 1/0 init
    V x = input({B, T, C}, 4);
    out.push_back(check("LayerNorm", [&] { return m.forward(x); }, with_params(m, {x})));
  }
  for (auto act : {nn::Activation::Gelu, nn::Activation::Relu}) {
    nn::FeedForwardOptions o;
    o.dim = C;
    o.hidden = 6;
    o.activation = act;
    nn::FeedForward<double> m(o, gen);
    V x = input({B, T, C}, 5);
    out.push_back(check(std::string("FeedForward (") + nn::activation_names().name(act) + ")", [&] { return m.forward(x); },
                        with_params(m, {x})));
  }
  for (auto impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
    const std::string tag = impl == AttentionImpl::Fused ? " fused" : " composite";
    V q = input({B, 2, 3, 4}, 6), k = input({B, 2, 5, 4}, 7), v = input({B, 2, 5, 3}, 8);
    AttentionMask<double> mask;
    Mask allowed = Mask::from_shape({3, 5});
    for (std::size_t i = 0; i < allowed.size(); ++i) allowed.data()[i] = (i % 4) != 1;
    mask.allowed = allowed;
    mask.bias = random({1, 1, 3, 5}, 9);
    AttentionOptions o;
    o.impl = impl;
    out.push_back(check("attention" + tag + " (masks, Tq != Tk)",
                        [&] { return scaled_dot_product_attention(q, k, v, mask, o).output; }, {q, k, v}));
    o.is_causal = true;
    V s = input({B, 2, 4, 4}, 10);
    out.push_back(check("attention" + tag + " (causal, q=k=v)",
                        [&] { return scaled_dot_product_attention(s, s, s, {}, o).output; }, {s}));

    nn::MultiHeadAttentionOptions mo;
    mo.embed_dim = C;
    mo.num_heads = 2;
    mo.impl = impl;
    nn::MultiHeadAttention<double> self(mo, gen);
    V x = input({B, T, C}, 11);
    nn::MultiHeadAttentionArgs<double> args;
    Mask pad = Mask::from_shape({B, T});
    std::fill(pad.begin(), pad.end(), false);
    pad(1, 2) = true;
    args.key_padding_mask = pad;
    out.push_back(check("MultiHeadAttention self" + tag, [&] { return self.forward(x, x, x, args).output; },
                        with_params(self, {x})));
    mo.kdim = 3;
    mo.vdim = 5;
    nn::MultiHeadAttention<double> cross(mo, gen);
    V kk = input({B, 4, 3}, 12), vv = input({B, 4, 5}, 13);
    out.push_back(check("MultiHeadAttention cross" + tag, [&] { return cross.forward(x, kk, vv).output; },
                        with_params(cross, {x, kk, vv})));
  }
  for (bool pre : {true, false}) {
    const std::string tag = pre ? " (pre-LN)" : " (post-LN)";
    nn::TransformerEncoderLayer<double> enc(layer_opts(pre, AttentionImpl::Fused), gen);
    V x = input({B, T, C}, 14);
    out.push_back(check("TransformerEncoderLayer" + tag, [&] { return enc.forward(x); }, with_params(enc, {x})));
    nn::TransformerDecoderLayer<double> dec(layer_opts(pre, AttentionImpl::Fused), gen);
    V y = input({B, 2, C}, 15), mem = input({B, T, C}, 16);
    out.push_back(check("TransformerDecoderLayer" + tag, [&] { return dec.forward(y, mem); }, with_params(dec, {y, mem})));
  }
  {
    nn::TransformerOptions o;
    o.d_model = C;
    o.attn.num_heads = 2;
    o.layers = 2;
    o.ff.hidden = 6;
    o.max_len = 8;
    nn::EncoderModel<double> m(5, 3, o, gen);
    IndexArray t = ids({B, T}, 5, 17);
    out.push_back(check("EncoderModel", [&] { return m.forward(t); }, with_params(m, {})));
    o.layers = 1;
    o.positional = nn::Positional::Learned;
    nn::Seq2SeqModel<double> s(5, 4, o, gen);
    IndexArray src = ids({B, T}, 5, 18), tgt = ids({B, 2}, 4, 19);
    out.push_back(check("Seq2SeqModel", [&] { return s.forward(src, tgt); }, with_params(s, {})));
  }
  return out;
}

}  // namespace qkv::app
