// Gradients with respect to activations (nn::run_with_grads): at every hook point of a model, the
// gradient of a metric equals central differences of the metric with that activation perturbed, in
// float64, for the hook points of the residual stream, the split inputs, the scores, the pattern
// and the per-head results; and observing the new hook points changes no bit of the output.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn_test_util.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"
#include "test_util.hpp"

namespace qkv {
using namespace nn;

namespace {

TransformerOptions small(bool norm_first, bool attn_only) {
  TransformerOptions o;
  o.d_model = 6;
  o.attn.num_heads = 2;
  o.layers = 2;
  o.ff.hidden = 8;
  o.norm_first = norm_first;
  o.attn_only = attn_only;
  return o;
}

// Every element of every hook point's value: its gradient against (m(x + e) - m(x - e)) / 2e with
// the point's value perturbed there, the rest of the forward run as usual.
void check_all_points(Module<double>& model, const std::function<Variable<double>()>& metric) {
  model.eval();
  const GradCache<double> g = run_with_grads(model, metric);
  REQUIRE(g.values.entries().size() > 10);
  std::size_t checked = 0;
  for (auto& [name, value] : g.values.entries()) {
    CAPTURE(name);
    const Array<double>& grad = g.grads[name];
    REQUIRE(grad.shape() == value.shape());
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!std::isfinite(value.data()[i])) continue;  // masked scores (-inf): no derivative
      auto at = [&](double delta) {
        NoGradGuard no_grad;
        DifferentiableHooks differentiable;
        HookScope<double> scope(model);
        scope.add(name, [&](const Variable<double>& x) {
          Array<double> moved = x.value();
          moved.data()[i] += delta;
          return Variable<double>(std::move(moved));
        });
        return metric().item();
      };
      const double eps = 1e-6, numeric = (at(eps) - at(-eps)) / (2 * eps), analytic = grad.data()[i];
      CAPTURE(i);
      CHECK(std::abs(numeric - analytic) <= 1e-6 + 1e-4 * std::abs(numeric));
      ++checked;
    }
  }
  CHECK(checked > 500);
}

}  // namespace

TEST_CASE("hook gradients: a pre-LN masked encoder, every hook point against central differences (float64)") {
  Generator gen(3);
  EncoderModel<double> m(7, 5, small(true, false), gen);
  const IndexArray ids = test::ids({{1, 2, 3, 6, 6}});
  Mask pad = Mask::from_shape({1, 5});
  for (std::size_t t = 0; t < 5; ++t) pad(0, t) = t >= 3;
  const KeyPaddingMask padding = KeyPaddingMask::ignore_where(pad);
  const Variable<double> w(test::random_array<double>({1, 5, 5}, 9));
  check_all_points(m, [&] { return sum(mul(m.forward(ids, padding), w)); });
}

TEST_CASE("hook gradients: a post-LN encoder and an attention-only rotary decoder against central differences (float64)") {
  Generator gen(4);
  EncoderModel<double> post(7, 5, small(false, false), gen);
  const IndexArray ids = test::ids({{4, 2, 3, 1}});
  const Variable<double> w(test::random_array<double>({1, 4, 5}, 10));
  check_all_points(post, [&] { return sum(mul(post.forward(ids), w)); });
  TransformerOptions o = small(true, true);
  o.arch = Arch::Decoder;
  o.positional = Positional::Rope;
  o.d_model = 8;  // rotary embeddings turn pairs: D = 4
  o.max_len = 8;
  DecoderModel<double> dec(7, o, gen);
  const Variable<double> wd(test::random_array<double>({1, 4, 7}, 11));
  check_all_points(dec, [&] { return sum(mul(dec.forward(ids), wd)); });
}

TEST_CASE("hook gradients: observing the new hook points changes no bit, and the gradients cost no parameter gradient") {
  Generator gen(5);
  EncoderModel<float> m(7, 5, small(true, false), gen);
  m.eval();
  const IndexArray ids = test::ids({{1, 2, 3, 4, 5}});
  const Array<float> plain = m.forward(ids).value();
  Array<float> logits;
  const auto cache = run_with_cache(m, [&] { logits = m.forward(ids).value(); });
  CHECK(test::bitwise_equal(logits, plain));
  for (const char* name : {"blocks.0.hook_q_input", "blocks.1.attn.hook_attn_scores", "blocks.0.attn.hook_head_result",
                           "blocks.1.hook_resid_mid", "blocks.1.hook_mlp_out"})
    CHECK(cache.contains(name));
  // The per-head results add up to the layer's output, less its bias.
  const Array<float>& parts = cache["blocks.0.attn.hook_head_result"];  // (1, H, T, C)
  const Array<float>& whole = cache["blocks.0.attn.hook_result"];       // (1, T, C)
  const Array<float>& bias = m.blocks->operator[](0).attn->w_o->bias.value();
  for (std::size_t i = 0; i < whole.size(); ++i)
    CHECK(parts.data()[i] + parts.data()[whole.size() + i] + bias.data()[i % 6] == doctest::Approx(whole.data()[i]).epsilon(1e-5));
  const Variable<float> w(test::random_array<float>({1, 5, 5}, 3));
  run_with_grads(m, [&] { return sum(mul(m.forward(ids), w)); }, {"*.hook_z"});
  for (auto& p : m.parameters()) CHECK_FALSE(p.has_grad());
  CHECK(m.parameters().front().requires_grad());  // put back
}

}  // namespace qkv
