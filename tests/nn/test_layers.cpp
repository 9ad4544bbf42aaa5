#include <doctest/doctest.h>

#include <cmath>

#include "nn_test_util.hpp"
#include "qkv/nn/dropout.hpp"
#include "qkv/nn/embedding.hpp"
#include "qkv/nn/feed_forward.hpp"
#include "qkv/nn/layer_norm.hpp"
#include "qkv/nn/linear.hpp"
#include "qkv/nn/positional.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"

using namespace qkv;
using namespace qkv::nn;
using test::leaf;

namespace {
// Sum of out * r with a fixed random r: a scalar that depends on every output element.
Variable<double> weighted_sum(const Variable<double>& out, std::uint64_t seed = 77) {
  return sum(mul(out, Variable<double>(test::random_array<double>(out.shape(), seed))));
}
}  // namespace

// ---- Linear ----

TEST_CASE("Linear: forward is x W^T + b, computed by hand") {
  Generator gen(1);
  Linear<double> lin(4, 3, true, gen);
  Array<double> x = test::random_array<double>({2, 5, 4}, 2);
  Array<double> y = lin.forward(Variable<double>(x)).value();
  REQUIRE(y.shape() == Shape{2, 5, 3});
  const auto& W = lin.weight.value();
  const auto& b = lin.bias.value();
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t t = 0; t < 5; ++t)
      for (std::size_t o = 0; o < 3; ++o) {
        double s = b(o);
        for (std::size_t i = 0; i < 4; ++i) s += x(n, t, i) * W(o, i);
        CHECK(y(n, t, o) == doctest::Approx(s).epsilon(1e-12));
      }
}

TEST_CASE("Linear: parameters, PyTorch init bounds, no-bias variant") {
  Generator gen(1);
  Linear<float> lin(LinearOptions{16, 8, true}, gen);
  CHECK(test::param_names(lin) == std::vector<std::string>{"weight", "bias"});
  CHECK(lin.weight.shape() == Shape{8, 16});
  CHECK(lin.bias.shape() == Shape{8});
  for (float w : lin.weight.value()) CHECK(std::fabs(w) <= 0.25f);
  for (float b : lin.bias.value()) CHECK(std::fabs(b) <= 0.25f);
  Linear<float> nb(16, 8, false, gen);
  CHECK(test::param_names(nb) == std::vector<std::string>{"weight"});
  CHECK_FALSE(nb.bias.defined());
  CHECK_THROWS_WITH_AS(Linear<float>(0, 3), doctest::Contains("LinearOptions: in_features: expected a positive integer, found 0"),
                       OptionError);
  CHECK_THROWS_WITH_AS(Linear<float>(3, 0), doctest::Contains("LinearOptions: out_features"), OptionError);
}

TEST_CASE("Linear: gradcheck of parameters and input, with and without bias") {
  Generator gen(3);
  for (bool bias : {true, false}) {
    Linear<double> lin(3, 2, bias, gen);
    Variable<double> x = leaf({2, 3}, 4);
    test::check_module_grad([&] { return lin.forward(x); }, lin, {x});
  }
}

// ---- Embedding ----

TEST_CASE("Embedding: rows of the table, N(0, 1) init, gradcheck with a repeated id") {
  Generator gen(5);
  Embedding<double> emb(6, 4, gen);
  CHECK(test::param_names(emb) == std::vector<std::string>{"weight"});
  IndexArray ids = test::ids({{1, 5, 1}, {0, 2, 3}});
  Array<double> y = emb.forward(ids).value();
  REQUIRE(y.shape() == Shape{2, 3, 4});
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t c = 0; c < 4; ++c) CHECK(y(n, t, c) == emb.weight.value()(std::size_t(ids(n, t)), c));
  test::check_module_grad([&] { return emb.forward(ids); }, emb);

  Embedding<double> big(EmbeddingOptions{200, 50}, gen);
  double s = 0, s2 = 0;
  for (double v : big.weight.value()) s += v, s2 += v * v;
  const double n = 200 * 50;
  CHECK(std::fabs(s / n) < 0.05);
  CHECK(std::sqrt(s2 / n) == doctest::Approx(1.0).epsilon(0.05));
  CHECK_THROWS_AS(emb.forward(test::ids({{6}})), ValueError);
  CHECK_THROWS_WITH_AS(Embedding<double>(EmbeddingOptions{0, 4}, gen),
                       doctest::Contains("EmbeddingOptions: num_embeddings: expected a positive integer, found 0"), OptionError);
  CHECK_THROWS_WITH_AS(Embedding<double>(EmbeddingOptions{4, 2, -1.0}, gen), doctest::Contains("EmbeddingOptions: init_std"),
                       OptionError);
  CHECK_THROWS_AS(Embedding<double>(EmbeddingOptions{4, 2, INFINITY}, gen), OptionError);
}

// ---- positional encodings ----

TEST_CASE("SinusoidalPositionalEncoding: the 2017 formula, no parameters, x + PE[:T]") {
  SinusoidalPositionalEncoding<double> pe(PositionalOptions{10, 6});
  CHECK(pe.parameters().empty());
  const auto& P = pe.table();
  REQUIRE(P.shape() == Shape{10, 6});
  for (std::size_t t = 0; t < 10; ++t)
    for (std::size_t i = 0; i < 3; ++i) {
      const double freq = 1.0 / std::pow(10000.0, 2.0 * double(i) / 6.0);
      CHECK(P(t, 2 * i) == doctest::Approx(std::sin(double(t) * freq)).epsilon(1e-12));
      CHECK(P(t, 2 * i + 1) == doctest::Approx(std::cos(double(t) * freq)).epsilon(1e-12));
    }
  CHECK(P(0, 0) == 0.0);
  CHECK(P(0, 1) == 1.0);
  CHECK(P(1, 0) == doctest::Approx(std::sin(1.0)));
  Variable<double> x = leaf({2, 4, 6}, 1);
  Array<double> y = pe.forward(x).value();
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t t = 0; t < 4; ++t)
      for (std::size_t c = 0; c < 6; ++c) CHECK(y(n, t, c) == doctest::Approx(x.value()(n, t, c) + P(t, c)));
  test::check_module_grad([&] { return pe.forward(x); }, pe, {x});
  CHECK_THROWS_AS(pe.forward(leaf({1, 11, 6}, 2)), ShapeError);
  CHECK_THROWS_AS(pe.forward(leaf({1, 3, 5}, 2)), ShapeError);
}

TEST_CASE("SinusoidalPositionalEncoding: an odd width keeps the last sine column") {
  SinusoidalPositionalEncoding<double> pe(PositionalOptions{4, 5});
  const double freq = 1.0 / std::pow(10000.0, 4.0 / 5.0);
  CHECK(pe.table()(3, 4) == doctest::Approx(std::sin(3.0 * freq)).epsilon(1e-12));
}

TEST_CASE("LearnedPositionalEncoding: x + weight[:T], gradcheck, length check") {
  Generator gen(2);
  LearnedPositionalEncoding<double> pe(PositionalOptions{5, 3}, gen);
  CHECK(test::param_names(pe) == std::vector<std::string>{"weight"});
  CHECK(pe.weight.shape() == Shape{5, 3});
  Variable<double> x = leaf({2, 4, 3}, 3);
  Array<double> y = pe.forward(x).value();
  for (std::size_t n = 0; n < 2; ++n)
    for (std::size_t t = 0; t < 4; ++t)
      for (std::size_t c = 0; c < 3; ++c) CHECK(y(n, t, c) == doctest::Approx(x.value()(n, t, c) + pe.weight.value()(t, c)));
  test::check_module_grad([&] { return pe.forward(x); }, pe, {x});
  CHECK_THROWS_WITH_AS(pe.forward(leaf({1, 6, 3}, 2)), doctest::Contains("exceeds max_len 5"), ShapeError);
  CHECK_THROWS_WITH_AS(LearnedPositionalEncoding<double>(PositionalOptions{0, 3}, gen),
                       doctest::Contains("PositionalOptions: max_len: expected a positive integer, found 0"), OptionError);
  CHECK_THROWS_WITH_AS(SinusoidalPositionalEncoding<double>(PositionalOptions{5, 0}),
                       doctest::Contains("PositionalOptions: dim: expected a positive integer, found 0"), OptionError);
}

// ---- LayerNorm ----

TEST_CASE("LayerNorm: normalises the last dimension, ones/zeros init, gradcheck") {
  LayerNorm<double> ln(4);
  CHECK(test::param_names(ln) == std::vector<std::string>{"weight", "bias"});
  for (double w : ln.weight.value()) CHECK(w == 1.0);
  for (double b : ln.bias.value()) CHECK(b == 0.0);
  Array<double> x = test::random_array<double>({3, 4}, 1);
  Array<double> y = ln.forward(Variable<double>(x)).value();
  for (std::size_t r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (std::size_t c = 0; c < 4; ++c) m += x(r, c) / 4;
    for (std::size_t c = 0; c < 4; ++c) v += (x(r, c) - m) * (x(r, c) - m) / 4;
    for (std::size_t c = 0; c < 4; ++c) CHECK(y(r, c) == doctest::Approx((x(r, c) - m) / std::sqrt(v + 1e-5)).epsilon(1e-10));
  }
  // Non-trivial affine parameters for the gradient check.
  ln.weight.value() = test::random_array<double>({4}, 5, 0.5, 1.5);
  ln.bias.value() = test::random_array<double>({4}, 6);
  Variable<double> xv = leaf({2, 3, 4}, 7);
  test::check_module_grad([&] { return ln.forward(xv); }, ln, {xv});
  LayerNorm<double> plain(LayerNormOptions{4, 1e-5, false});
  CHECK(plain.parameters().empty());
  CHECK_THROWS_AS(ln.forward(leaf({2, 5}, 1)), ShapeError);
  CHECK_THROWS_WITH_AS(LayerNorm<double>(LayerNormOptions{0}), doctest::Contains("LayerNormOptions: dim: expected a positive integer"),
                       OptionError);
  CHECK_THROWS_WITH_AS(LayerNorm<double>(LayerNormOptions{4, 0.0}), doctest::Contains("LayerNormOptions: eps: expected a number in (0, inf)"),
                       OptionError);
}

// ---- Dropout ----

TEST_CASE("Dropout: identity in eval mode, inverted dropout in training, reproducible per seed") {
  Dropout<double> drop(0.25);
  Array<double> ones_ = full<double>({4000}, 1.0);
  Variable<double> x(ones_);
  drop.eval();
  CHECK(test::bitwise_equal(drop.forward(x).value(), ones_));
  drop.train();
  manual_seed(42);
  Array<double> a = drop.forward(x).value();
  std::size_t zeros_ = 0;
  for (double v : a) {
    CHECK((v == 0.0 || v == doctest::Approx(1.0 / 0.75)));
    zeros_ += v == 0.0;
  }
  CHECK(double(zeros_) / 4000 == doctest::Approx(0.25).epsilon(0.15));
  manual_seed(42);
  CHECK(test::bitwise_equal(drop.forward(x).value(), a));
  Array<double> b = drop.forward(x).value();  // the generator moved on
  CHECK_FALSE(test::bitwise_equal(a, b));
  Generator own(42);
  drop.set_generator(&own);
  CHECK(test::bitwise_equal(drop.forward(x).value(), a));
  CHECK_THROWS_WITH_AS(Dropout<double>(1.0), doctest::Contains("DropoutOptions: p: expected a number in [0, 1), found 1"),
                       OptionError);
  CHECK_THROWS_AS(Dropout<double>(-0.1), OptionError);
  CHECK_THROWS_AS(Dropout<double>(std::nan("")), OptionError);
}

TEST_CASE("Dropout: gradcheck in training with a reseeded generator") {
  Dropout<double> drop(0.3);
  Generator gen(1);
  drop.set_generator(&gen);
  Variable<double> x = leaf({3, 4}, 2);
  test::check_module_grad([&] { gen.manual_seed(7); return drop.forward(x); }, drop, {x});
}

// ---- FeedForward ----

TEST_CASE("FeedForward: fc2(act(fc1 x)) for GELU and ReLU, parameter names, gradcheck") {
  for (Activation act : {Activation::Gelu, Activation::Relu}) {
    CAPTURE(activation_names().name(act));
    Generator gen(3);
    FeedForward<double> ff(FeedForwardOptions{3, 5, act}, gen);
    CHECK(test::param_names(ff) == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
    CHECK(ff.fc1->weight.shape() == Shape{5, 3});
    CHECK(ff.fc2->weight.shape() == Shape{3, 5});
    Array<double> x = test::random_array<double>({2, 3}, 4, -2, 2);
    Array<double> y = ff.forward(Variable<double>(x)).value();
    const auto &W1 = ff.fc1->weight.value(), &b1 = ff.fc1->bias.value();
    const auto &W2 = ff.fc2->weight.value(), &b2 = ff.fc2->bias.value();
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t o = 0; o < 3; ++o) {
        double s = b2(o);
        for (std::size_t j = 0; j < 5; ++j) {
          double h = b1(j);
          for (std::size_t i = 0; i < 3; ++i) h += x(r, i) * W1(j, i);
          h = act == Activation::Gelu ? 0.5 * h * (1 + std::erf(h / std::sqrt(2.0))) : std::max(h, 0.0);
          s += h * W2(o, j);
        }
        CHECK(y(r, o) == doctest::Approx(s).epsilon(1e-10));
      }
    Variable<double> xv = leaf({2, 2, 3}, 5);
    test::check_module_grad([&] { return ff.forward(xv); }, ff, {xv});
  }
  CHECK(activation_names().parse("relu", "activation") == Activation::Relu);
  CHECK_THROWS_WITH_AS(activation_names().parse("tanh", "activation"), doctest::Contains("activation: expected one of gelu, relu, found 'tanh'"),
                       ValueError);
  CHECK_THROWS_WITH_AS(FeedForward<double>(FeedForwardOptions{3, 0, Activation::Gelu}),
                       doctest::Contains("FeedForwardOptions: hidden: expected a positive integer, found 0"), OptionError);
}

TEST_CASE("FeedForward: dropout only in training, reproducible for a seed, gradcheck with dropout") {
  Generator gen(3);
  FeedForward<double> ff(FeedForwardOptions{4, 8, Activation::Gelu, 0.5}, gen);
  Variable<double> x = leaf({3, 4}, 6);
  ff.eval();
  Array<double> e1 = ff.forward(x).value();
  manual_seed(1);
  CHECK(test::bitwise_equal(ff.forward(x).value(), e1));
  ff.train();
  manual_seed(1);
  Array<double> t1 = ff.forward(x).value();
  CHECK_FALSE(test::bitwise_equal(t1, e1));
  manual_seed(1);
  CHECK(test::bitwise_equal(ff.forward(x).value(), t1));
  test::check_module_grad([&] { manual_seed(3); return weighted_sum(ff.forward(x)); }, ff, {x});
}
