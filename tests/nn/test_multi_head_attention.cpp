#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <type_traits>

#include <xtensor/xview.hpp>

#include "nn_test_util.hpp"
#include "qkv/nn/multi_head_attention.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"

using namespace qkv;
using namespace qkv::nn;
using test::leaf;

namespace {

using Pred = std::function<bool(std::size_t b, std::size_t h, std::size_t i, std::size_t j)>;
using Bias = std::function<double(std::size_t b, std::size_t h, std::size_t i, std::size_t j)>;

// x (B, T, in) @ W^T + b with plain loops.
Array<double> project(const Array<double>& x, const Linear<double>& l) {
  const std::size_t B = x.shape()[0], T = x.shape()[1], in = x.shape()[2], out = l.weight.dim(0);
  Array<double> y = zeros<double>({B, T, out});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t o = 0; o < out; ++o) {
        double s = l.bias.defined() ? l.bias.value()(o) : 0.0;
        for (std::size_t i = 0; i < in; ++i) s += x(b, t, i) * l.weight.value()(o, i);
        y(b, t, o) = s;
      }
  return y;
}

struct Ref {
  Array<double> out;      // (B, Tq, E)
  Array<double> weights;  // (B, H, Tq, Tk)
};

// Multi-head attention written out with loops, independent of the layer's code path.
// allowed(b, h, i, j) says whether query i may attend key j; bias is added to the scores.
Ref reference(const MultiHeadAttention<double>& m, const Array<double>& q, const Array<double>& k,
              const Array<double>& v, const Pred& allowed, const Bias& bias = nullptr) {
  const std::size_t H = m.num_heads(), D = m.head_dim(), Dv = m.value_dim();
  const std::size_t B = q.shape()[0], Tq = q.shape()[1], Tk = k.shape()[1];
  const double scale = m.options().scale.value_or(1.0 / std::sqrt(double(D)));
  Array<double> Q = project(q, *m.w_q), K = project(k, *m.w_k), V = project(v, *m.w_v);
  Array<double> merged = zeros<double>({B, Tq, H * Dv});
  Array<double> W = zeros<double>({B, H, Tq, Tk});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < Tq; ++i) {
        std::vector<double> s(Tk, -INFINITY);
        double mx = -INFINITY;
        for (std::size_t j = 0; j < Tk; ++j) {
          if (!allowed(b, h, i, j)) continue;
          double d = 0;
          for (std::size_t c = 0; c < D; ++c) d += Q(b, i, h * D + c) * K(b, j, h * D + c);
          s[j] = d * scale + (bias ? bias(b, h, i, j) : 0.0);
          mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY) continue;  // nothing to attend: zero row
        double z = 0;
        for (std::size_t j = 0; j < Tk; ++j) z += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
        for (std::size_t j = 0; j < Tk; ++j) W(b, h, i, j) = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx) / z;
        for (std::size_t c = 0; c < Dv; ++c) {
          double o = 0;
          for (std::size_t j = 0; j < Tk; ++j) o += W(b, h, i, j) * V(b, j, h * Dv + c);
          merged(b, i, h * Dv + c) = o;
        }
      }
  return {project(merged, *m.w_o), W};
}

const Pred kAll = [](std::size_t, std::size_t, std::size_t, std::size_t) { return true; };

// Random nonzero biases, so that the test sees them (the init makes them zero).
template <class T>
void randomise_biases(MultiHeadAttention<T>& m, std::uint64_t seed) {
  for (auto* l : {m.w_q.get(), m.w_k.get(), m.w_v.get(), m.w_o.get()})
    if (l->bias.defined()) l->bias.value() = test::random_array<T>(l->bias.shape(), seed++);
}

MultiHeadAttentionOptions mha_options(std::size_t E, std::size_t H, double dropout = 0.0,
                                      AttentionImpl impl = AttentionImpl::Fused) {
  MultiHeadAttentionOptions o;
  o.embed_dim = E;
  o.num_heads = H;
  o.dropout = dropout;
  o.impl = impl;
  return o;
}

const AttentionImpl kImpls[] = {AttentionImpl::Fused, AttentionImpl::Composite};
const char* impl_name(AttentionImpl i) { return i == AttentionImpl::Fused ? "fused" : "composite"; }

}  // namespace

TEST_CASE("MultiHeadAttention: parameter names, shapes and init") {
  Generator gen(1);
  MultiHeadAttentionOptions o;
  o.embed_dim = 8;
  o.num_heads = 2;
  o.kdim = 5;
  o.vdim = 3;
  MultiHeadAttention<double> m(o, gen);
  CHECK(test::param_names(m) == std::vector<std::string>{"w_q.weight", "w_q.bias", "w_k.weight", "w_k.bias",
                                                         "w_v.weight", "w_v.bias", "w_o.weight", "w_o.bias"});
  CHECK(m.w_q->weight.shape() == Shape{8, 8});
  CHECK(m.w_k->weight.shape() == Shape{8, 5});
  CHECK(m.w_v->weight.shape() == Shape{8, 3});
  CHECK(m.w_o->weight.shape() == Shape{8, 8});
  CHECK(m.head_dim() == 4);
  for (auto* l : {m.w_q.get(), m.w_k.get(), m.w_v.get(), m.w_o.get()})
    for (double b : l->bias.value()) CHECK(b == 0.0);
  auto max_abs = [](const Array<double>& a) {
    double mx = 0;
    for (double x : a) mx = std::max(mx, std::fabs(x));
    return mx;
  };
  CHECK(max_abs(m.w_k->weight.value()) <= std::sqrt(6.0 / (8 + 5)));
  CHECK(max_abs(m.w_o->weight.value()) <= 1.0 / std::sqrt(8.0));
  // Explicit head_dim decouples D from E; no bias.
  o.head_dim = 3;
  o.num_heads = 3;
  o.bias = false;
  MultiHeadAttention<double> n(o, gen);
  CHECK(n.w_q->weight.shape() == Shape{9, 8});
  CHECK(n.w_o->weight.shape() == Shape{8, 9});
  CHECK(n.parameters().size() == 4);
}

TEST_CASE("MultiHeadAttention: qk_init_gain scales the w_q and w_k draws (unscaled with gain D^-1/4 starts where scaled starts)") {
  MultiHeadAttentionOptions o;
  o.embed_dim = 32;
  o.num_heads = 2;  // D = 16, D^(-1/4) = 0.5: every scaling below is exact in floating point
  Generator g1(7), g2(7);
  MultiHeadAttention<float> scaled(o, g1);
  MultiHeadAttentionOptions u = o;
  u.scale = 1.0;
  u.qk_init_gain = 0.5;
  MultiHeadAttention<float> unscaled(u, g2);
  for (std::size_t i = 0; i < scaled.w_q->weight.size(); ++i) {
    CHECK(unscaled.w_q->weight.value().data()[i] == 0.5f * scaled.w_q->weight.value().data()[i]);
    CHECK(unscaled.w_k->weight.value().data()[i] == 0.5f * scaled.w_k->weight.value().data()[i]);
    CHECK(unscaled.w_v->weight.value().data()[i] == scaled.w_v->weight.value().data()[i]);
  }
  Variable<float> x(test::random_array<float>({2, 5, 32}, 4));
  MultiHeadAttentionArgs<float> args;
  args.need_weights = true;
  args.average_attn_weights = false;
  auto a = scaled.forward(x, x, x, args), b = unscaled.forward(x, x, x, args);
  CHECK(test::max_abs_diff(a.weights.value(), b.weights.value()) < 1e-6);
  CHECK(test::max_abs_diff(a.output.value(), b.output.value()) < 1e-6);
  u.qk_init_gain = 0;
  CHECK_THROWS_WITH_AS(MultiHeadAttention<float>{u}, doctest::Contains("qk_init_gain: expected a positive gain, found 0"),
                       OptionError);
}

TEST_CASE("MultiHeadAttention: a head count that does not divide embed_dim is a clear error") {
  MultiHeadAttentionOptions o;
  o.embed_dim = 10;
  o.num_heads = 4;
  CHECK_THROWS_WITH_AS(MultiHeadAttention<float>{o},
                       doctest::Contains("MultiHeadAttentionOptions: num_heads: embed_dim (10) must be divisible by num_heads (4)"),
                       OptionError);
  o.head_dim = 2;
  CHECK_NOTHROW(MultiHeadAttention<float>{o});
}

TEST_CASE("MultiHeadAttention: self attention matches the loop reference, with weights") {
  for (AttentionImpl impl : kImpls) {
    CAPTURE(impl_name(impl));
    Generator gen(2);
    MultiHeadAttention<double> m(mha_options(6, 2, 0.0, impl), gen);
    randomise_biases(m, 10);
    Array<double> x = test::random_array<double>({2, 4, 6}, 3);
    Variable<double> xv(x);
    MultiHeadAttentionArgs<double> args;
    args.need_weights = true;
    args.average_attn_weights = false;
    auto out = m.forward(xv, xv, xv, args);
    Ref ref = reference(m, x, x, x, kAll);
    CHECK(test::max_abs_diff(out.output.value(), ref.out) < 1e-12);
    CHECK(test::max_abs_diff(out.weights.value(), ref.weights) < 1e-12);
    args.average_attn_weights = true;
    auto avg = m.forward(xv, xv, xv, args).weights.value();
    REQUIRE(avg.shape() == Shape{2, 4, 4});
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t j = 0; j < 4; ++j)
          CHECK(avg(b, i, j) == doctest::Approx((ref.weights(b, 0, i, j) + ref.weights(b, 1, i, j)) / 2));
    CHECK_FALSE(m.forward(xv, xv, xv).weights.defined());
  }
}

TEST_CASE("MultiHeadAttention: cross attention, Tk != Tq, kdim and vdim != E, explicit head_dim and scale") {
  for (AttentionImpl impl : kImpls) {
    CAPTURE(impl_name(impl));
    Generator gen(4);
    MultiHeadAttentionOptions o;
    o.embed_dim = 4;
    o.num_heads = 3;
    o.head_dim = 2;
    o.kdim = 5;
    o.vdim = 3;
    o.impl = impl;
    o.scale = 0.3;
    MultiHeadAttention<double> m(o, gen);
    randomise_biases(m, 20);
    Array<double> q = test::random_array<double>({2, 3, 4}, 5), k = test::random_array<double>({2, 5, 5}, 6),
                  v = test::random_array<double>({2, 5, 3}, 7);
    MultiHeadAttentionArgs<double> args;
    args.need_weights = true;
    args.average_attn_weights = false;
    auto out = m.forward(Variable<double>(q), Variable<double>(k), Variable<double>(v), args);
    REQUIRE(out.output.shape() == Shape{2, 3, 4});
    Ref ref = reference(m, q, k, v, kAll);
    CHECK(test::max_abs_diff(out.output.value(), ref.out) < 1e-12);
    CHECK(test::max_abs_diff(out.weights.value(), ref.weights) < 1e-12);
  }
}

TEST_CASE("MultiHeadAttention: value_dim decouples the value width Dv from D: shapes, loop reference, gradcheck, cache") {
  for (AttentionImpl impl : kImpls) {
    CAPTURE(impl_name(impl));
    Generator gen(12);
    MultiHeadAttentionOptions o;
    o.embed_dim = 6;
    o.num_heads = 2;
    o.head_dim = 2;   // d_k
    o.value_dim = 5;  // d_v
    o.impl = impl;
    MultiHeadAttention<double> m(o, gen);
    randomise_biases(m, 30);
    CHECK(m.value_dim() == 5);
    CHECK(m.w_q->weight.shape() == Shape{4, 6});
    CHECK(m.w_k->weight.shape() == Shape{4, 6});
    CHECK(m.w_v->weight.shape() == Shape{10, 6});
    CHECK(m.w_o->weight.shape() == Shape{6, 10});
    Array<double> x = test::random_array<double>({2, 4, 6}, 31);
    MultiHeadAttentionArgs<double> causal;
    causal.is_causal = true;
    const Array<double> out = m.forward(Variable<double>(x), Variable<double>(x), Variable<double>(x), causal).output.value();
    Ref ref = reference(m, x, x, x, [](auto, auto, auto i, auto j) { return j <= i; });
    CHECK(test::max_abs_diff(out, ref.out) < 1e-12);
    Variable<double> xv = leaf({2, 4, 6}, 32);
    test::check_module_grad([&] { return m.forward(xv, xv, xv, causal).output; }, m, {xv});
    // Decoding with a KV cache (values of width Dv) gives the same rows as the whole sequence.
    autograd::NoGradGuard no_grad;
    KVCache<double> cache;
    MultiHeadAttentionArgs<double> step;
    step.cache = &cache;
    for (std::size_t t = 0; t < 4; ++t) {
      Array<double> xs = xt::view(x, xt::all(), xt::range(t, t + 1), xt::all());
      Variable<double> vt(xs);
      const Array<double> row = m.forward(vt, vt, vt, step).output.value();
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t c = 0; c < 6; ++c) CHECK(row(b, 0, c) == doctest::Approx(out(b, t, c)).epsilon(1e-12));
    }
    CHECK(cache.v.shape()[3] == 5);
  }
}

TEST_CASE("MultiHeadAttention: key_padding_mask (true = ignore), causal, bool and float attn_mask") {
  Mask kpm = {{false, false, true, true}, {false, false, false, false}};
  Mask allowed = {{true, true, true, false}, {true, false, true, true}, {true, true, false, true},
                  {false, true, true, true}};  // (Tq, Tk) with qkv polarity
  Array<double> bias_arr = test::random_array<double>({1, 2, 4, 4}, 9);
  for (AttentionImpl impl : kImpls) {
    CAPTURE(impl_name(impl));
    Generator gen(5);
    MultiHeadAttention<double> m(mha_options(6, 2, 0.0, impl), gen);
    randomise_biases(m, 30);
    Array<double> x = test::random_array<double>({2, 4, 6}, 8);
    Variable<double> xv(x);
    auto run = [&](const MultiHeadAttentionArgs<double>& a) {
      MultiHeadAttentionArgs<double> args = a;
      args.need_weights = true;
      args.average_attn_weights = false;
      return m.forward(xv, xv, xv, args);
    };
    auto check = [&](const MultiHeadAttentionArgs<double>& a, const Pred& p, const Bias& bias = nullptr) {
      auto out = run(a);
      Ref ref = reference(m, x, x, x, p, bias);
      CHECK(test::max_abs_diff(out.output.value(), ref.out) < 1e-12);
      CHECK(test::max_abs_diff(out.weights.value(), ref.weights) < 1e-12);
    };
    MultiHeadAttentionArgs<double> a;
    SUBCASE("key padding") {
      a.key_padding_mask = KeyPaddingMask::ignore_where(kpm);
      check(a, [&](auto b, auto, auto, auto j) { return !kpm(b, j); });
    }
    SUBCASE("causal") {
      a.is_causal = true;
      check(a, [](auto, auto, auto i, auto j) { return j <= i; });
    }
    SUBCASE("causal and key padding") {
      a.is_causal = true;
      a.key_padding_mask = KeyPaddingMask::ignore_where(kpm);
      check(a, [&](auto b, auto, auto i, auto j) { return j <= i && !kpm(b, j); });
    }
    SUBCASE("bool attn_mask and key padding") {
      a.attn_mask = AttentionMask<double>::attend_where(allowed);
      a.key_padding_mask = KeyPaddingMask::ignore_where(kpm);
      check(a, [&](auto b, auto, auto i, auto j) { return allowed(i, j) && !kpm(b, j); });
    }
    SUBCASE("float attn_mask") {
      a.attn_mask = AttentionMask<double>::additive(bias_arr);
      check(a, kAll, [&](auto, auto h, auto i, auto j) { return bias_arr(0, h, i, j); });
    }
  }
}

TEST_CASE("MultiHeadAttention: masks name their polarity: a plain Mask does not convert, attend_where(m) = ignore_where(!m)") {
  // The mistake the types exist to stop: PyTorch's mask (true = ignore) passed where qkv's
  // (true = attend) is meant, or the other way round. Neither compiles.
  static_assert(!std::is_convertible_v<Mask, KeyPaddingMask>);
  static_assert(!std::is_assignable_v<KeyPaddingMask&, Mask>);
  static_assert(!std::is_convertible_v<Mask, AttentionMask<double>>);
  static_assert(!std::is_assignable_v<AttentionMask<double>&, Mask>);
  Generator gen(8);
  MultiHeadAttention<double> m(mha_options(4, 2, 0.0, AttentionImpl::Fused), gen);
  Variable<double> q = leaf({2, 2, 4}, 1), kv = leaf({2, 3, 4}, 2);
  const Mask pad = {{false, true, false}, {false, false, true}};
  MultiHeadAttentionArgs<double> ignore, attend, none;
  ignore.key_padding_mask = KeyPaddingMask::ignore_where(pad);
  attend.key_padding_mask = KeyPaddingMask::attend_where(Mask(!pad));
  CHECK(none.key_padding_mask.empty());
  const Array<double> a = m.forward(q, kv, kv, ignore).output.value(), b = m.forward(q, kv, kv, attend).output.value();
  CHECK(test::bitwise_equal(a, b));
  // ...and the mask does something: without it the output differs.
  CHECK_FALSE(test::bitwise_equal(a, m.forward(q, kv, kv, none).output.value()));
}

TEST_CASE("MultiHeadAttention: a fully padded batch row gives output = w_o.bias, no NaN, zero gradients") {
  for (AttentionImpl impl : kImpls) {
    CAPTURE(impl_name(impl));
    Generator gen(6);
    MultiHeadAttention<double> m(mha_options(4, 2, 0.0, impl), gen);
    randomise_biases(m, 40);
    Mask kpm = {{false, true, false}, {true, true, true}};
    MultiHeadAttentionArgs<double> args;
    args.key_padding_mask = KeyPaddingMask::ignore_where(kpm);
    Variable<double> q = leaf({2, 2, 4}, 1), kv = leaf({2, 3, 4}, 2);
    auto out = m.forward(q, kv, kv, args).output;
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t c = 0; c < 4; ++c) CHECK(out.value()(1, i, c) == doctest::Approx(m.w_o->bias.value()(c)));
    for (double y : out.value()) CHECK(std::isfinite(y));
    sum(out).backward();
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t c = 0; c < 4; ++c) CHECK(kv.grad()(1, j, c) == 0.0);
    for (double g : kv.grad()) CHECK(std::isfinite(g));
    q.zero_grad();
    kv.zero_grad();
    test::check_module_grad([&] { return m.forward(q, kv, kv, args).output; }, m, {q, kv});
  }
}

TEST_CASE("MultiHeadAttention: gradcheck of parameters and inputs, both impls") {
  for (AttentionImpl impl : kImpls) {
    CAPTURE(impl_name(impl));
    Generator gen(7);
    SUBCASE("self attention (q = k = v aliased), key padding and causal") {
      MultiHeadAttention<double> m(mha_options(4, 2, 0.0, impl), gen);
      randomise_biases(m, 50);
      Variable<double> x = leaf({2, 3, 4}, 3);
      MultiHeadAttentionArgs<double> args;
      args.key_padding_mask = KeyPaddingMask::ignore_where(Mask{{false, false, true}, {false, false, false}});
      args.is_causal = true;
      test::check_module_grad([&] { return m.forward(x, x, x, args).output; }, m, {x});
    }
    SUBCASE("cross attention, Tk != Tq, kdim and vdim != E, head_dim") {
      MultiHeadAttentionOptions o;
      o.embed_dim = 3;
      o.num_heads = 2;
      o.head_dim = 2;
      o.kdim = 4;
      o.vdim = 2;
      o.impl = impl;
      MultiHeadAttention<double> m(o, gen);
      randomise_biases(m, 60);
      Variable<double> q = leaf({2, 2, 3}, 4), k = leaf({2, 3, 4}, 5), v = leaf({2, 3, 2}, 6);
      test::check_module_grad([&] { return m.forward(q, k, v).output; }, m, {q, k, v});
    }
  }
}

// The composite path returns weights that are part of the graph (the fused path's are detached).
TEST_CASE("MultiHeadAttention: weights are differentiable on the composite path") {
  Generator gen(7);
  MultiHeadAttention<double> m(mha_options(4, 2, 0.0, AttentionImpl::Composite), gen);
  Variable<double> x = leaf({1, 3, 4}, 3);
  MultiHeadAttentionArgs<double> args;
  args.need_weights = true;
  test::check_module_grad([&] { return m.forward(x, x, x, args).weights; }, m, {x});
}

TEST_CASE("MultiHeadAttention: attention dropout only in training, reproducible per seed") {
  Generator gen(9);
  MultiHeadAttention<double> m(mha_options(4, 2, 0.5), gen);
  Variable<double> x = leaf({2, 5, 4}, 1);
  m.eval();
  Array<double> e = m.forward(x, x, x).output.value();
  m.train();
  manual_seed(3);
  Array<double> t1 = m.forward(x, x, x).output.value();
  manual_seed(3);
  Array<double> t2 = m.forward(x, x, x).output.value();
  CHECK(test::bitwise_equal(t1, t2));
  CHECK_FALSE(test::bitwise_equal(t1, e));
  m.eval();
  CHECK(test::bitwise_equal(m.forward(x, x, x).output.value(), e));
  m.train();
  test::check_module_grad([&] { manual_seed(4); return m.forward(x, x, x).output; }, m, {x});
}

TEST_CASE("MultiHeadAttention: shape errors name the layer and the shapes") {
  MultiHeadAttentionOptions o;
  o.embed_dim = 4;
  o.num_heads = 2;
  o.kdim = 3;
  MultiHeadAttention<float> m(o);
  Variable<float> q(zeros<float>({2, 3, 4})), k(zeros<float>({2, 5, 3})), v(zeros<float>({2, 5, 4}));
  CHECK_NOTHROW(m.forward(q, k, v));
  CHECK_THROWS_WITH_AS(m.forward(q, q, v), doctest::Contains("expected key (B, Tk, 3)"), ShapeError);
  CHECK_THROWS_WITH_AS(m.forward(Variable<float>(zeros<float>({2, 3, 5})), k, v),
                       doctest::Contains("MultiHeadAttention: query (2, 3, 5)"), ShapeError);
  CHECK_THROWS_AS(m.forward(q, k, Variable<float>(zeros<float>({2, 4, 4}))), ShapeError);
  CHECK_THROWS_AS(m.forward(Variable<float>(zeros<float>({1, 3, 4})), k, v), ShapeError);
  MultiHeadAttentionArgs<float> args;
  args.key_padding_mask = KeyPaddingMask::ignore_where(Mask::from_shape({2, 4}));
  CHECK_THROWS_WITH_AS(m.forward(q, k, v, args), doctest::Contains("key_padding_mask of shape (2, 4)"), ShapeError);
}

TEST_CASE("MultiHeadAttention: 1 and 2 threads give identical outputs and gradients") {
  test::check_same_on_1_and_2_threads([] {
    Generator gen(10);
    MultiHeadAttention<float> m(mha_options(32, 4, 0.1), gen);
    Variable<float> x(test::random_array<float>({4, 16, 32}, 1), true);
    MultiHeadAttentionArgs<float> args;
    args.is_causal = true;
    manual_seed(5);
    Variable<float> y = m.forward(x, x, x, args).output;
    sum(y).backward();
    std::vector<Array<float>> r{y.value(), x.grad()};
    for (auto& p : m.parameters()) r.push_back(p.grad());
    return r;
  });
}
