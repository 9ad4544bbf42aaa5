#include <doctest/doctest.h>

#include <algorithm>

#include "nn_test_util.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"

using namespace qkv;
using namespace qkv::nn;
using test::leaf;

namespace {

TransformerLayerOptions tiny_layer(bool norm_first, AttentionImpl impl = AttentionImpl::Fused) {
  TransformerLayerOptions o;
  o.d_model = 4;
  o.attn.num_heads = 2;
  o.ff.hidden = 6;
  o.norm_first = norm_first;
  o.attn.impl = impl;
  return o;
}

TransformerOptions tiny_model(bool norm_first, Positional pos = Positional::Sinusoidal) {
  TransformerOptions o;
  o.d_model = 4;
  o.attn.num_heads = 2;
  o.layers = 2;
  o.ff.hidden = 6;
  o.norm_first = norm_first;
  o.positional = pos;
  o.max_len = 8;
  return o;
}

// Make the LayerNorm parameters non-trivial, so the gradient check sees their role.
template <class M>
void perturb_norms(M& m, std::uint64_t seed) {
  for (auto& [name, p] : m.named_parameters())
    if (name.find("norm") != std::string::npos) p.value() = test::random_array<double>(p.shape(), seed++, 0.5, 1.5);
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Sum of out * r with a fixed random r (keeps the Jacobian of a model check small).
Variable<double> weighted_sum(const Variable<double>& out, std::uint64_t seed = 77) {
  return sum(mul(out, Variable<double>(test::random_array<double>(out.shape(), seed))));
}

}  // namespace

// ---- layers ----

TEST_CASE("TransformerEncoderLayer: pre-LN and post-LN formulas, parameter names") {
  for (bool nf : {true, false}) {
    CAPTURE(nf);
    Generator gen(1);
    TransformerEncoderLayer<double> layer(tiny_layer(nf), gen);
    perturb_norms(layer, 5);
    auto names = test::param_names(layer);
    CHECK(names.front() == "attn.w_q.weight");
    CHECK(contains(names, "ff.fc1.weight"));
    CHECK(names.back() == "norm2.bias");
    Variable<double> x = leaf({2, 3, 4}, 2);
    auto attn = [&](const Variable<double>& h) { return layer.attn->forward(h, h, h).output; };
    Variable<double> expect =
        nf ? add(add(x, attn(layer.norm1->forward(x))),
                 layer.ff->forward(layer.norm2->forward(add(x, attn(layer.norm1->forward(x))))))
           : layer.norm2->forward(add(layer.norm1->forward(add(x, attn(x))),
                                      layer.ff->forward(layer.norm1->forward(add(x, attn(x))))));
    CHECK(test::max_abs_diff(layer.forward(x).value(), expect.value()) < 1e-12);
  }
}

TEST_CASE("norm none: x + attn(x) then + ff, no LayerNorm in the layers or at the end of any model") {
  for (bool nf : {true, false}) {
    CAPTURE(nf);
    TransformerLayerOptions o = tiny_layer(nf);
    o.norm = Norm::None;
    Generator gen(1);
    TransformerEncoderLayer<double> layer(o, gen);
    CHECK(!layer.norm1);
    CHECK(!layer.norm2);
    for (auto& n : test::param_names(layer)) CHECK(n.find("norm") == std::string::npos);
    Variable<double> x = leaf({2, 3, 4}, 2);
    Variable<double> y = add(x, layer.attn->forward(x, x, x).output);
    CHECK(test::max_abs_diff(layer.forward(x).value(), add(y, layer.ff->forward(y)).value()) < 1e-12);
    TransformerDecoderLayer<double> dec(o, gen);
    CHECK((!dec.norm1 && !dec.norm2 && !dec.norm3));
    CHECK(dec.forward(x, leaf({2, 5, 4}, 3)).shape() == Shape{2, 3, 4});
  }
  TransformerOptions m = tiny_model(true);
  m.norm = Norm::None;
  Generator gen(2);
  EncoderModel<double> enc(5, 3, m, gen);
  CHECK(!enc.norm);
  m.arch = Arch::Decoder;
  DecoderModel<double> dec(5, m, gen);
  CHECK(!dec.norm);
  for (auto& n : test::param_names(dec)) CHECK(n.find("norm") == std::string::npos);
  CHECK(norm_names().name(Norm::None) == std::string("none"));
}

TEST_CASE("TransformerEncoderLayer: gradcheck pre-LN and post-LN, both impls, with key padding") {
  for (bool nf : {true, false})
    for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
      CAPTURE(nf);
      Generator gen(2);
      TransformerEncoderLayer<double> layer(tiny_layer(nf, impl), gen);
      perturb_norms(layer, 5);
      Variable<double> x = leaf({2, 3, 4}, 3);
      const KeyPaddingMask kpm = KeyPaddingMask::ignore_where(Mask{{false, false, true}, {false, false, false}});
      test::check_module_grad([&] { return layer.forward(x, kpm); }, layer, {x});
    }
}

TEST_CASE("TransformerDecoderLayer: causal self-attention then cross-attention, gradcheck") {
  for (bool nf : {true, false}) {
    CAPTURE(nf);
    Generator gen(3);
    TransformerDecoderLayer<double> layer(tiny_layer(nf), gen);
    perturb_norms(layer, 7);
    auto names = test::param_names(layer);
    CHECK(names.front() == "self_attn.w_q.weight");
    CHECK(contains(names, "cross_attn.w_k.weight"));
    CHECK(contains(names, "norm3.weight"));
    Variable<double> x = leaf({2, 3, 4}, 4), mem = leaf({2, 2, 4}, 5);
    const KeyPaddingMask mem_kpm = KeyPaddingMask::ignore_where(Mask{{false, true}, {false, false}});
    test::check_module_grad([&] { return layer.forward(x, mem, KeyPaddingMask(), mem_kpm); }, layer, {x, mem});
    // Causal: changing the last target position leaves earlier outputs unchanged.
    Array<double> y1 = layer.forward(x, mem).value();
    Array<double> x2 = x.value();
    for (std::size_t c = 0; c < 4; ++c) x2(0, 2, c) += 1.0;
    Array<double> y2 = layer.forward(Variable<double>(x2), mem).value();
    for (std::size_t t = 0; t < 2; ++t)
      for (std::size_t c = 0; c < 4; ++c) CHECK(y1(0, t, c) == doctest::Approx(y2(0, t, c)).epsilon(1e-12));
    CHECK(y1(0, 2, 0) != doctest::Approx(y2(0, 2, 0)));
  }
}

TEST_CASE("layers: dropout fused into the residual adds and the GELU gives the bits of the separate ops") {
  // Training with dropout: with no hooks the layers run dropout_add and gelu_dropout; an identity
  // hook on each dropout (and on ff, whose output dropout is fused into the add) makes them run
  // dropout, add and gelu instead. Values, input and parameter gradients must agree bit for bit.
  for (bool nf : {true, false})
    for (bool decoder : {false, true}) {
      CAPTURE(nf);
      CAPTURE(decoder);
      TransformerLayerOptions o;
      o.d_model = 16;
      o.attn.num_heads = 2;
      o.ff.hidden = 40;
      o.norm_first = nf;
      o.dropout = 0.25;
      o.attn.dropout = 0.25;
      Generator gen(11);
      TransformerEncoderLayer<float> enc(o, gen);
      TransformerDecoderLayer<float> dec(o, gen);
      nn::Module<float>& layer = decoder ? static_cast<nn::Module<float>&>(dec) : enc;
      const Array<float> x0 = test::random_array<float>({3, 9, 16}, 4), mem0 = test::random_array<float>({3, 5, 16}, 5);
      const Array<float> up = test::random_array<float>({3, 9, 16}, 6);
      auto run = [&](std::size_t* records) {
        layer.zero_grad();
        manual_seed(8);
        Variable<float> x(x0, true), mem(mem0, true);
        const std::size_t before = autograd::Tape::current().size();
        Variable<float> y = decoder ? dec.forward(x, mem) : enc.forward(x);
        *records = autograd::Tape::current().size() - before;
        y.backward(up);
        std::vector<Array<float>> out{y.value(), x.grad()};
        if (decoder) out.push_back(mem.grad());
        for (auto& [name, p] : layer.named_parameters()) out.push_back(p.grad());
        return out;
      };
      std::size_t fused_records = 0, plain_records = 0;
      const auto fused = run(&fused_records);
      std::vector<nn::HookHandle> hooks;
      for (const char* path : {"drop1", "drop2", "ff", "ff.drop"})
        if (decoder || std::string(path) != "drop2")
          hooks.push_back(layer.add_forward_hook(path, [](const Variable<float>& v) { return v; }));
      const auto plain = run(&plain_records);
      for (auto& h : hooks) layer.remove_forward_hook(h);
      CHECK(plain_records == fused_records + (decoder ? 4 : 3));  // one op fewer per fusion
      REQUIRE(fused.size() == plain.size());
      for (std::size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        CHECK(test::bitwise_equal(fused[i], plain[i]));
      }
    }
}

// ---- EncoderModel ----

TEST_CASE("EncoderModel: logits shape, parameter names in order, attention layer names") {
  Generator gen(4);
  EncoderModel<float> m(7, 3, tiny_model(true, Positional::Learned), gen);
  IndexArray tokens = test::ids({{1, 2, 3, 4}, {6, 5, 0, 0}});
  CHECK(m.forward(tokens).shape() == Shape{2, 4, 3});
  auto names = test::param_names(m);
  CHECK(names[0] == "tok_emb.weight");
  CHECK(names[1] == "pos.weight");
  CHECK(names[2] == "blocks.0.attn.w_q.weight");
  CHECK(contains(names, "blocks.0.ff.fc1.weight"));
  CHECK(contains(names, "blocks.1.norm2.bias"));
  CHECK(names[names.size() - 3] == "norm.bias");
  CHECK(names[names.size() - 2] == "head.weight");
  CHECK(names.back() == "head.bias");
  CHECK(m.head->weight.shape() == Shape{3, 4});
  auto attn = m.modules_of_type<MultiHeadAttention<float>>();
  REQUIRE(attn.size() == 2);
  CHECK(attn[0].first == "blocks.0.attn");
  CHECK(attn[1].first == "blocks.1.attn");
  CHECK(attn[1].second == m.blocks->operator[](1).attn.get());

  EncoderModel<float> post(7, 3, tiny_model(false), gen);
  auto pnames = test::param_names(post);
  CHECK_FALSE(contains(pnames, "norm.weight"));
  CHECK_FALSE(contains(pnames, "pos.weight"));
  CHECK(pnames[1] == "blocks.0.attn.w_q.weight");
}

TEST_CASE("EncoderModel: gradcheck pre-LN/post-LN, sinusoidal/learned, with padding") {
  for (bool nf : {true, false}) {
    CAPTURE(nf);
    Generator gen(5);
    TransformerOptions o = tiny_model(nf, nf ? Positional::Learned : Positional::Sinusoidal);
    o.layers = 1;
    EncoderModel<double> m(5, 3, o, gen);
    perturb_norms(m, 9);
    IndexArray tokens = test::ids({{1, 2, 4}, {3, 0, 0}});
    const KeyPaddingMask kpm = KeyPaddingMask::ignore_where(Mask{{false, false, false}, {false, true, true}});
    test::check_module_grad([&] { return m.forward(tokens, kpm); }, m);
  }
}

TEST_CASE("EncoderModel: padded positions do not change the other positions, causal option") {
  Generator gen(6);
  EncoderModel<double> m(6, 4, tiny_model(true), gen);
  const KeyPaddingMask kpm = KeyPaddingMask::ignore_where(Mask{{false, false, true, true}});
  Array<double> a = m.forward(test::ids({{1, 2, 3, 4}}), kpm).value();
  Array<double> b = m.forward(test::ids({{1, 2, 5, 0}}), kpm).value();
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t c = 0; c < 4; ++c) CHECK(a(0, t, c) == doctest::Approx(b(0, t, c)).epsilon(1e-12));
  // Without the mask the change is visible.
  Array<double> c0 = m.forward(test::ids({{1, 2, 3, 4}})).value();
  Array<double> c1 = m.forward(test::ids({{1, 2, 5, 0}})).value();
  CHECK(c0(0, 0, 0) != doctest::Approx(c1(0, 0, 0)));

  TransformerOptions o = tiny_model(true);
  o.causal = true;
  EncoderModel<double> lm(6, 4, o, gen);
  Array<double> d0 = lm.forward(test::ids({{1, 2, 3, 4}})).value();
  Array<double> d1 = lm.forward(test::ids({{1, 2, 3, 0}})).value();
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t c = 0; c < 4; ++c) CHECK(d0(0, t, c) == doctest::Approx(d1(0, t, c)).epsilon(1e-12));
  CHECK(d0(0, 3, 0) != doctest::Approx(d1(0, 3, 0)));
}

TEST_CASE("EncoderModel::forward_rows: the rows of forward(), gradcheck, and rows outside the positions throw") {
  Generator gen(7);
  EncoderModel<double> m(6, 5, tiny_model(true, Positional::Learned), gen);
  perturb_norms(m, 3);
  const IndexArray tokens = test::ids({{1, 2, 3, 4}, {5, 0, 2, 0}});
  const KeyPaddingMask kpm = KeyPaddingMask::ignore_where(Mask{{false, false, false, false}, {false, false, true, true}});
  const IndexArray rows = IndexArray{7, 0, 2, 5};  // any order
  const Array<double> all = m.forward(tokens, kpm).value(), some = m.forward_rows(tokens, rows, kpm).value();
  REQUIRE(some.shape() == Shape{4, 5});
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t c = 0; c < 5; ++c) CHECK(some(i, c) == doctest::Approx(all.data()[rows(i) * 5 + c]).epsilon(1e-12));
  test::check_module_grad([&] { return m.forward_rows(tokens, rows, kpm); }, m);

  CHECK_THROWS_WITH_AS(m.forward_rows(tokens, IndexArray{0, 8}),
                       doctest::Contains("row 8 (rows[1]) is outside the 8 positions of tokens (2, 4)"), ValueError);
  CHECK_THROWS_WITH_AS(m.forward_rows(tokens, IndexArray{-1}), doctest::Contains("row -1 (rows[0])"), ValueError);
  CHECK_THROWS_WITH_AS(m.forward_rows(tokens, test::ids({{0, 1}})), doctest::Contains("expected rows of shape (n), found (1, 2)"),
                       ShapeError);
}

TEST_CASE("EncoderModel: errors for bad token shapes, ids and lengths") {
  EncoderModel<float> m(5, 2, tiny_model(true));
  CHECK_THROWS_WITH_AS(m.forward(IndexArray::from_shape({2})), doctest::Contains("tokens of shape (B, T), found (2)"), ShapeError);
  CHECK_THROWS_AS(m.forward(test::ids({{1, 5}})), ValueError);
  CHECK_THROWS_AS(m.forward(IndexArray(xt::zeros<Index>({1, 9}))), ShapeError);  // max_len 8
  TransformerOptions o = tiny_model(true);
  o.attn.num_heads = 3;
  CHECK_THROWS_WITH_AS(EncoderModel<float>(5, 2, o),
                       doctest::Contains("TransformerOptions: attn.num_heads: d_model (4) must be divisible by attn.num_heads (3)"),
                       OptionError);
  CHECK(attention_impl_names().parse("composite", "impl") == AttentionImpl::Composite);
  CHECK_THROWS_WITH_AS(attention_impl_names().parse("flash", "impl"), doctest::Contains("impl: expected one of fused, composite, found 'flash'"), ValueError);
  CHECK_THROWS_WITH_AS(positional_names().parse("learnt", "positional"), doctest::Contains("did you mean 'learned'?"), ValueError);
}

// ---- Seq2SeqModel ----

TEST_CASE("Seq2SeqModel: names, forward = decode(encode), causal decoder, attention layers") {
  Generator gen(7);
  Seq2SeqModel<double> m(6, 5, tiny_model(true, Positional::Learned), gen);
  auto names = test::param_names(m);
  CHECK(names[0] == "src_emb.weight");
  CHECK(names[1] == "tgt_emb.weight");
  CHECK(names[2] == "src_pos.weight");
  CHECK(names[3] == "tgt_pos.weight");
  CHECK(names[4] == "encoder.blocks.0.attn.w_q.weight");
  CHECK(contains(names, "encoder.norm.weight"));
  CHECK(contains(names, "decoder.blocks.1.cross_attn.w_v.bias"));
  CHECK(contains(names, "decoder.norm.bias"));
  CHECK(names.back() == "head.bias");
  auto attn = m.modules_of_type<MultiHeadAttention<double>>();
  REQUIRE(attn.size() == 6);
  CHECK(attn[0].first == "encoder.blocks.0.attn");
  CHECK(attn[2].first == "decoder.blocks.0.self_attn");
  CHECK(attn[3].first == "decoder.blocks.0.cross_attn");
  CHECK(attn[5].first == "decoder.blocks.1.cross_attn");

  IndexArray src = test::ids({{1, 2, 3}, {5, 4, 0}}), tgt = test::ids({{0, 1, 2, 3}, {0, 4, 4, 1}});
  Array<double> logits = m.forward(src, tgt).value();
  REQUIRE(logits.shape() == Shape{2, 4, 5});
  CHECK(test::bitwise_equal(m.decode(m.encode(src), tgt).value(), logits));
  // Logits at t depend only on tgt[:t+1].
  IndexArray tgt2 = tgt;
  tgt2(0, 3) = 4;
  Array<double> l2 = m.forward(src, tgt2).value();
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t v = 0; v < 5; ++v) CHECK(logits(0, t, v) == doctest::Approx(l2(0, t, v)).epsilon(1e-12));
  // Every position depends on the source.
  IndexArray src2 = src;
  src2(0, 2) = 0;
  CHECK(m.forward(src2, tgt).value()(0, 0, 0) != doctest::Approx(logits(0, 0, 0)));
  CHECK_THROWS_AS(m.decode(Variable<double>(zeros<double>({3, 3, 4})), tgt), ShapeError);
}

TEST_CASE("Seq2SeqModel: gradcheck pre-LN and post-LN with source padding") {
  for (bool nf : {true, false}) {
    CAPTURE(nf);
    Generator gen(8);
    TransformerOptions o = tiny_model(nf);
    o.layers = 1;
    Seq2SeqModel<double> m(4, 3, o, gen);
    perturb_norms(m, 11);
    IndexArray src = test::ids({{1, 2, 3}, {3, 1, 0}}), tgt = test::ids({{0, 1}, {0, 2}});
    const KeyPaddingMask src_kpm = KeyPaddingMask::ignore_where(Mask{{false, false, false}, {false, false, true}});
    test::check_module_grad([&] { return m.forward(src, tgt, src_kpm); }, m);
  }
}

// ---- module behaviour on whole models ----

TEST_CASE("models: train/eval reaches every submodule, dropout only in training and reproducible per seed") {
  TransformerOptions o = tiny_model(true);
  o.dropout = 0.3;
  o.attn.dropout = 0.3;
  Generator gen(9);
  Seq2SeqModel<double> m(6, 5, o, gen);
  IndexArray src = test::ids({{1, 2, 3}}), tgt = test::ids({{0, 1, 2}});
  CHECK(test::all_training(m, true));
  m.eval();
  CHECK(test::all_training(m, false));
  manual_seed(1);
  Array<double> e1 = m.forward(src, tgt).value();
  manual_seed(2);
  CHECK(test::bitwise_equal(m.forward(src, tgt).value(), e1));
  m.train();
  CHECK(test::all_training(m, true));
  manual_seed(1);
  Array<double> t1 = m.forward(src, tgt).value();
  manual_seed(1);
  CHECK(test::bitwise_equal(m.forward(src, tgt).value(), t1));
  CHECK_FALSE(test::bitwise_equal(t1, e1));
  manual_seed(2);
  CHECK_FALSE(test::bitwise_equal(m.forward(src, tgt).value(), t1));
  // Gradient check in training mode, with the dropout masks fixed by reseeding.
  TransformerOptions small = tiny_model(true);
  small.layers = 1;
  small.dropout = 0.2;
  small.attn.dropout = 0.2;
  EncoderModel<double> enc(4, 2, small, gen);
  IndexArray tokens = test::ids({{1, 2, 3}});
  test::check_module_grad([&] { manual_seed(5); return weighted_sum(enc.forward(tokens)); }, enc);
}

TEST_CASE("models: the same seed builds the same model, state_dict round trip") {
  Generator g1(10), g2(10), g3(11);
  EncoderModel<float> a(6, 3, tiny_model(true, Positional::Learned), g1);
  EncoderModel<float> b(6, 3, tiny_model(true, Positional::Learned), g2);
  EncoderModel<float> c(6, 3, tiny_model(true, Positional::Learned), g3);
  IndexArray tokens = test::ids({{1, 2, 3, 5}});
  CHECK(test::bitwise_equal(a.forward(tokens).value(), b.forward(tokens).value()));
  CHECK_FALSE(test::bitwise_equal(a.forward(tokens).value(), c.forward(tokens).value()));
  c.load_state_dict(a.state_dict());
  CHECK(test::bitwise_equal(a.forward(tokens).value(), c.forward(tokens).value()));
  // state_dict holds copies: changing the model afterwards does not change a saved state.
  auto saved = a.state_dict();
  a.head->bias.value()(0) += 1.0f;
  CHECK(saved.back().second(0) != a.head->bias.value()(0));
}

TEST_CASE("models: load_state_dict rejects missing, unexpected and misshapen entries without changing anything") {
  Generator gen(12);
  EncoderModel<float> m(6, 3, tiny_model(true), gen);
  IndexArray tokens = test::ids({{1, 2}});
  Array<float> before = m.forward(tokens).value();
  auto good = m.state_dict();

  auto missing = good;
  missing.erase(missing.begin() + 3);
  CHECK_THROWS_WITH_AS(m.load_state_dict(missing), doctest::Contains(("missing: " + good[3].first).c_str()), ValueError);

  auto extra = good;
  extra.emplace_back("head.extra", zeros<float>({2}));
  CHECK_THROWS_WITH_AS(m.load_state_dict(extra), doctest::Contains("unexpected: head.extra"), ValueError);

  auto shaped = good;
  shaped[0].second = zeros<float>({6, 5});
  for (auto& kv : shaped)
    if (kv.first != "tok_emb.weight") kv.second = zeros<float>(kv.second.shape());
  CHECK_THROWS_WITH_AS(m.load_state_dict(shaped),
                       doctest::Contains("shape of tok_emb.weight: expected (6, 4), found (6, 5)"), ValueError);
  CHECK(test::bitwise_equal(m.forward(tokens).value(), before));

  // A state from a differently shaped model does not fit.
  TransformerOptions wider = tiny_model(true);
  wider.ff.hidden = 8;
  EncoderModel<float> other(6, 3, wider);
  CHECK_THROWS_WITH_AS(m.load_state_dict(other.state_dict()), doctest::Contains("blocks.0.ff.fc1.weight"), ValueError);
}

TEST_CASE("models: 1 and 2 threads give identical logits and gradients") {
  test::check_same_on_1_and_2_threads([] {
    TransformerOptions o;
    o.d_model = 32;
    o.attn.num_heads = 4;
    o.ff.hidden = 64;
    o.dropout = 0.1;
    o.attn.dropout = 0.1;
    o.max_len = 32;
    Generator gen(13);
    Seq2SeqModel<float> m(11, 9, o, gen);
    IndexArray src = IndexArray::from_shape({4, 12}), tgt = IndexArray::from_shape({4, 10});
    for (std::size_t i = 0; i < src.size(); ++i) src.data()[i] = Index(i * 7 % 11);
    for (std::size_t i = 0; i < tgt.size(); ++i) tgt.data()[i] = Index(i * 5 % 9);
    manual_seed(3);
    Variable<float> y = m.forward(src, tgt);
    sum(y).backward();
    std::vector<Array<float>> r{y.value()};
    for (auto& p : m.parameters()) r.push_back(p.grad());
    return r;
  });
}
