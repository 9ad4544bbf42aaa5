// Optimizers against torch.optim. The k_* reference values below are printed by
//     /usr/bin/python3 tools/make_optim_reference.py
// (torch 1.13, float64): parameters "w" (2, 3) and "b" (3,) start at ((5i + 3j) % 7 - 3) / 3 and
// get the gradient ((7i + 3s + 5j) % 11 - 5) / 4 at step s; the values are those after 4 steps.
// The inputs are exact in binary, so this file rebuilds them bit for bit.

#include <doctest/doctest.h>

#include <functional>
#include <memory>

#include "qkv/tensor/parallel.hpp"
#include "qkv/nn/embedding.hpp"
#include "qkv/nn/layer_norm.hpp"
#include "qkv/nn/linear.hpp"
#include "qkv/optim/adam.hpp"
#include "qkv/optim/sgd.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::optim;

namespace {

// torch 1.13.0a0, 4 steps
const std::vector<double> k_sgd_plain = {-0.95, 0.5666666666666665, 0.024999999999999994, -0.7916666666666666, 1.0, 0.4583333333333333, 0.1, -0.7166666666666667, 1.0750000000000002};
const std::vector<double> k_sgd_momentum = {-0.582125, 0.2984666666666666, 0.01420000000000001, -0.9682916666666667, 0.8580249999999999, 0.5737583333333334, 0.08425, -0.4750166666666667, 1.1508250000000002};
const std::vector<double> k_sgd_dampening_wd = {-0.54625715669875, 0.3354883111616667, 0.060425774731250013, -0.9791133267835416, 0.8396849561612499, 0.5646224197308333, 0.059366356875000026, -0.40819617955541654, 0.99266639643};
const std::vector<double> k_sgd_nesterov_wd = {-0.594478728376, 0.2607661316639999, 0.02752907911999999, -0.918110098584, 0.8166268866159999, 0.583389834072, 0.17609426, -0.552142792544, 1.0909064474960002};
const std::vector<double> k_adam = {-0.9750395278818, 0.6413853374240341, 0.009091685120048161, -0.6838013600050209, 0.9813295218045321, 0.353153338023504, -0.0010822341372269985, -0.6480106063227951, 0.9996363410951075};
const std::vector<double> k_adam_wd = {-0.9749724350694896, 0.6409935749652728, 0.008014577018894867, -0.6806272777285632, 0.9796936335647373, 0.35080160034010366, -0.0002014292825755831, -0.6484446314153056, 0.997545701756335};
const std::vector<double> k_adamw = {-0.971099118103428, 0.638774657489417, 0.009060964351190411, -0.681103412331562, 0.9773836225575345, 0.3517794975604532, -0.0010698789553955628, -0.6453974961616982, 0.9956622187189936};
const std::vector<double> k_adamw_groups = {-0.9346026193265828, 0.6059161418733637, 0.017938386810107846, -0.6900517542138929, 0.9471386948307577, 0.36733275737256965, -0.0005411170686134992, -0.6573386364947309, 0.9998181705475536};
const std::vector<double> k_sgd_groups = {-0.8795322896875, 0.5478764202083333, -0.00027875312499999334, -0.7342462530208332, 0.9470372834375, 0.3988821101041666, 0.2125, -0.6041666666666666, 1.2562499999999999};
const std::vector<double> k_adam_groups = {-0.9251185836454, 0.5908226789387693, 0.027275055360144483, -0.7180707466817294, 0.9439885654135964, 0.39279334740384525, -0.0010683426702886743, -0.6429281191424179, 0.9896213755266705};

constexpr int kSteps = 4;

template <class T>
using Named = std::vector<std::pair<std::string, Variable<T>>>;

template <class T>
Named<T> make_params() {
  Named<T> out;
  const std::vector<Shape> shapes{{2, 3}, {3}};
  const char* names[] = {"w", "b"};
  for (std::size_t j = 0; j < shapes.size(); ++j) {
    Array<T> a = Array<T>::from_shape(shapes[j]);
    for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = T(double(int((5 * i + 3 * j) % 7) - 3) / 3.0);
    out.emplace_back(names[j], Variable<T>(a, true));
  }
  return out;
}

template <class T>
void set_grads(const Named<T>& params, int s) {
  for (std::size_t j = 0; j < params.size(); ++j) {
    const Variable<T>& p = params[j].second;
    Array<T> g = Array<T>::from_shape(p.shape());
    for (std::size_t i = 0; i < g.size(); ++i) g.data()[i] = T(double(int((7 * i + 3 * s + 5 * j) % 11) - 5) / 4.0);
    p.zero_grad();
    p.accumulate_grad(g);
  }
}

template <class T>
using Factory = std::function<std::unique_ptr<Optimizer<T>>(const Named<T>&)>;

template <class T>
std::vector<double> run(const Factory<T>& make) {
  Named<T> params = make_params<T>();
  auto opt = make(params);
  for (int s = 0; s < kSteps; ++s) {
    set_grads(params, s);
    opt->step();
  }
  CHECK(opt->steps() == kSteps);
  std::vector<double> out;
  for (auto& [name, p] : params)
    for (T v : p.value()) out.push_back(double(v));
  return out;
}

// Runs the case in double (to 1e-12) and in float (to 1e-5) against the torch values.
void check_case(const std::vector<double>& expected, const Factory<double>& make_d, const Factory<float>& make_f) {
  std::vector<double> d = run(make_d), f = run(make_f);
  REQUIRE(d.size() == expected.size());
  REQUIRE(f.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(d[i] == doctest::Approx(expected[i]).epsilon(1e-12));
    CHECK(f[i] == doctest::Approx(expected[i]).epsilon(1e-5));
  }
}

// One group of all parameters with the options' lr / weight_decay.
template <template <class> class Opt, class O>
void check_one(const std::vector<double>& expected, O o) {
  check_case(
      expected, [o](const Named<double>& p) -> std::unique_ptr<Optimizer<double>> { return std::make_unique<Opt<double>>(p, o); },
      [o](const Named<float>& p) -> std::unique_ptr<Optimizer<float>> { return std::make_unique<Opt<float>>(p, o); });
}

// "w" in group 0 and "b" in group 1 with their own lr / weight_decay.
template <template <class> class Opt, class O>
void check_groups(const std::vector<double>& expected, O o, double lr0, double wd0, double lr1, double wd1) {
  auto groups = [=](const auto& p) {
    using T = typename std::decay_t<decltype(p[0].second)>::value_type;
    return std::vector<ParamGroup<T>>{{{p[0]}, lr0, wd0}, {{p[1]}, lr1, wd1}};
  };
  check_case(
      expected, [=](const Named<double>& p) -> std::unique_ptr<Optimizer<double>> { return std::make_unique<Opt<double>>(groups(p), o); },
      [=](const Named<float>& p) -> std::unique_ptr<Optimizer<float>> { return std::make_unique<Opt<float>>(groups(p), o); });
}

}  // namespace

TEST_CASE("SGD: plain, momentum, dampening + weight decay, nesterov + weight decay match torch") {
  check_one<SGD>(k_sgd_plain, SGDOptions{0.1});
  check_one<SGD>(k_sgd_momentum, SGDOptions{0.1, 0.9});
  check_one<SGD>(k_sgd_dampening_wd, SGDOptions{0.1, 0.9, 0.3, 0.05});
  check_one<SGD>(k_sgd_nesterov_wd, SGDOptions{0.1, 0.8, 0.0, 0.1, true});
}

TEST_CASE("Adam and AdamW match torch, with and without weight decay") {
  check_one<Adam>(k_adam, AdamOptions{0.01});
  check_one<Adam>(k_adam_wd, AdamOptions{0.01, 0.8, 0.95, 1e-6, 0.1});
  check_one<AdamW>(k_adamw, AdamWOptions{0.01, 0.9, 0.999, 1e-8, 0.1});
}

TEST_CASE("optimizers: each parameter group uses its own lr and weight decay") {
  check_groups<AdamW>(k_adamw_groups, AdamWOptions{}, 0.02, 0.2, 0.005, 0.0);
  check_groups<SGD>(k_sgd_groups, SGDOptions{1e-3, 0.5}, 0.05, 0.1, 0.2, 0.0);
  check_groups<Adam>(k_adam_groups, AdamOptions{}, 0.03, 0.0, 0.01, 0.3);
}

TEST_CASE("optimizers: a parameter without a gradient is left alone, and so are its buffers") {
  Named<double> params = make_params<double>();
  Adam<double> opt(params, AdamOptions{0.1});
  set_grads(params, 0);
  params[1].second.zero_grad();
  Array<double> b_before = params[1].second.value();
  Array<double> w_before = params[0].second.value();
  opt.step();
  CHECK(test::bitwise_equal(params[1].second.value(), b_before));
  CHECK_FALSE(test::bitwise_equal(params[0].second.value(), w_before));
  for (auto& [name, t] : opt.state_dict().tensors)
    if (name.find("/b") != std::string::npos) CHECK(std::all_of(t.begin(), t.end(), [](double v) { return v == 0; }));
}

TEST_CASE("optimizers: zero_grad, set_lr, lr, steps") {
  Named<float> params = make_params<float>();
  SGD<float> opt({{{params[0]}, 0.1, 0.0}, {{params[1]}, 0.2, 0.0}});
  CHECK(opt.lr() == doctest::Approx(0.1));
  opt.set_lr(0.5);
  for (auto& g : opt.groups()) CHECK(g.lr == 0.5);
  set_grads(params, 0);
  opt.zero_grad();
  for (auto& [name, p] : params) CHECK_FALSE(p.has_grad());
  opt.step();  // no gradients: nothing moves, the step still counts
  CHECK(opt.steps() == 1);
  CHECK_THROWS_AS(opt.set_lr(-1), ValueError);
}

TEST_CASE("optimizers: set_lr takes effect at the next step") {
  Named<double> params = make_params<double>();
  SGD<double> opt(params, SGDOptions{0.1});
  opt.set_lr(0.25);
  const double w0 = params[0].second.value()(0, 1);
  set_grads(params, 0);
  const double g0 = params[0].second.grad()(0, 1);
  opt.step();
  CHECK(params[0].second.value()(0, 1) == doctest::Approx(w0 - 0.25 * g0).epsilon(1e-15));
}

namespace {

// Steps 3 times, saves, then continues 3 more steps on the original and on a copy restored from
// the saved state (fresh optimizer, parameters copied): both must end with the same bits.
template <class Opt, class O>
void check_round_trip(O options) {
  Named<float> a = make_params<float>();
  Opt opt_a(a, options);
  for (int s = 0; s < 3; ++s) {
    set_grads(a, s);
    opt_a.step();
  }
  OptimizerState<float> saved = opt_a.state_dict();
  Named<float> b = make_params<float>();
  for (std::size_t j = 0; j < a.size(); ++j) b[j].second.value() = a[j].second.value();
  Opt opt_b(b, options);
  opt_b.load_state_dict(saved);
  CHECK(opt_b.steps() == 3);
  for (int s = 3; s < 6; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    opt_a.step();
    opt_b.step();
  }
  for (std::size_t j = 0; j < a.size(); ++j) CHECK(test::bitwise_equal(a[j].second.value(), b[j].second.value()));
  OptimizerState<float> sa = opt_a.state_dict(), sb = opt_b.state_dict();
  REQUIRE(sa.tensors.size() == sb.tensors.size());
  for (std::size_t i = 0; i < sa.tensors.size(); ++i) CHECK(test::bitwise_equal(sa.tensors[i].second, sb.tensors[i].second));
}

}  // namespace

TEST_CASE("optimizers: state_dict round trip gives bitwise-identical continued updates") {
  check_round_trip<SGD<float>>(SGDOptions{0.1, 0.9, 0.1, 0.01});
  check_round_trip<Adam<float>>(AdamOptions{0.01, 0.9, 0.99, 1e-8, 0.01});
  check_round_trip<AdamW<float>>(AdamWOptions{});
}

TEST_CASE("optimizers: state_dict names its buffers <buffer>/<param>") {
  Named<float> params = make_params<float>();
  OptimizerState<float> s = AdamW<float>(params).state_dict();
  REQUIRE(s.tensors.size() == 4);
  CHECK(s.tensors[0].first == "exp_avg/w");
  CHECK(s.tensors[1].first == "exp_avg/b");
  CHECK(s.tensors[2].first == "exp_avg_sq/w");
  CHECK(s.tensors[3].first == "exp_avg_sq/b");
  CHECK(s.tensors[0].second.shape() == Shape{2, 3});
  CHECK(SGD<float>(params, SGDOptions{0.1, 0.9}).state_dict().tensors[1].first == "momentum_buffer/b");
  CHECK(SGD<float>(params, SGDOptions{0.1}).state_dict().tensors.empty());
}

TEST_CASE("optimizers: load_state_dict names what is wrong and changes nothing") {
  Named<float> params = make_params<float>();
  Adam<float> opt(params);
  set_grads(params, 0);
  opt.step();
  const OptimizerState<float> before = opt.state_dict();
  OptimizerState<float> bad = before;
  bad.tensors.erase(bad.tensors.begin());                            // missing exp_avg/w
  bad.tensors[0].second = zeros<float>({4});                         // exp_avg/b misshaped
  bad.tensors.emplace_back("momentum_buffer/w", zeros<float>({2, 3}));  // unexpected
  bad.step = 7;
  CHECK_THROWS_WITH_AS(opt.load_state_dict(bad), doctest::Contains("missing: exp_avg/w (2, 3)"), ValueError);
  CHECK_THROWS_WITH_AS(opt.load_state_dict(bad), doctest::Contains("shape of exp_avg/b: expected (3), found (4)"),
                       ValueError);
  CHECK_THROWS_WITH_AS(opt.load_state_dict(bad), doctest::Contains("unexpected: momentum_buffer/w"), ValueError);
  OptimizerState<float> negative = before;
  negative.step = -1;
  CHECK_THROWS_WITH_AS(opt.load_state_dict(negative), doctest::Contains("step"), ValueError);
  CHECK(opt.steps() == 1);
  OptimizerState<float> after = opt.state_dict();
  for (std::size_t i = 0; i < after.tensors.size(); ++i) CHECK(test::bitwise_equal(after.tensors[i].second, before.tensors[i].second));
}

TEST_CASE("optimizers: bad options and bad groups throw ValueError naming them") {
  Named<float> params = make_params<float>();
  CHECK_THROWS_WITH_AS(SGD<float>(params, SGDOptions{0.1, -0.5}), doctest::Contains("momentum"), ValueError);
  CHECK_THROWS_WITH_AS(SGD<float>(params, SGDOptions{0.1, 0.0, 0.0, 0.0, true}), doctest::Contains("nesterov"), ValueError);
  CHECK_THROWS_WITH_AS(SGD<float>(params, SGDOptions{0.1, 0.9, 0.5, 0.0, true}), doctest::Contains("nesterov"), ValueError);
  CHECK_THROWS_WITH_AS(Adam<float>(params, AdamOptions{0.1, 1.0}), doctest::Contains("beta1"), ValueError);
  CHECK_THROWS_WITH_AS(Adam<float>(params, AdamOptions{0.1, 0.9, -0.1}), doctest::Contains("beta2"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW<float>(params, AdamWOptions{0.1, 0.9, 0.99, -1.0}), doctest::Contains("eps"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW<float>(params, AdamWOptions{-0.1}), doctest::Contains("lr"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW<float>(std::vector<ParamGroup<float>>{}), doctest::Contains("at least one"), ValueError);
  CHECK_THROWS_WITH_AS(AdamW<float>({{{params[0]}, 0.1, -1.0}}), doctest::Contains("weight_decay"), ValueError);
  CHECK_THROWS_WITH_AS(Adam<float>({{{params[0]}, 0.1, 0.0}, {{params[0]}, 0.1, 0.0}}),
                       doctest::Contains("'w' appears more than once"), ValueError);
  CHECK_THROWS_WITH_AS(Adam<float>({{{params[0], {"alias", params[0].second}}, 0.1, 0.0}}),
                       doctest::Contains("'alias' is already in the optimizer"), ValueError);
}

TEST_CASE("optimizers: updates of a large tensor are the same bits with 1 and 2 threads") {
  const Shape shape{300, 200};  // above the parallel threshold
  auto run_with = [&](int threads) {
    set_num_threads(threads);
    Variable<float> p(test::random_array<float>(shape, 1), true);
    AdamW<float> opt({{"p", p}}, AdamWOptions{0.01});
    for (int s = 0; s < 3; ++s) {
      p.zero_grad();
      p.accumulate_grad(test::random_array<float>(shape, 10 + s));
      opt.step();
    }
    return Array<float>(p.value());
  };
  const int saved = num_threads();
  Array<float> one = run_with(1), two = run_with(2);
  set_num_threads(saved);
  CHECK(test::bitwise_equal(one, two));
}

TEST_CASE("param_groups_decay_weights_only: by the role each module gave, not by names") {
  // A module whose names would fool name matching: a Linear named "norm_proj" is decayed, a
  // LayerNorm named "scale" is not, and embeddings are weights.
  struct Net : nn::Module<float> {
    Net(Generator& gen) {
      emb = register_module("emb", std::make_shared<nn::Embedding<float>>(10, 4, gen));
      proj = register_module("norm_proj", std::make_shared<nn::Linear<float>>(4, 4, true, gen));
      ln = register_module("scale", std::make_shared<nn::LayerNorm<float>>(4));
      head = register_module("head", std::make_shared<nn::Linear<float>>(4, 3, false, gen));
    }
    std::shared_ptr<nn::Embedding<float>> emb;
    std::shared_ptr<nn::Linear<float>> proj, head;
    std::shared_ptr<nn::LayerNorm<float>> ln;
  };
  Generator gen(1);
  Net net(gen);
  auto groups = param_groups_decay_weights_only(net, 0.01, 0.1);
  REQUIRE(groups.size() == 2);
  auto names = [](const ParamGroup<float>& g) {
    std::vector<std::string> out;
    for (auto& [n, p] : g.params) out.push_back(n);
    return out;
  };
  CHECK(names(groups[0]) == std::vector<std::string>{"emb.weight", "norm_proj.weight", "head.weight"});
  CHECK(names(groups[1]) == std::vector<std::string>{"norm_proj.bias", "scale.weight", "scale.bias"});
  CHECK(groups[0].lr == 0.01);
  CHECK(groups[1].lr == 0.01);
  CHECK(groups[0].weight_decay == 0.1);
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(groups[0].params[0].second.id() == net.emb->weight.id());  // the same parameters, not copies
}
