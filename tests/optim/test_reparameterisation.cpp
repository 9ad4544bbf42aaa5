// ParamGroup::gain and optimizer.qk_gain: an unscaled attention (scale 1) whose W_q, W_k start
// d_k^(-1/4) times the scaled model's and are stepped with that gain trains as the scaled model
// does (float64, to rounding), for SGD, Adam and AdamW with weight decay and clipping engaged;
// with the init alone (gain 1) it does not.
#include <doctest/doctest.h>

#include <cmath>

#include "qkv/nn/transformer.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/optim/adam.hpp"
#include "qkv/optim/clip.hpp"
#include "qkv/optim/optimizer.hpp"

namespace qkv {
namespace {

constexpr std::size_t kVocab = 11, kHeadDim = 16;

nn::TransformerOptions small_decoder(bool scaled, double qk_init_gain) {
  nn::TransformerOptions o;
  o.arch = nn::Arch::Decoder;
  o.d_model = 32;
  o.attn.num_heads = 2;
  o.attn.head_dim = kHeadDim;
  o.layers = 2;
  o.ff.hidden = 32;
  o.max_len = 12;
  if (!scaled) o.attn.scale = 1.0;
  o.attn.qk_init_gain = qk_init_gain;
  return o;
}

struct Trajectory {
  std::vector<double> losses;
  StateDict<double> params;
};

// `steps` steps on random token batches (the same for every model), gradients clipped at 0.5.
Trajectory train(const nn::TransformerOptions& model_options, optim::OptimizerOptions o, int steps) {
  Generator init(7);
  nn::DecoderModel<double> model(kVocab, model_options, init);
  o.clip_grad_norm = 0.5;
  auto optimizer = optim::make_optimizer(model, o);
  const std::vector<Variable<double>> params = model.parameters();
  Generator data(11);
  Trajectory t;
  for (int s = 0; s < steps; ++s) {
    IndexArray ids = IndexArray::from_shape({4, 12}), targets = IndexArray::from_shape({4, 12});
    for (auto& v : ids) v = Index(data.randint(kVocab));
    for (auto& v : targets) v = Index(data.randint(kVocab));
    Variable<double> loss = cross_entropy(model.forward(ids), targets);
    t.losses.push_back(loss.item());
    loss.backward();
    optim::clip_grad_norm(params, o.clip_grad_norm, optimizer->gains_of(params));
    optimizer->step();
    optimizer->zero_grad();
  }
  t.params = model.state_dict();
  return t;
}

bool is_query_or_key(const std::string& name) {
  return name.find("w_q.") != std::string::npos || name.find("w_k.") != std::string::npos;
}

}  // namespace

TEST_CASE("qk_gain: the unscaled model with W_q, W_k at gain d_k^(-1/4) trains as the scaled one") {
  const double gain = std::pow(double(kHeadDim), -0.25);
  for (optim::OptimizerKind kind : {optim::OptimizerKind::SGD, optim::OptimizerKind::Adam, optim::OptimizerKind::AdamW}) {
    CAPTURE(optim::optimizer_names().name(kind));
    optim::OptimizerOptions o;
    o.name = kind;
    o.lr = kind == optim::OptimizerKind::SGD ? 0.1 : 3e-3;
    o.momentum = kind == optim::OptimizerKind::SGD ? 0.9 : 0.0;
    o.weight_decay = 0.1;
    o.eps = 1e-4;  // large enough that eps / gain matters
    const Trajectory scaled = train(small_decoder(true, 1.0), o, 30);
    optim::OptimizerOptions reparam = o;
    reparam.qk_gain = gain;
    const Trajectory exact = train(small_decoder(false, gain), reparam, 30);
    const Trajectory init_only = train(small_decoder(false, gain), o, 30);

    CHECK(std::abs(scaled.losses.back() - scaled.losses.front()) > 1e-3);  // it trained
    double loss_gap = 0, init_only_gap = 0;
    for (std::size_t s = 0; s < scaled.losses.size(); ++s) {
      loss_gap = std::max(loss_gap, std::abs(exact.losses[s] - scaled.losses[s]));
      init_only_gap = std::max(init_only_gap, std::abs(init_only.losses[s] - scaled.losses[s]));
    }
    CHECK(loss_gap < 1e-10);
    CHECK(init_only_gap > 1e-5);
    REQUIRE(scaled.params.size() == exact.params.size());
    for (std::size_t k = 0; k < scaled.params.size(); ++k) {
      const auto& [name, value] = scaled.params[k];
      CAPTURE(name);
      REQUIRE(exact.params[k].first == name);
      const Array<double>& other = exact.params[k].second;
      const double g = is_query_or_key(name) ? gain : 1.0;  // W_q, W_k are gain x the scaled model's
      double worst = 0;
      for (std::size_t i = 0; i < value.size(); ++i) worst = std::max(worst, std::abs(other.data()[i] - g * value.data()[i]));
      CHECK(worst < 1e-10);
    }
  }
}

TEST_CASE("qk_gain: W_q and W_k in groups of their own, gains_of, bad gains named") {
  Generator init(1);
  nn::DecoderModel<double> model(kVocab, small_decoder(false, 1.0), init);
  optim::OptimizerOptions o;
  o.qk_gain = 0.5;
  auto optimizer = optim::make_optimizer(model, o);
  std::size_t in_gain_groups = 0;
  for (const auto& g : optimizer->groups())
    for (const auto& [name, p] : g.params) {
      CAPTURE(name);
      CHECK((g.gain == 0.5) == is_query_or_key(name));
      in_gain_groups += g.gain == 0.5;
    }
  CHECK(in_gain_groups == 2 * 2 * 2);  // 2 layers x (w_q, w_k) x (weight, bias)
  const std::vector<double> gains = optimizer->gains_of(model.parameters());
  REQUIRE(gains.size() == model.parameters().size());
  CHECK(std::count(gains.begin(), gains.end(), 0.5) == 8);
  CHECK(optim::make_optimizer(model, optim::OptimizerOptions{})->gains_of(model.parameters()).empty());

  o.qk_gain = 0;
  CHECK_THROWS_WITH_AS(optim::make_optimizer(model, o), doctest::Contains("qk_gain"), OptionError);
  std::vector<optim::ParamGroup<double>> groups{{model.named_parameters(), 1e-3, 0.0, -1.0}};
  CHECK_THROWS_WITH_AS(optim::AdamW<double>(groups, {}), doctest::Contains("gain must be a positive number"), ValueError);
}

}  // namespace qkv
