// The causal instruments against answers that follow from the maths, on random models:
// - attribution patching is exact where the metric is linear in the patched activation (one
//   attention-only layer without norms: logits = W_U (embed + sum_h z_h W_O,h + b_O) + b_U), so
//   it equals activation patching there, head by head;
// - EAP's edges out of the input add up to the input's whole gradient term (the readers' gradients
//   sum to the stream's), and EAP-IG's to m(clean) - m(corrupt) as the steps grow (completeness);
// - path patching from a head straight to the logits of a one-layer model is activation patching;
// - direct logit attribution adds up to the logit difference exactly, and the logit lens's last
//   stage is the model's own prediction.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/interp/attribution.hpp"
#include "qkv/interp/lens.hpp"
#include "qkv/interp/path_patching.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/model/task_model.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"

namespace qkv {
namespace {

// A randomly initialised induction decoder (V = 8 tokens, T = 12) with the given overrides.
model::LoadedModel random_model(std::vector<std::string> overrides, std::uint64_t seed = 3) {
  std::vector<std::string> all = {"model.arch=decoder", "model.d_model=32", "model.heads=2", "model.dropout=0",
                                  "model.positional=learned", "task.name=induction", "task.vocab=8",
                                  "task.length=12", "task.eval_size=8"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  model::LoadedModel l;
  l.path = "random";
  l.cfg = config::parse_config("{}", "random.yaml", all);
  l.task = data::make_task(l.cfg.task);
  Generator gen(seed);
  l.model = model::make_model(l.cfg, *l.task, gen);
  // Larger weights than the init's, so that the runs differ visibly and softmaxes are not flat.
  StateDict<float> sd = l.model->module().state_dict();
  for (auto& [name, a] : sd)
    if (name.find("norm") == std::string::npos)
      for (float& x : a) x *= 3.0f;
  l.model->module().load_state_dict(sd);
  l.model->module().eval();
  return l;
}

model::InputRequest ids(std::vector<Index> v) {
  model::InputRequest r;
  r.ids = std::move(v);
  return r;
}

const std::vector<Index> kClean = {1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5};
const std::vector<Index> kCorrupt = {1, 2, 3, 4, 0, 6, 7, 1, 2, 3, 6, 5};

interp::AttributeRequest attribute_request(interp::AttributionMethod method, std::size_t steps = 5) {
  interp::AttributeRequest r;
  r.clean = ids(kClean), r.corrupt = ids(kCorrupt), r.ids = true;
  r.answer = "5", r.wrong = "3";  // a random model's most likely tokens may agree
  r.method = method, r.steps = steps;
  return r;
}

interp::PatchingResult activation_patching(model::LoadedModel& l) {
  interp::PatchRequest p;
  p.clean = ids(kClean), p.corrupt = ids(kCorrupt), p.ids = true;
  p.answer = "5", p.wrong = "3";
  return interp::patch(l, p);
}

double edge(const interp::AttributionResult& r, const std::string& from, const std::string& to) {
  for (auto& e : r.edges)
    if (e.from == from && e.to == to) return e.score;
  FAIL("no edge " << from << " -> " << to);
  return 0;
}

double sum_from(const interp::AttributionResult& r, const std::string& from) {
  double s = 0;
  for (auto& e : r.edges)
    if (e.from == from) s += e.score;
  return s;
}

}  // namespace

TEST_CASE("attribution: exact where the metric is linear in the head outputs, so it equals activation patching") {
  model::LoadedModel l = random_model({"model.layers=1", "model.attn_only=true", "model.norm=none"});
  const interp::PatchingResult patched = activation_patching(l);
  const interp::AttributionResult a = interp::attribute(l, attribute_request(interp::AttributionMethod::Eap));
  REQUIRE(a.heads.size() == 1);
  REQUIRE(a.heads[0].size() == 2);
  CHECK(a.position == patched.position);
  CHECK(a.answer == patched.answer);
  CHECK(a.wrong == patched.wrong);
  CHECK(a.clean_metric == doctest::Approx(patched.clean_diff).epsilon(1e-6));
  CHECK(a.corrupt_metric == doctest::Approx(patched.corrupt_diff).epsilon(1e-6));
  double moved = 0;
  for (std::size_t h = 0; h < 2; ++h) {
    CHECK(a.heads[0][h] == doctest::Approx(patched.heads[0][h].restored).epsilon(1e-4).scale(1));
    // The head's edge to the logits is the same number (its result is z through w_o: linear).
    CHECK(edge(a, "a0.h" + std::to_string(h), "logits") == doctest::Approx(a.heads[0][h]).epsilon(1e-4).scale(1));
    // Per position, the scores add up to the head's.
    const auto& per_t = a.head_positions[0][h];
    REQUIRE(per_t.size() == kClean.size());
    CHECK(std::accumulate(per_t.begin(), per_t.end(), 0.0) == doctest::Approx(a.heads[0][h]).epsilon(1e-9).scale(1));
    moved += std::abs(a.heads[0][h]);
  }
  CHECK(moved > 1e-3);  // the heads do carry something, so the equality says something
  CHECK(a.forward_passes == 2);
  CHECK(a.backward_passes == 1);
  // The edges: the input, both heads -> the heads' q, k, v of no later layer, and the logits.
  CHECK(a.edges.size() == 3 * 2 * 1 + 3);
}

TEST_CASE("attribution: the edges out of the input add up to the input's gradient term, and EAP-IG's to the whole difference") {
  model::LoadedModel l = random_model({"model.layers=2", "model.d_ff=64"});
  // EAP: sum over every reader of (e_clean - e_corrupt) . dm/d(reader's input) at the corrupted
  // run is (e_clean - e_corrupt) . dm/de: the readers' gradients add up to the stream's.
  const interp::AttributionResult eap = interp::attribute(l, attribute_request(interp::AttributionMethod::Eap));
  const data::Batch corrupt = data::ids_row(*l.task, kCorrupt, "corrupt"), clean = data::ids_row(*l.task, kClean, "clean");
  nn::ActivationCache<float> embeds;
  {
    NoGradGuard no_grad;
    embeds = nn::run_with_cache(l.model->module(), [&] { l.model->logits(clean); }, {"blocks.0.hook_resid_pre"});
  }
  const std::size_t C = l.task->num_classes(), p = eap.position;
  const nn::GradCache<float> g = nn::run_with_grads(l.model->module(), [&] {
    Variable<float> z = l.model->logits(corrupt);
    Array<float> pick = zeros<float>(z.shape());
    pick.data()[p * C + std::size_t(eap.answer)] = 1, pick.data()[p * C + std::size_t(eap.wrong)] = -1;
    return sum(mul(z, Variable<float>(pick)));
  }, {"blocks.0.hook_resid_pre"});
  const Array<float>& e1 = embeds["blocks.0.hook_resid_pre"];
  const Array<float>& e0 = g.values["blocks.0.hook_resid_pre"];
  const Array<float>& de = g.grads["blocks.0.hook_resid_pre"];
  double term = 0;
  for (std::size_t i = 0; i < de.size(); ++i) term += double(e1.data()[i] - e0.data()[i]) * double(de.data()[i]);
  const double span = eap.clean_metric - eap.corrupt_metric;
  CHECK(std::abs(span) > 0.1);
  CHECK(sum_from(eap, "input") == doctest::Approx(term / span).epsilon(1e-4).scale(1));
  // Every writer is read by every later reader.
  // Out of the input 12 + 2 + 1, each layer-0 head 6 + 2 + 1, m0 6 + 1 + 1, each layer-1 head 2, m1 1.
  CHECK(eap.edges.size() == 15 + 2 * 9 + 8 + 2 * 2 + 1);

  // EAP-IG: a Riemann sum of the integral of the gradient along the straight line from the
  // corrupted embeddings to the clean ones; with enough steps it is m(clean) - m(corrupt) itself.
  const interp::AttributionResult ig1 = interp::attribute(l, attribute_request(interp::AttributionMethod::EapIg, 1));
  const interp::AttributionResult ig = interp::attribute(l, attribute_request(interp::AttributionMethod::EapIg, 200));
  CHECK(sum_from(ig1, "input") == doctest::Approx(sum_from(eap, "input")).epsilon(1e-6).scale(1));  // 1 step is EAP
  CHECK(std::abs(sum_from(ig, "input") - 1.0) < 0.02);
  CHECK(std::abs(sum_from(ig, "input") - 1.0) < std::abs(sum_from(eap, "input") - 1.0));
  CHECK(ig.forward_passes == 201);
  CHECK(ig.backward_passes == 200);
}

TEST_CASE("attribution: the noise direction swaps the runs, and bad requests are refused naming the field") {
  model::LoadedModel l = random_model({"model.layers=1", "model.attn_only=true", "model.norm=none"});
  interp::AttributeRequest r = attribute_request(interp::AttributionMethod::Attribution);
  const interp::AttributionResult denoise = interp::attribute(l, r);
  r.noise = true;
  const interp::AttributionResult noise = interp::attribute(l, r);
  // Linear metric: noising a head loses exactly what denoising it restores, as a share of the span.
  for (std::size_t h = 0; h < 2; ++h) CHECK(noise.heads[0][h] == doctest::Approx(denoise.heads[0][h]).epsilon(1e-4).scale(1));
  CHECK(noise.edges.empty());  // plain attribution has nodes only
  r.steps = 0;
  r.method = interp::AttributionMethod::EapIg;
  CHECK_THROWS_WITH_AS(interp::attribute(l, r), doctest::Contains("steps"), ValueError);
  r = attribute_request(interp::AttributionMethod::Eap);
  r.corrupt = ids(kClean);  // the same run twice: nothing to attribute
  r.answer = "1", r.wrong = "2";
  CHECK_THROWS_WITH_AS(interp::attribute(l, r), doctest::Contains("metric"), ValueError);
  r = attribute_request(interp::AttributionMethod::Eap);
  r.metric = [](const Array<float>&) { return std::nan(""); };
  CHECK_THROWS_WITH_AS(interp::attribute(l, r), doctest::Contains("not finite"), ValueError);
}

TEST_CASE("attribution: a metric given with its gradient, or differentiated numerically, gives the same scores") {
  model::LoadedModel l = random_model({"model.layers=2", "model.attn_only=true"});
  const std::size_t p = kClean.size() - 1;
  auto metric = [p](const Array<float>& z) {  // log-probability of token 5 at the last position
    const std::size_t C = z.shape()[2];
    double m = -1e300, s = 0;
    for (std::size_t c = 0; c < C; ++c) m = std::max(m, double(z.data()[p * C + c]));
    for (std::size_t c = 0; c < C; ++c) s += std::exp(double(z.data()[p * C + c]) - m);
    return double(z.data()[p * C + 5]) - m - std::log(s);
  };
  interp::AttributeRequest r = attribute_request(interp::AttributionMethod::Eap);
  r.metric = metric;
  const interp::AttributionResult numeric = interp::attribute(l, r);
  r.metric_gradient = [p](const Array<float>& z) {
    const std::size_t C = z.shape()[2];
    Array<float> g = zeros<float>(z.shape());
    double m = -1e300, s = 0;
    for (std::size_t c = 0; c < C; ++c) m = std::max(m, double(z.data()[p * C + c]));
    for (std::size_t c = 0; c < C; ++c) s += std::exp(double(z.data()[p * C + c]) - m);
    for (std::size_t c = 0; c < C; ++c) g.data()[p * C + c] = float(-std::exp(double(z.data()[p * C + c]) - m) / s);
    g.data()[p * C + 5] += 1;
    return g;
  };
  const interp::AttributionResult exact = interp::attribute(l, r);
  CHECK(exact.custom_metric);
  REQUIRE(exact.edges.size() == numeric.edges.size());
  double largest = 0;
  for (std::size_t i = 0; i < exact.edges.size(); ++i) {
    CHECK(numeric.edges[i].score == doctest::Approx(exact.edges[i].score).epsilon(1e-2).scale(1e-2));
    largest = std::max(largest, std::abs(exact.edges[i].score));
  }
  CHECK(largest > 1e-2);
}

TEST_CASE("path patching: from a head straight to the logits of one layer, it is activation patching") {
  model::LoadedModel l = random_model({"model.layers=1", "model.attn_only=true"});
  const interp::PatchingResult patched = activation_patching(l);
  for (std::size_t h = 0; h < 2; ++h) {
    interp::PathPatchRequest r;
    r.clean = ids(kClean), r.corrupt = ids(kCorrupt), r.ids = true;
    r.answer = "5", r.wrong = "3";
    r.sender = {0, h};
    const interp::PathPatchResult p = interp::path_patch(l, r);
    REQUIRE(p.receivers.size() == 1);  // no later layer: the logits alone
    CHECK(interp::receiver_name(p.receivers[0]) == "logits");
    CHECK(p.restored[0] == doctest::Approx(patched.heads[0][h].restored).epsilon(1e-4).scale(1));
    CHECK(p.restored_all == doctest::Approx(p.restored[0]).epsilon(1e-9).scale(1));
  }
}

TEST_CASE("path patching: receivers are every later head's q, k, v and the logits, and bad ones are refused") {
  model::LoadedModel l = random_model({"model.layers=2", "model.attn_only=true"});
  interp::PathPatchRequest r;
  r.clean = ids(kClean), r.corrupt = ids(kCorrupt), r.ids = true;
  r.answer = "5", r.wrong = "3";
  r.sender = {0, 1};
  const interp::PathPatchResult p = interp::path_patch(l, r);
  REQUIRE(p.receivers.size() == 2 * 3 + 1);
  CHECK(interp::receiver_name(p.receivers[0]) == "1.0<q>");
  CHECK(interp::receiver_name(p.receivers[5]) == "1.1<v>");
  double moved = 0;
  for (double x : p.restored) {
    CHECK(std::isfinite(x));
    moved += std::abs(x);
  }
  CHECK(moved > 1e-3);
  r.receivers = {{0, 0, "q"}};  // not after the sender's layer
  CHECK_THROWS_WITH_AS(interp::path_patch(l, r), doctest::Contains("receivers[0]"), ValueError);
  r.receivers = {{1, 0, "x"}};
  CHECK_THROWS_WITH_AS(interp::path_patch(l, r), doctest::Contains("receivers[0]"), ValueError);
  r.receivers = {};
  r.sender = {0, 2};
  CHECK_THROWS_WITH_AS(interp::path_patch(l, r), doctest::Contains("sender"), ValueError);
}

TEST_CASE("lens: direct logit attribution adds up to the logit difference, and the last stage is the model's prediction") {
  for (const char* norm_first : {"true", "false"}) {
    CAPTURE(norm_first);
    model::LoadedModel l = random_model({"model.layers=2", "model.d_ff=64", std::string("model.norm_first=") + norm_first});
    interp::LensRequest r;
    r.input = ids(kClean), r.ids = true;
    const interp::LensResult lens = interp::logit_lens(l, r);
    REQUIRE(lens.stages == std::vector<std::string>{"embed", "blocks.0", "blocks.1"});
    REQUIRE(lens.top.size() == 3);
    const Array<float> logits = l.model->logits(data::ids_row(*l.task, kClean, "row")).value();
    const std::size_t C = logits.shape()[2], p = lens.position;
    CHECK(p == kClean.size() - 1);
    const double diff = double(logits.data()[p * C + std::size_t(lens.answer)]) - double(logits.data()[p * C + std::size_t(lens.wrong)]);
    CHECK(diff >= 0);  // the defaults: the most likely class against the second
    CHECK(lens.stage_diff.back() == doctest::Approx(diff).epsilon(1e-5));
    CHECK(lens.top.back()[p][0].id == lens.answer);
    if (std::string(norm_first) == "false") {
      CHECK_FALSE(lens.dla);  // post-LN: no linear path from a write to the logits
      CHECK(lens.contributions.empty());
      continue;
    }
    REQUIRE(lens.dla);
    double total = 0;
    for (auto& [name, value] : lens.contributions) total += value;
    CHECK(total == doctest::Approx(diff).epsilon(1e-4));
    CHECK(lens.logit_diff == doctest::Approx(diff).epsilon(1e-5));
    REQUIRE(lens.heads.size() == 2);
    CHECK(lens.contributions.front().first == "embed");
  }
}

}  // namespace qkv
