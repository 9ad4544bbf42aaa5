// The module tree (named_modules, submodule, apply) and forward hooks: hook points in attention,
// reading them (run_with_cache), replacing them (patching the pattern, ablating a head through
// hook_z), gradients through a hook, and that an unhooked forward is unchanged.
#include <doctest/doctest.h>

#include "nn/nn_test_util.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/ops/shape.hpp"
#include "qkv/tensor/allocator.hpp"

namespace qkv {
using namespace nn;

namespace {

TransformerOptions tiny(AttentionImpl impl = AttentionImpl::Fused) {
  TransformerOptions o;
  o.d_model = 8;
  o.attn.num_heads = 2;
  o.layers = 2;
  o.ff.hidden = 16;
  o.attn.impl = impl;
  return o;
}

MultiHeadAttentionOptions mha(AttentionImpl impl) {
  MultiHeadAttentionOptions o;
  o.embed_dim = 8;
  o.num_heads = 2;
  o.impl = impl;
  return o;
}

}  // namespace

TEST_CASE("module tree: named_modules in registration order, modules_of_type, submodule, apply") {
  Generator gen(1);
  EncoderModel<float> m(5, 3, tiny(), gen);
  auto mods = m.named_modules();
  REQUIRE(mods.size() > 10);
  CHECK(mods[0].first == "");
  CHECK(mods[0].second == &m);
  CHECK(mods[1].first == "tok_emb");
  std::vector<std::string> names;
  for (auto& [n, p] : mods) names.push_back(n);
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  CHECK(at("blocks.0.attn") < at("blocks.0.attn.w_q") );
  CHECK(at("blocks.0.attn.hook_pattern") < at("blocks.1.attn"));
  CHECK(at("blocks.1.attn.hook_result") < at("head"));

  auto attn = m.modules_of_type<MultiHeadAttention<float>>();
  REQUIRE(attn.size() == 2);
  CHECK(attn[0].first == "blocks.0.attn");
  CHECK(&m.submodule("blocks.1.attn") == attn[1].second);
  CHECK(&m.submodule("") == &m);
  CHECK_THROWS_WITH_AS(m.submodule("blocks.0.atn.hook_q"), doctest::Contains("did you mean 'blocks.0.attn.hook_q'"),
                       ValueError);

  // apply: every module once, children before their parent.
  std::vector<Module<float>*> seen;
  m.apply([&](Module<float>& x) { seen.push_back(&x); });
  CHECK(seen.size() == mods.size());
  CHECK(seen.back() == &m);
  auto pos = [&](Module<float>* x) { return std::find(seen.begin(), seen.end(), x) - seen.begin(); };
  CHECK(pos(attn[0].second->w_q.get()) < pos(attn[0].second));

  // Hook points hold no parameters: the state dict is unchanged by them.
  for (auto& [n, p] : m.named_parameters()) CHECK(n.find("hook_") == std::string::npos);
}

TEST_CASE("forward hooks: observe, replace, remove, clear") {
  Generator gen(2);
  Linear<float> lin(3, 2, true, gen);
  Variable<float> x(test::random_array<float>({4, 3}, 3));
  const Array<float> plain = lin.forward(x).value();
  Array<float> seen;
  HookHandle h = lin.add_forward_hook([&](const Variable<float>& y) {
    seen = y.value();
    return y;
  });
  CHECK(lin.has_forward_hooks());
  CHECK(test::bitwise_equal(lin.forward(x).value(), plain));  // observing changes nothing
  CHECK(test::bitwise_equal(seen, plain));
  HookHandle z = lin.add_forward_hook([](const Variable<float>& y) { return Variable<float>(zeros<float>(y.shape())); });
  CHECK(lin.forward(x).value() == zeros<float>({4, 2}));  // hooks run in order; the last replaces
  lin.remove_forward_hook(z);
  CHECK(test::bitwise_equal(lin.forward(x).value(), plain));
  lin.remove_forward_hook(h);
  CHECK_FALSE(lin.has_forward_hooks());
  lin.add_forward_hook([](const Variable<float>& y) { return y; });
  lin.clear_forward_hooks();
  CHECK_FALSE(lin.has_forward_hooks());
}

TEST_CASE("attention hook points: shapes, a recorded pattern equals need_weights, recording changes nothing") {
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
    CAPTURE(int(impl));
    Generator gen(4);
    MultiHeadAttention<float> m(mha(impl), gen);
    Variable<float> q(test::random_array<float>({2, 3, 8}, 5)), kv(test::random_array<float>({2, 5, 8}, 6));
    const Array<float> plain = m.forward(q, kv, kv).output.value();
    Array<float> out;
    auto cache = run_with_cache(m, [&] { out = m.forward(q, kv, kv).output.value(); });
    CHECK(test::bitwise_equal(out, plain));
    CHECK(cache["hook_q"].shape() == Shape{2, 2, 3, 4});
    CHECK(cache["hook_k"].shape() == Shape{2, 2, 5, 4});
    CHECK(cache["hook_v"].shape() == Shape{2, 2, 5, 4});
    CHECK(cache["hook_pattern"].shape() == Shape{2, 2, 3, 5});
    CHECK(cache["hook_z"].shape() == Shape{2, 2, 3, 4});
    CHECK(test::bitwise_equal(cache["hook_result"], plain));
    const Array<float>& w = cache["hook_pattern"];
    for (std::size_t r = 0; r < 2 * 2 * 3; ++r) {
      float s = 0;
      for (std::size_t j = 0; j < 5; ++j) s += w.data()[r * 5 + j];
      CHECK(s == doctest::Approx(1.0f).epsilon(1e-5));
    }
    MultiHeadAttentionArgs<float> args;
    args.need_weights = true;
    args.average_attn_weights = false;
    CHECK(test::max_abs_diff(m.forward(q, kv, kv, args).weights.value(), w) < 1e-6);
    CHECK_THROWS_WITH_AS(cache["hook_patern"], doctest::Contains("did you mean 'hook_pattern'"), ValueError);
    CHECK_FALSE(m.hook_pattern->has_forward_hooks());  // run_with_cache removed its hooks
  }
}

TEST_CASE("attention hooks: a replaced pattern is what the layer attends with") {
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
    Generator gen(7);
    MultiHeadAttention<double> m(mha(impl), gen);
    Variable<double> x(test::random_array<double>({1, 4, 8}, 8));
    // Uniform attention over the 4 keys: each head's output is the mean of its values.
    m.hook_pattern->add_forward_hook([](const Variable<double>& p) { return Variable<double>(full<double>(p.shape(), 0.25)); });
    ActivationCache<double> cache = run_with_cache(m, [&] { m.forward(x, x, x); }, {"hook_v", "hook_z"});
    const Array<double> mean_v = mean(Variable<double>(cache["hook_v"]), {2}, true).value();  // (1, H, 1, D)
    const Array<double>& z = cache["hook_z"];
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t d = 0; d < 4; ++d) CHECK(z(0, h, i, d) == doctest::Approx(mean_v(0, h, 0, d)).epsilon(1e-12));
    m.clear_forward_hooks();
    m.hook_pattern->add_forward_hook([](const Variable<double>& p) { return Variable<double>(zeros<double>({1, 1})); });
    CHECK_THROWS_WITH_AS(m.forward(x, x, x), doctest::Contains("hook_pattern hook returned shape (1, 1)"), ShapeError);
  }
}

TEST_CASE("attention hooks: zeroing one head through hook_z removes exactly its contribution") {
  Generator gen(9);
  MultiHeadAttention<double> m(mha(AttentionImpl::Fused), gen);
  Variable<double> x(test::random_array<double>({2, 3, 8}, 10));
  const Array<double> z = run_with_cache(m, [&] { m.forward(x, x, x); }, {"hook_z"})["hook_z"];
  m.hook_z->add_forward_hook([](const Variable<double>& v) {
    Array<double> a = v.value();
    for (std::size_t b = 0; b < a.shape()[0]; ++b)
      for (std::size_t i = 0; i < a.shape()[2]; ++i)
        for (std::size_t d = 0; d < a.shape()[3]; ++d) a(b, 0, i, d) = 0;  // head 0
    return Variable<double>(a);
  });
  const Array<double> ablated = m.forward(x, x, x).output.value();
  // By hand: w_o applied to the merged heads with head 0 zeroed.
  Array<double> zz = z;
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t d = 0; d < 4; ++d) zz(b, 0, i, d) = 0;
  const Array<double> want = m.w_o->forward(merge_heads(Variable<double>(zz))).value();
  CHECK(test::max_abs_diff(ablated, want) < 1e-12);
}

TEST_CASE("attention hooks: a per-head gate through hook_z is differentiable (gradcheck)") {
  // Michel et al.'s head importance is d loss / d gate_h at gate = 1: a hook that multiplies each
  // head's output by a gate variable must pass gradients to the gate and to the layer.
  Generator gen(11);
  MultiHeadAttention<double> m(mha(AttentionImpl::Composite), gen);
  Variable<double> x = test::leaf({1, 3, 8}, 12);
  Variable<double> gate(full<double>({1, 2, 1, 1}, 1.0), true);
  m.hook_z->add_forward_hook([&](const Variable<double>& z) { return mul(z, gate); });
  test::check_module_grad([&] { return sum(m.forward(x, x, x).output); }, m, {x, gate});
}

TEST_CASE("model hooks by path: blocks.<i>.attn.hook_pattern of an encoder, all layers recorded") {
  Generator gen(13);
  EncoderModel<float> m(6, 4, tiny(), gen);
  IndexArray ids = test::ids({{1, 2, 3, 4, 5}});
  const Array<float> plain = m.forward(ids).value();
  Array<float> logits;
  auto cache = run_with_cache(m, [&] { logits = m.forward(ids).value(); }, {"*.hook_pattern"});
  CHECK(test::bitwise_equal(logits, plain));
  REQUIRE(cache.entries().size() == 2);
  CHECK(cache.entries()[0].first == "blocks.0.attn.hook_pattern");
  CHECK(cache.entries()[1].first == "blocks.1.attn.hook_pattern");
  CHECK(cache["blocks.1.attn.hook_pattern"].shape() == Shape{1, 2, 5, 5});
  HookScope<float> scope(m);
  CHECK_THROWS_WITH_AS(scope.add_matching({"*.hook_nothing"}, [](const std::string&) { return ForwardHook<float>(); }),
                       doctest::Contains("no hook point matches *.hook_nothing"), ValueError);
}

}  // namespace qkv

namespace qkv {

TEST_CASE("attention hooks: the fused layer holds no T x T weights unless hook_pattern is hooked") {
  const std::size_t H = 2, T = 512, E = 32;
  MultiHeadAttentionOptions o;
  o.embed_dim = E;
  o.num_heads = H;
  o.impl = AttentionImpl::Fused;
  Generator gen(3);
  nn::MultiHeadAttention<float> m(o, gen);
  Variable<float> x(test::random_array<float>({1, T, E}, 4), true);
  nn::MultiHeadAttentionArgs<float> args;
  args.is_causal = true;
  const std::size_t weights_bytes = H * T * T * sizeof(float);  // the (1, H, T, T) pattern: 2 MiB
  auto peak = [&] {
    pool::reset_peak();
    const std::uint64_t before = pool::stats().in_use_bytes;
    {
      Variable<float> y = m.forward(x, x, x, args).output;
      y.backward(test::random_array<float>(y.shape(), 5));
    }
    return pool::stats().peak_in_use_bytes - before;
  };
  CHECK(peak() < weights_bytes / 2);  // no instrument on
  {
    // a hook on the per-head outputs (ablation) leaves the fused path as it is
    nn::HookScope<float> scope(m);
    scope.add("hook_z", [](const Variable<float>& z) { return z; });
    CHECK(peak() < weights_bytes / 2);
  }
  {
    // reading the pattern makes it: the composite path, T x T per head
    nn::HookScope<float> scope(m);
    scope.add("hook_pattern", [](const Variable<float>& w) { return w; });
    CHECK(peak() > weights_bytes);
  }
}

}  // namespace qkv
