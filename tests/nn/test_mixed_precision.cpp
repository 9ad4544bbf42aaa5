// train.precision: bf16 checked against float32: the gradient of every parameter of every layer
// (Linear, the attention projections and both attention implementations, the feed-forward block,
// layer norms, embeddings, the output layer, tied or not) under bfloat16 products, compared with
// the same model's float32 gradient. The tolerance, in the 2-norm relative to the float32
// gradient, is documented in docs/bfloat16.md ("Accuracy"): each operand of a product is
// rounded to 8 significant bits (relative error <= 2^-9 = 0.002), the sums stay float32. A
// gradient that is zero in exact arithmetic (the key projection's bias: softmax does not change
// when every score of a row moves by q . b_k) is rounding noise in both: the error is taken
// relative to 1/100 of the largest gradient's norm where that is larger than its own.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "nn/nn_test_util.hpp"
#include "qkv/kernels/bf16.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/reduce.hpp"

namespace qkv {
using namespace nn;

namespace {

// Relative 2-norm error of each parameter's gradient, and the worst of them.
constexpr double kGradTolerance = 0.02;
constexpr double kLossTolerance = 0.005;

IndexArray random_ids(std::size_t B, std::size_t T, std::size_t V, std::uint64_t seed) {
  Generator g(seed);
  IndexArray ids = IndexArray::from_shape({B, T});
  for (auto& v : ids) v = Index(g.randint(V));
  return ids;
}

double relative_error(const Array<float>& got, const Array<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff += std::pow(double(got.data()[i]) - want.data()[i], 2);
    norm += std::pow(double(want.data()[i]), 2);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Loss and every parameter's gradient of `model` on one batch, in `precision`.
template <class Model, class Forward>
std::pair<double, std::map<std::string, Array<float>>> grads(Model& model, const Forward& forward,
                                                             kernels::Precision precision) {
  for (auto& p : model.parameters()) p.zero_grad();
  double loss_value;
  {
    const kernels::ProductPrecisionGuard guard(precision);
    Variable<float> loss = forward(model);
    loss_value = loss.item();
    loss.backward();
  }
  std::map<std::string, Array<float>> g;
  for (auto& [name, p] : model.named_parameters()) g[name] = p.grad();
  return {loss_value, g};
}

double norm(const Array<float>& a) {
  double s = 0;
  for (float x : a) s += double(x) * x;
  return std::sqrt(s);
}

template <class Model, class Forward>
void check_model(Model& model, const Forward& forward) {
  model.train();
  const auto [f32_loss, f32] = grads(model, forward, kernels::Precision::Float32);
  const auto [bf16_loss, low] = grads(model, forward, kernels::Precision::BFloat16);
  CHECK(std::abs(bf16_loss - f32_loss) <= kLossTolerance * std::abs(f32_loss));
  double largest = 0;
  for (const auto& [name, g] : f32) largest = std::max(largest, norm(g));
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, g] : f32) {
    CAPTURE(name);
    const double e = relative_error(low.at(name), g) * norm(g) / std::max(norm(g), 1e-2 * largest);
    CHECK(e < kGradTolerance);
    if (e > worst) worst = e, worst_name = name;
  }
  CHECK(worst > 0);  // the products did run in bf16
  MESSAGE("worst relative gradient error " << worst << " (" << worst_name << "), loss " << f32_loss << " -> " << bf16_loss);
}

TransformerOptions small(Arch arch, AttentionImpl impl) {
  TransformerOptions o;
  o.arch = arch;
  o.d_model = 32;
  o.attn.num_heads = 4;
  o.layers = 2;
  o.ff.hidden = 64;
  o.max_len = 80;
  o.attn.impl = impl;
  o.dropout = 0.0;
  return o;
}

}  // namespace

TEST_CASE("bf16 products: gradients of every layer of a decoder within 2% of float32 (learned, rope, tied)") {
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composite})
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(int(impl));
      CAPTURE(variant);
      TransformerOptions o = small(Arch::Decoder, impl);
      o.positional = variant == 1 ? Positional::Rope : Positional::Learned;
      o.tie_embeddings = variant == 2;
      Generator init(3);
      DecoderModel<float> model(40, o, init);
      const IndexArray x = random_ids(4, 70, 40, 1), y = random_ids(4, 70, 40, 2);
      check_model(model, [&](DecoderModel<float>& m) { return cross_entropy(m.forward(x), y, -1); });
    }
}

TEST_CASE("bf16 products: gradients of every layer of an encoder within 2% of float32") {
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
    CAPTURE(int(impl));
    Generator init(4);
    EncoderModel<float> model(20, 20, small(Arch::Encoder, impl), init);
    const IndexArray x = random_ids(4, 40, 20, 3), y = random_ids(4, 40, 20, 4);
    check_model(model, [&](EncoderModel<float>& m) { return cross_entropy(m.forward(x), y, -1); });
  }
}

TEST_CASE("bf16 products: matmul and linear, both operands' gradients, every batching mode") {
  const Array<float> a3 = test::random_array<float>({3, 20, 30}, 1), b3 = test::random_array<float>({3, 30, 25}, 2),
                     b2 = test::random_array<float>({30, 25}, 3), a2 = test::random_array<float>({20, 30}, 4),
                     w = test::random_array<float>({25, 30}, 5), bias = test::random_array<float>({25}, 6);
  auto run = [&](kernels::Precision p, int mode) {
    Variable<float> A(mode == 2 ? a2 : a3, true), B(mode == 1 ? b2 : b3, true), W(w, true), b(bias, true);
    const kernels::ProductPrecisionGuard guard(p);
    Variable<float> y = mode == 3 ? linear(A, W, b) : matmul(A, B);
    sum(mul(y, y)).backward();
    return std::vector<Array<float>>{y.value(), A.grad(), mode == 3 ? W.grad() : B.grad()};
  };
  for (int mode = 0; mode < 4; ++mode) {  // equal batches, shared B, shared A, linear
    CAPTURE(mode);
    const auto f = run(kernels::Precision::Float32, mode), l = run(kernels::Precision::BFloat16, mode);
    for (std::size_t i = 0; i < f.size(); ++i) {
      CAPTURE(i);
      CHECK(relative_error(l[i], f[i]) < 0.01);
      CHECK(relative_error(l[i], f[i]) > 0);
    }
  }
}

}  // namespace qkv
