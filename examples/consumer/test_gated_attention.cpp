// The consumer's own tests of its layer: gradients against finite differences (float64, qkv's
// gradcheck) and a training run that must lower the loss.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "gated_attention.hpp"
#include "qkv/autograd/gradcheck.hpp"

using consumer::GatedAttention;
using qkv::Variable;

namespace {

qkv::GradcheckOptions tolerances() {
  qkv::GradcheckOptions o;
  o.eps = 1e-6;
  o.atol = 1e-5;
  o.rtol = 1e-3;
  return o;
}

// Gradients of y (B=2, T=3, E=4, 2 heads) with respect to x and every parameter.
qkv::GradcheckReport check_layer(bool causal) {
  qkv::Generator init(3), data(4);
  GatedAttention<double> layer(4, 2, init);
  Variable<double> x(consumer::randn<double>({2, 3, 4}, data), true);
  std::vector<Variable<double>> inputs{x};
  for (auto& p : layer.parameters()) inputs.push_back(p);
  return qkv::gradcheck([&] { return layer.forward(x, causal); }, inputs, tolerances());
}

}  // namespace

TEST_CASE("sigmoid matches 1 / (1 + exp(-z)) and its gradient") {
  Variable<double> z(qkv::from_vector<double>({-30, -2, 0, 0.5, 3, 40}, {6}), true);
  Variable<double> s = consumer::sigmoid(z);
  for (std::size_t i = 0; i < 6; ++i) {
    const double zi = z.value().data()[i];
    CHECK(s.value().data()[i] == doctest::Approx(1 / (1 + std::exp(-zi))).epsilon(1e-12));
  }
  qkv::GradcheckReport r = qkv::gradcheck([](const std::vector<Variable<double>>& v) { return consumer::sigmoid(v[0]); },
                                          {z.value()}, tolerances());
  INFO(r.str());
  CHECK(r.ok);
}

TEST_CASE("gated attention gradients match finite differences") {
  qkv::GradcheckReport r = check_layer(false);
  INFO(r.str());
  CHECK(r.ok);
  CHECK(r.inputs.size() == 1 + 9);  // x, 8 attention parameters, the gate
}

TEST_CASE("gated attention gradients match finite differences with a causal mask") {
  qkv::GradcheckReport r = check_layer(true);
  INFO(r.str());
  CHECK(r.ok);
}

TEST_CASE("gradcheck catches a wrong gradient") {
  // A check that cannot fail checks nothing: detach the gate's input, so the analytic gradient
  // of the gate weight is zero while the numeric one is not.
  qkv::Generator init(3), data(4);
  GatedAttention<double> layer(4, 2, init);
  Variable<double> x(consumer::randn<double>({2, 3, 4}, data), true);
  auto broken = [&] {
    Variable<double> g = consumer::sigmoid(layer.gate->forward(x).detach());
    return g * layer.attn->forward(x, x, x).output;
  };
  qkv::GradcheckReport r = qkv::gradcheck(broken, {layer.gate->weight}, tolerances());
  CHECK_FALSE(r.ok);
}

TEST_CASE("training the gated attention lowers the held-out loss") {
  std::vector<double> losses = consumer::train_student<float>(40);
  INFO("held-out mse " << losses.front() << " -> " << losses.back());
  REQUIRE(losses.size() == 41);
  CHECK(losses.back() < 0.5 * losses.front());
  CHECK(losses[20] < losses.front());
}
