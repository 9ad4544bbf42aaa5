#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <xtensor/xbroadcast.hpp>

#include "qkv/autograd/gradcheck.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/attention.hpp"
#include "qkv/tensor/allocator.hpp"
#include "test_util.hpp"

using namespace qkv;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One attention problem: sizes, masks, options.
struct Case {
  std::size_t B = 1, H = 2, Tq = 3, Tk = 4, D = 3, Dv = 2;
  bool bool_mask = false, float_mask = false, causal = false;
  double p = 0.0;
  std::string name;
};

Case sized(std::size_t B, std::size_t H, std::size_t Tq, std::size_t Tk, std::size_t D,
           std::size_t Dv) {
  Case c;
  c.B = B, c.H = H, c.Tq = Tq, c.Tk = Tk, c.D = D, c.Dv = Dv;
  return c;
}

Mask random_mask(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  Mask m = Mask::from_shape(shape);
  for (auto& x : m) x = gen.uniform() < 0.7;
  return m;
}

template <class T>
AttentionMask<T> make_mask(const Case& c) {
  AttentionMask<T> m;
  if (c.bool_mask) m = AttentionMask<T>::attend_where(random_mask({c.B, 1, c.Tq, c.Tk}, 11));  // broadcast over heads
  if (c.float_mask) m = m.with_additive(test::random_array<T>({c.Tq, c.Tk}, 12));  // broadcast over batch, heads
  return m;
}

template <class T>
struct Inputs {
  Array<T> q, k, v;
};
template <class T>
Inputs<T> make_inputs(const Case& c, std::uint64_t seed = 1) {
  return {test::random_array<T>({c.B, c.H, c.Tq, c.D}, seed),
          test::random_array<T>({c.B, c.H, c.Tk, c.D}, seed + 1),
          test::random_array<T>({c.B, c.H, c.Tk, c.Dv}, seed + 2)};
}

AttentionOptions make_options(const Case& c, AttentionImpl impl, Generator* gen,
                              bool weights = false) {
  AttentionOptions o;
  o.impl = impl;
  o.is_causal = c.causal;
  o.dropout_p = c.p;
  o.generator = gen;
  o.need_weights = weights;
  return o;
}

// Naive float64 attention written from the definition: out (B,H,Tq,Dv) and weights (B,H,Tq,Tk).
struct Reference {
  xt::xarray<double> out, weights;
};
template <class T>
Reference reference(const Inputs<T>& in, const AttentionMask<T>& mask, const Case& c,
                    std::uint64_t seed, std::uint64_t first) {
  const Shape scores{c.B, c.H, c.Tq, c.Tk};
  xt::xarray<bool> allowed = mask.allowed() ? xt::xarray<bool>(xt::broadcast(*mask.allowed(), scores))
                                          : xt::xarray<bool>(xt::ones<bool>(scores));
  xt::xarray<double> bias = mask.bias() ? xt::xarray<double>(xt::broadcast(*mask.bias(), scores))
                                      : xt::xarray<double>(xt::zeros<double>(scores));
  Reference r{xt::zeros<double>({c.B, c.H, c.Tq, c.Dv}), xt::zeros<double>(scores)};
  const double scale = 1.0 / std::sqrt(double(c.D));
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t h = 0; h < c.H; ++h)
      for (std::size_t i = 0; i < c.Tq; ++i) {
        std::vector<double> s(c.Tk, -kInf);
        double mx = -kInf;
        for (std::size_t j = 0; j < c.Tk; ++j) {
          if (!allowed(b, h, i, j) || (c.causal && j > i)) continue;
          double dot = 0;
          for (std::size_t d = 0; d < c.D; ++d)
            dot += double(in.q(b, h, i, d)) * double(in.k(b, h, j, d));
          s[j] = dot * scale + bias(b, h, i, j);
          mx = std::max(mx, s[j]);
        }
        if (mx == -kInf) continue;  // fully masked: zero weights, zero output
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        for (std::size_t j = 0; j < c.Tk; ++j) {
          double w = std::exp(s[j] - mx) / sum;
          const std::uint64_t idx = ((b * c.H + h) * c.Tq + i) * c.Tk + j;
          if (c.p > 0) w = DropoutDraws(seed, c.p).dropped(first + idx) ? 0.0 : w / (1 - c.p);
          r.weights(b, h, i, j) = w;
          for (std::size_t e = 0; e < c.Dv; ++e) r.out(b, h, i, e) += w * double(in.v(b, h, j, e));
        }
      }
  return r;
}

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib)
    m = std::max(m, std::fabs(double(*ia) - double(*ib)));
  return m;
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  auto add = [&](Case c, const char* name) {
    c.name = name;
    cs.push_back(c);
  };
  Case c;
  add(c, "no mask");
  c.bool_mask = true;
  add(c, "boolean mask");
  c.bool_mask = false;
  c.float_mask = true;
  add(c, "float mask");
  c.bool_mask = true;
  add(c, "both masks");
  c = Case{};
  c.causal = true;
  add(c, "causal");
  c = sized(1, 2, 4, 2, 3, 2);
  c.causal = true;
  add(c, "causal, Tq > Tk");
  c = sized(2, 1, 3, 5, 4, 3);
  add(c, "cross lengths, Dv != D");
  c.p = 0.3;
  add(c, "dropout");
  c.causal = c.bool_mask = c.float_mask = true;
  add(c, "dropout, masks, causal");
  return cs;
}

// Cases spanning several blocks of queries (64) and keys (128).
std::vector<Case> block_cases() {
  std::vector<Case> cs;
  Case c = sized(2, 2, 70, 150, 8, 5);
  c.name = "blocks";
  cs.push_back(c);
  c.name = "blocks, causal";
  c.causal = true;
  cs.push_back(c);
  c.name = "blocks, causal, Tq > Tk";
  c.Tq = 150, c.Tk = 70;
  cs.push_back(c);
  c.Tq = 70, c.Tk = 150;
  c.name = "blocks, causal, masks";
  c.causal = c.bool_mask = c.float_mask = true;
  cs.push_back(c);
  c.name = "blocks, causal, Tq > Tk, dropout";
  c.Tq = 150, c.Tk = 70, c.bool_mask = false, c.p = 0.2;
  cs.push_back(c);
  c.name = "blocks, masks, dropout";
  c.causal = false, c.bool_mask = true;
  cs.push_back(c);
  return cs;
}

}  // namespace

constexpr AttentionImpl kImpls[] = {AttentionImpl::Fused, AttentionImpl::Composite};
const char* impl_name(AttentionImpl impl) {
  return impl == AttentionImpl::Fused ? "fused" : "composite";
}

TEST_CASE("scaled_dot_product_attention: forward and weights match a naive float64 reference") {
  std::vector<Case> all = cases();
  for (const Case& c : block_cases()) all.push_back(c);
  for (AttentionImpl impl : kImpls)
    for (const Case& c : all) {
      const std::string impl_str = impl_name(impl);
      CAPTURE(impl_str);
      CAPTURE(c.name);
      Inputs<double> in = make_inputs<double>(c);
      AttentionMask<double> mask = make_mask<double>(c);
      Generator gen(42);
      gen.reserve(5);  // the kernel must start at the generator's offset, rounded up to a block of 32
      AttentionOutput<double> r = scaled_dot_product_attention(
          Variable<double>(in.q), Variable<double>(in.k), Variable<double>(in.v), mask,
          make_options(c, impl, &gen, true));
      Reference ref = reference(in, mask, c, 42, DropoutDraws::kBlock);
      REQUIRE(r.output.shape() == Shape{c.B, c.H, c.Tq, c.Dv});
      REQUIRE(r.weights.shape() == Shape{c.B, c.H, c.Tq, c.Tk});
      CHECK(max_abs_diff(r.output.value(), ref.out) < 1e-12);
      CHECK(max_abs_diff(r.weights.value(), ref.weights) < 1e-12);
      CHECK(gen.offset() == (c.p > 0 ? DropoutDraws::kBlock + c.B * c.H * c.Tq * c.Tk : 5));

      // float32 agrees with the float64 reference to float precision.
      Inputs<float> inf{cast<float>(in.q), cast<float>(in.k), cast<float>(in.v)};
      AttentionMask<float> maskf = make_mask<float>(c);
      Generator genf(42);
      genf.reserve(5);
      AttentionOutput<float> rf = scaled_dot_product_attention(
          Variable<float>(inf.q), Variable<float>(inf.k), Variable<float>(inf.v), maskf,
          make_options(c, impl, &genf, true));
      CHECK(max_abs_diff(rf.output.value(), ref.out) < 1e-5);
      CHECK(max_abs_diff(rf.weights.value(), ref.weights) < 1e-5);
    }
}

namespace {

// Output, weights and the gradients of q, k, v for one implementation (upstream gradient fixed).
template <class T>
std::vector<Array<T>> run_with_grads(const Case& c, AttentionImpl impl) {
  Inputs<T> in = make_inputs<T>(c);
  Variable<T> q(in.q, true), k(in.k, true), v(in.v, true);
  Generator gen(77);
  AttentionOutput<T> r =
      scaled_dot_product_attention(q, k, v, make_mask<T>(c), make_options(c, impl, &gen, true));
  Array<T> weights = r.weights.value();
  r.output.backward(test::random_array<T>(r.output.shape(), 99));
  return {r.output.value(), weights, q.grad(), k.grad(), v.grad()};
}

template <class T>
void check_agreement(double tolerance) {
  std::vector<Case> all = cases();
  for (const Case& c : block_cases()) all.push_back(c);
  for (const Case& c : all) {
    CAPTURE(c.name);
    std::vector<Array<T>> fused = run_with_grads<T>(c, AttentionImpl::Fused);
    std::vector<Array<T>> composite = run_with_grads<T>(c, AttentionImpl::Composite);
    const char* names[] = {"output", "weights", "dq", "dk", "dv"};
    for (std::size_t i = 0; i < fused.size(); ++i) {
      const std::string name = names[i];
      CAPTURE(name);
      CHECK(max_abs_diff(fused[i], composite[i]) <= tolerance);
    }
  }
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: fused and composite agree on outputs and all gradients") {
  SUBCASE("float64") {
    check_agreement<double>(1e-10);
  }
  SUBCASE("float32") {
    check_agreement<float>(1e-5);
  }
}

TEST_CASE(
    "scaled_dot_product_attention: composite weights are in the graph, fused weights detached") {
  Case c;
  Inputs<double> in = make_inputs<double>(c);
  for (AttentionImpl impl : kImpls) {
    Variable<double> q(in.q, true), k(in.k, true), v(in.v, true);
    AttentionOutput<double> r =
        scaled_dot_product_attention(q, k, v, {}, make_options(c, impl, nullptr, true));
    CHECK(r.weights.requires_grad() == (impl == AttentionImpl::Composite));
    CHECK(r.output.requires_grad());
  }
}

TEST_CASE("scaled_dot_product_attention: gradcheck of q, k, v, fused and composite") {
  for (AttentionImpl impl : kImpls)
    for (const Case& c : cases()) {
      const std::string impl_str = impl_name(impl);
      CAPTURE(impl_str);
      CAPTURE(c.name);
      Inputs<double> in = make_inputs<double>(c);
      AttentionMask<double> mask = make_mask<double>(c);
      test::check_grad(
          [&](const std::vector<Variable<double>>& x) {
            Generator gen(3);  // the same dropout mask on every evaluation
            return scaled_dot_product_attention(x[0], x[1], x[2], mask, make_options(c, impl, &gen))
                .output;
          },
          {in.q, in.k, in.v});
    }
}

TEST_CASE("scaled_dot_product_attention: fused gradcheck across several blocks") {
  Case c = sized(1, 1, 70, 150, 2, 2);
  c.causal = c.bool_mask = c.float_mask = true;
  c.p = 0.1;
  Inputs<double> in = make_inputs<double>(c);
  AttentionMask<double> mask = make_mask<double>(c);
  test::check_grad(
      [&](const std::vector<Variable<double>>& x) {
        Generator gen(3);
        return scaled_dot_product_attention(x[0], x[1], x[2], mask,
                                            make_options(c, AttentionImpl::Fused, &gen))
            .output;
      },
      {in.q, in.k, in.v});
}

TEST_CASE("scaled_dot_product_attention: q = k = v, the same Variable three times") {
  Case c = sized(2, 2, 4, 4, 3, 3);
  c.float_mask = true;
  AttentionMask<double> mask = make_mask<double>(c);
  for (AttentionImpl impl : kImpls) {
    test::check_grad(
        [&](const std::vector<Variable<double>>& x) {
          return scaled_dot_product_attention(x[0], x[0], x[0], mask,
                                              make_options(c, impl, nullptr))
              .output;
        },
        {test::random_array<double>({c.B, c.H, c.Tq, c.D}, 5)});
  }
}

TEST_CASE(
    "scaled_dot_product_attention: a fully masked query row gives zero output and zero gradients") {
  Case c = sized(1, 2, 3, 4, 3, 2);
  Inputs<double> in = make_inputs<double>(c);
  Mask allowed = Mask(xt::ones<bool>({c.Tq, c.Tk}));
  for (std::size_t j = 0; j < c.Tk; ++j) allowed(1, j) = false;  // row 1: nothing allowed
  Array<double> bias = zeros<double>({c.Tq, c.Tk});
  for (std::size_t j = 0; j < c.Tk; ++j) bias(2, j) = -kInf;  // row 2: forbidden by the bias
  const auto mask = AttentionMask<double>::attend_where(allowed).with_additive(bias);
  for (AttentionImpl impl : kImpls) {
    Variable<double> q(in.q, true), k(in.k, true), v(in.v, true);
    AttentionOptions opt = make_options(c, impl, nullptr, true);
    AttentionOutput<double> r = scaled_dot_product_attention(q, k, v, mask, opt);
    for (std::size_t h = 0; h < c.H; ++h)
      for (std::size_t i : {1, 2}) {
        for (std::size_t e = 0; e < c.Dv; ++e) CHECK(r.output.value()(0, h, i, e) == 0.0);
        for (std::size_t j = 0; j < c.Tk; ++j) CHECK(r.weights.value()(0, h, i, j) == 0.0);
      }
    r.output.backward(test::random_array<double>(r.output.shape(), 9));
    for (const Variable<double>* x : {&q, &k, &v})
      for (double g : x->grad()) CHECK(std::isfinite(g));
    for (std::size_t h = 0; h < c.H; ++h)
      for (std::size_t i : {1, 2})
        for (std::size_t d = 0; d < c.D; ++d) CHECK(q.grad()(0, h, i, d) == 0.0);
    // Row 0 still attends: its gradient reaches q.
    CHECK(std::fabs(q.grad()(0, 0, 0, 0)) > 0.0);
    test::check_grad(
        [&](const std::vector<Variable<double>>& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], mask,
                                              make_options(c, impl, nullptr))
              .output;
        },
        {in.q, in.k, in.v});
  }
}

TEST_CASE(
    "scaled_dot_product_attention: dropout is reproducible for a seed and differs across seeds") {
  Case c = sized(1, 2, 6, 7, 3, 2);
  c.p = 0.5;
  Inputs<double> in = make_inputs<double>(c);
  for (AttentionImpl impl : kImpls) {
    const std::string impl_str = impl_name(impl);
    CAPTURE(impl_str);
    auto run = [&](std::uint64_t seed) {
      Generator gen(seed);
      return scaled_dot_product_attention(Variable<double>(in.q), Variable<double>(in.k),
                                          Variable<double>(in.v), {},
                                          make_options(c, impl, &gen, true));
    };
    AttentionOutput<double> a = run(1), b = run(1), d = run(2);
    CHECK(test::bitwise_equal(a.output.value(), b.output.value()));
    CHECK(test::bitwise_equal(a.weights.value(), b.weights.value()));
    CHECK(!test::bitwise_equal(a.weights.value(), d.weights.value()));
    std::size_t zeros = 0;
    for (double w : a.weights.value()) zeros += w == 0.0;
    CHECK(zeros > 0);
    CHECK(zeros < a.weights.size());
  }
}

TEST_CASE("scaled_dot_product_attention: bitwise identical results on 1 and 2 threads") {
  Case c = sized(2, 3, 150, 70, 8, 5);
  c.bool_mask = c.float_mask = c.causal = true;
  c.p = 0.2;
  Inputs<float> in = make_inputs<float>(c);
  AttentionMask<float> mask = make_mask<float>(c);
  const int saved = num_threads();
  for (AttentionImpl impl : kImpls) {
    std::vector<Array<float>> results[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Variable<float> q(in.q, true), k(in.k, true), v(in.v, true);
      Generator gen(8);
      AttentionOutput<float> r =
          scaled_dot_product_attention(q, k, v, mask, make_options(c, impl, &gen, true));
      r.output.backward(test::random_array<float>(r.output.shape(), 4));
      results[threads - 1] = {r.output.value(), r.weights.value(), q.grad(), k.grad(), v.grad()};
    }
    for (std::size_t i = 0; i < results[0].size(); ++i)
      CHECK(test::bitwise_equal(results[0][i], results[1][i]));
  }
  set_num_threads(saved);
}

TEST_CASE("scaled_dot_product_attention: shape and option errors") {
  auto var = [](const Shape& s) { return Variable<float>(zeros<float>(s)); };
  Variable<float> q = var({2, 4, 5, 8}), k = var({2, 4, 6, 8}), v = var({2, 4, 6, 3});
  CHECK_NOTHROW(scaled_dot_product_attention(q, k, v));
  CHECK_THROWS_WITH_AS(
      scaled_dot_product_attention(q, var({2, 4, 6, 7}), v),
      doctest::Contains("scaled_dot_product_attention: expected q (B, H, Tq, D), k (B, H, Tk, D), "
                        "v (B, H, Tk, Dv); got q (2, 4, 5, 8), k (2, 4, 6, 7), v (2, 4, 6, 3)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, var({2, 4, 5, 3})),
                       doctest::Contains("v (2, 4, 5, 3)"), ShapeError);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(var({4, 5, 8}), k, v),
                       doctest::Contains("got q (4, 5, 8)"), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, var({1, 4, 6, 8}), var({1, 4, 6, 3})),
                  ShapeError);

  const auto bad_bool = AttentionMask<float>::attend_where(Mask(xt::ones<bool>({5, 7})));
  CHECK_THROWS_WITH_AS(
      scaled_dot_product_attention(q, k, v, bad_bool),
      doctest::Contains("boolean mask of shape (5, 7) does not broadcast to the scores' shape "
                        "(B, H, Tq, Tk) = (2, 4, 5, 6)"),
      ShapeError);
  const auto bad_float = AttentionMask<float>::additive(zeros<float>({3, 1, 1}));
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, bad_float),
                       doctest::Contains("float mask of shape (3, 1, 1)"), ShapeError);
  const auto ok = AttentionMask<float>::attend_where(Mask(xt::ones<bool>({2, 1, 1, 6}))).with_additive(zeros<float>({4, 5, 1}));
  CHECK_NOTHROW(scaled_dot_product_attention(q, k, v, ok));
  // PyTorch's 3-D (B * H, Tq, Tk) layout: named, with the 4-D shape to reshape it to
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, AttentionMask<float>::attend_where(Mask(xt::ones<bool>({8, 5, 6})))),
                       doctest::Contains("a PyTorch-style (B * H, Tq, Tk) mask must be reshaped to (B, H, Tq, Tk) = (2, 4, 5, 6)"),
                       ShapeError);
  // polarity: ignore_where(m) is attend_where(!m), PyTorch's boolean attn_mask
  Mask causal_ignore = Mask::from_shape({5, 6});
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 6; ++j) causal_ignore(i, j) = j > i;  // torch.triu(ones, 1).bool()
  AttentionOptions causal;
  causal.is_causal = true;
  CHECK(max_abs_diff(scaled_dot_product_attention(q, k, v, AttentionMask<float>::ignore_where(causal_ignore)).output.value(),
                           scaled_dot_product_attention(q, k, v, {}, causal).output.value()) < 1e-6);

  AttentionOptions opt;
  opt.dropout_p = 1.0;
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, {}, opt),
                       doctest::Contains("dropout_p must be in [0, 1), got 1"), ValueError);
  opt.dropout_p = -0.1;
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, {}, opt), ValueError);
}

TEST_CASE(
    "scaled_dot_product_attention: the fused path without weights allocates no Tq x Tk buffer") {
  const std::size_t H = 2, T = 512, D = 16;
  Variable<float> q(test::random_array<float>({1, H, T, D}, 1), true);
  Variable<float> k(test::random_array<float>({1, H, T, D}, 2), true);
  Variable<float> v(test::random_array<float>({1, H, T, D}, 3), true);
  AttentionOptions opt;
  opt.is_causal = true;
  opt.dropout_p = 0.1;
  Generator gen(1);
  opt.generator = &gen;
  pool::reset_peak();
  const std::uint64_t before = pool::stats().in_use_bytes;
  {
    AttentionOutput<float> r = scaled_dot_product_attention(q, k, v, {}, opt);
    r.output.backward(test::random_array<float>(r.output.shape(), 4));
  }
  const pool::Stats s = pool::stats();
  // Everything it holds at once is O(H T D) (the output and its saved copy, lse, the gradients of
  // q, k, v) plus a few blocks per thread, about 0.8 MiB here; the (1, H, T, T) scores alone
  // would take 2 MiB, and no single request may come near a (T, T) matrix (1 MiB).
  CHECK(s.largest_request < T * T * sizeof(float) / 4);
  CHECK(s.peak_in_use_bytes - before < H * T * T * sizeof(float) / 2);
}
