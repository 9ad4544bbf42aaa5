#include "gradchecks.hpp"

#include <algorithm>

#include "qkv/autograd/gradcheck.hpp"
#include "qkv/nn/feed_forward.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/attention.hpp"
#include "qkv/ops/dropout.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/embedding.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/norm.hpp"
#include "qkv/ops/rope.hpp"
#include "qkv/ops/shape.hpp"
#include "qkv/ops/softmax.hpp"
#include "qkv/tensor/names.hpp"

namespace qkv::app {
namespace {

using V = Variable<double>;
constexpr std::size_t B = 2, T = 3, C = 4;  // every check runs on tiny shapes

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

nn::TransformerOptions model_opts(nn::Arch arch, bool norm_first = true, AttentionImpl impl = AttentionImpl::Fused) {
  nn::TransformerOptions o;
  o.arch = arch;
  o.d_model = C;
  o.attn.num_heads = 2;
  o.attn.impl = impl;
  o.layers = 1;
  o.ff.hidden = 6;
  o.norm_first = norm_first;
  o.max_len = 8;
  return o;
}

// A check of a function of inputs (f takes them), named for the table.
GradcheckEntry op(const std::string& name, std::function<V(const std::vector<V>&)> f, std::vector<Array<double>> in) {
  return {name, "op", [=] {
            std::vector<V> v;
            for (auto& a : in) v.emplace_back(a, true);
            return check(name, [&] { return f(v); }, v);
          }};
}

std::vector<GradcheckEntry> make_suite() {
  std::vector<GradcheckEntry> s;
  // ---- ops ----
  s.push_back(op("softmax", [](auto& v) { return softmax(v[0], -1); }, {random({B, 5}, 1)}));
  s.push_back(op("log_softmax", [](auto& v) { return log_softmax(v[0], 1); }, {random({B, 4, 3}, 2)}));
  s.push_back(op("cross_entropy (ignore_index, label smoothing 0.1)", [](auto& v) {
    IndexArray t = ids({B, T}, 5, 3);
    t(0, 1) = -100;
    return cross_entropy(v[0], t, -100, 0.1);
  }, {random({B, T, 5}, 4)}));
  s.push_back(op("matmul (batched, a 2-D operand)", [](auto& v) { return matmul(v[0], v[1]); },
                 {random({B, T, C}, 5), random({C, 3}, 6)}));
  s.push_back(op("linear", [](auto& v) { return linear(v[0], v[1], v[2]); },
                 {random({B, T, C}, 7), random({3, C}, 8), random({3}, 9)}));
  s.push_back(op("layer_norm", [](auto& v) { return layer_norm(v[0], v[1], v[2]); },
                 {random({B, T, C}, 10), random({C}, 11), random({C}, 12)}));
  s.push_back(op("gelu (exact erf)", [](auto& v) { return gelu(v[0]); }, {random({B, 5}, 13)}));
  s.push_back(op("gelu (tanh)", [](auto& v) { return gelu(v[0], GeluApprox::Tanh); }, {random({B, 5}, 14)}));
  s.push_back(op("dropout (p 0.3, a fixed mask)", [](auto& v) {
    Generator g(15);  // the same mask at every evaluation
    return dropout(v[0], 0.3, true, g);
  }, {random({B, 6}, 16)}));
  s.push_back(op("embedding (an id used twice)", [](auto& v) { return embedding(v[0], ids({B, T}, 4, 1)); },
                 {random({4, C}, 17)}));
  s.push_back(op("rope (offset 3)", [](auto& v) { return rope(v[0], 3); }, {random({1, 2, T, 4}, 18)}));
  s.push_back(op("split_heads / merge_heads", [](auto& v) { return merge_heads(mul(split_heads(v[0], 2), split_heads(v[0], 2))); },
                 {random({B, T, C}, 19)}));
  for (auto impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
    const std::string tag = impl == AttentionImpl::Fused ? "fused" : "composite";
    s.push_back(op("scaled_dot_product_attention " + tag + " (boolean and float masks, Tq != Tk)", [impl](auto& v) {
      Mask allowed = Mask::from_shape({3, 5});
      for (std::size_t i = 0; i < allowed.size(); ++i) allowed.data()[i] = (i % 4) != 1;
      const auto mask = AttentionMask<double>::attend_where(allowed).with_additive(random({1, 1, 3, 5}, 20));
      AttentionOptions o;
      o.impl = impl;
      return scaled_dot_product_attention(v[0], v[1], v[2], mask, o).output;
    }, {random({B, 2, 3, 4}, 21), random({B, 2, 5, 4}, 22), random({B, 2, 5, 3}, 23)}));
    s.push_back(op("scaled_dot_product_attention " + tag + " (causal, q = k = v)", [impl](auto& v) {
      AttentionOptions o;
      o.impl = impl;
      o.is_causal = true;
      return scaled_dot_product_attention(v[0], v[0], v[0], {}, o).output;
    }, {random({B, 2, 4, 4}, 24)}));
  }
  // ---- layers ----
  s.push_back({"Linear", "layer", [] {
                 Generator gen(1);
                 nn::Linear<double> m(C, 3, true, gen);
                 V x = input({B, T, C}, 1);
                 return check("Linear", [&] { return m.forward(x); }, with_params(m, {x}));
               }});
  s.push_back({"Embedding", "layer", [] {
                 Generator gen(2);
                 nn::Embedding<double> m(5, C, gen);
                 IndexArray t = ids({B, T}, 5, 2);
                 return check("Embedding", [&] { return m.forward(t); }, with_params(m, {}));
               }});
  s.push_back({"LayerNorm", "layer", [] {
                 nn::LayerNorm<double> m(C);
                 for (auto& p : m.parameters()) p.value() = random(p.shape(), 3);  // away from the 1/0 init
                 V x = input({B, T, C}, 4);
                 return check("LayerNorm", [&] { return m.forward(x); }, with_params(m, {x}));
               }});
  for (auto act : {nn::Activation::Gelu, nn::Activation::Relu}) {
    const std::string name = std::string("FeedForward (") + nn::activation_names().name(act) + ")";
    s.push_back({name, "layer", [name, act] {
                   Generator gen(5);
                   nn::FeedForward<double> m(nn::FeedForwardOptions{C, 6, act}, gen);
                   V x = input({B, T, C}, 5);
                   return check(name, [&] { return m.forward(x); }, with_params(m, {x}));
                 }});
  }
  for (auto impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
    const std::string tag = impl == AttentionImpl::Fused ? " fused" : " composite";
    s.push_back({"MultiHeadAttention self" + tag, "layer", [tag, impl] {
                   Generator gen(6);
                   nn::MultiHeadAttentionOptions o;
                   o.embed_dim = C, o.num_heads = 2, o.impl = impl;
                   nn::MultiHeadAttention<double> m(o, gen);
                   V x = input({B, T, C}, 11);
                   nn::MultiHeadAttentionArgs<double> args;
                   Mask pad = Mask::from_shape({B, T});
                   std::fill(pad.begin(), pad.end(), false);
                   pad(1, 2) = true;
                   args.key_padding_mask = KeyPaddingMask::ignore_where(pad);
                   return check("MultiHeadAttention self" + tag, [&] { return m.forward(x, x, x, args).output; },
                                with_params(m, {x}));
                 }});
    s.push_back({"MultiHeadAttention cross" + tag + " (kdim, vdim, head_dim, value_dim)", "layer", [tag, impl] {
                   Generator gen(7);
                   nn::MultiHeadAttentionOptions o;
                   o.embed_dim = C, o.num_heads = 2, o.impl = impl, o.kdim = 3, o.vdim = 5, o.head_dim = 2, o.value_dim = 3;
                   nn::MultiHeadAttention<double> m(o, gen);
                   V x = input({B, T, C}, 11), k = input({B, 4, 3}, 12), v = input({B, 4, 5}, 13);
                   return check("MultiHeadAttention cross" + tag + " (kdim, vdim, head_dim, value_dim)", [&] { return m.forward(x, k, v).output; },
                                with_params(m, {x, k, v}));
                 }});
  }
  for (bool pre : {true, false}) {
    const std::string tag = pre ? " (pre-LN)" : " (post-LN)";
    s.push_back({"TransformerEncoderLayer" + tag, "layer", [tag, pre] {
                   Generator gen(8);
                   nn::TransformerEncoderLayer<double> m(model_opts(nn::Arch::Encoder, pre), gen);
                   V x = input({B, T, C}, 14);
                   return check("TransformerEncoderLayer" + tag, [&] { return m.forward(x); }, with_params(m, {x}));
                 }});
    s.push_back({"TransformerDecoderLayer" + tag, "layer", [tag, pre] {
                   Generator gen(9);
                   nn::TransformerDecoderLayer<double> m(model_opts(nn::Arch::EncoderDecoder, pre), gen);
                   V y = input({B, 2, C}, 15), mem = input({B, T, C}, 16);
                   return check("TransformerDecoderLayer" + tag, [&] { return m.forward(y, mem); }, with_params(m, {y, mem}));
                 }});
  }
  // ---- models ----
  s.push_back({"EncoderModel", "model", [] {
                 Generator gen(10);
                 auto o = model_opts(nn::Arch::Encoder);
                 o.layers = 2;
                 nn::EncoderModel<double> m(5, 3, o, gen);
                 IndexArray t = ids({B, T}, 5, 17);
                 return check("EncoderModel", [&] { return m.forward(t); }, with_params(m, {}));
               }});
  s.push_back({"EncoderModel (norm none, relu, learned positions: a compiled program's model)", "model", [] {
                 Generator gen(14);
                 auto o = model_opts(nn::Arch::Encoder);
                 o.layers = 2, o.norm = nn::Norm::None, o.ff.activation = nn::Activation::Relu;
                 o.positional = nn::Positional::Learned;
                 nn::EncoderModel<double> m(5, 3, o, gen);
                 IndexArray t = ids({B, T}, 5, 22);
                 return check("EncoderModel (norm none)", [&] { return m.forward(t); }, with_params(m, {}));
               }});
  s.push_back({"Seq2SeqModel (learned positions)", "model", [] {
                 Generator gen(11);
                 auto o = model_opts(nn::Arch::EncoderDecoder);
                 o.positional = nn::Positional::Learned;
                 nn::Seq2SeqModel<double> m(5, 4, o, gen);
                 IndexArray src = ids({B, T}, 5, 18), tgt = ids({B, 2}, 4, 19);
                 return check("Seq2SeqModel (learned positions)", [&] { return m.forward(src, tgt); }, with_params(m, {}));
               }});
  s.push_back({"DecoderModel (learned positions)", "model", [] {
                 Generator gen(12);
                 nn::DecoderModel<double> m(5, model_opts(nn::Arch::Decoder), gen);
                 IndexArray t = ids({B, T}, 5, 20);
                 return check("DecoderModel (learned positions)", [&] { return m.forward(t); }, with_params(m, {}));
               }});
  s.push_back({"DecoderModel (rope, tied embeddings, attention only)", "model", [] {
                 Generator gen(13);
                 auto o = model_opts(nn::Arch::Decoder);
                 o.positional = nn::Positional::Rope, o.tie_embeddings = true, o.attn_only = true, o.layers = 2;
                 nn::DecoderModel<double> m(5, o, gen);
                 IndexArray t = ids({B, T}, 5, 21);
                 return check("DecoderModel (rope, tied embeddings, attention only)", [&] { return m.forward(t); },
                              with_params(m, {}));
               }});
  return s;
}

}  // namespace

const std::vector<GradcheckEntry>& gradcheck_suite() {
  static const std::vector<GradcheckEntry> suite = make_suite();
  return suite;
}

bool gradcheck_selected(const std::string& name, const std::string& pattern) {
  if (pattern.empty()) return true;
  if (pattern.find_first_of("*?") != std::string::npos) return glob_match(pattern, name);
  return name.find(pattern) != std::string::npos;
}

std::vector<LayerCheckResult> run_layer_gradchecks(const std::string& pattern) {
  std::vector<LayerCheckResult> out;
  for (auto& e : gradcheck_suite())
    if (gradcheck_selected(e.name, pattern)) out.push_back(e.run());
  return out;
}

}  // namespace qkv::app
