// Ablation against answers known in advance: in the hand-set model head 0 carries all the signal
// and head 1 nothing (its w_o columns are zero).
#include <doctest/doctest.h>

#include <cmath>

#include "constructed.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/interp/ablation.hpp"
#include "test_util.hpp"

namespace qkv {

TEST_CASE("ablation: removing the head that carries the signal breaks the model, removing the other changes nothing") {
  test::Constructed m = test::constructed_decoder();
  const data::Batch b = test::previous_token_batch(64, m.T, m.V, 5);
  const model::EvalMetrics intact = interp::ablated_metrics(*m.model, b, {}, interp::AblationMode::Zero);
  CHECK(intact.token_accuracy == doctest::Approx(1.0));
  const auto rows = interp::ablate_each(*m.model, b, interp::AblationMode::Zero);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].heads[0] == interp::HeadRef{0, 0});
  // without head 0 the model predicts the current token: right only where it repeats the last one
  std::size_t repeats = 0, scored = 0;
  for (std::size_t r = 0; r < 64; ++r)
    for (std::size_t t = 1; t < m.T; ++t) repeats += b.inputs(r, t) == b.inputs(r, t - 1), ++scored;
  CHECK(rows[0].metrics.token_accuracy == doctest::Approx(double(repeats) / double(scored)));
  CHECK(rows[0].metrics.loss > intact.loss + 1.0);
  // head 1 reaches the output through zero columns: its removal leaves every metric as it was
  CHECK(rows[1].metrics.loss == intact.loss);
  CHECK(rows[1].metrics.token_accuracy == intact.token_accuracy);

  // mean ablation of head 0 also breaks it (the mean value is the same for every query)
  const auto means = interp::head_means(*m.model, b);
  REQUIRE(means.size() == 1);
  CHECK(means[0].shape() == Shape{2, 20});
  const model::EvalMetrics mean0 = interp::ablated_metrics(*m.model, b, {{0, 0}}, interp::AblationMode::Mean, &means);
  CHECK(mean0.token_accuracy < 0.5);
  CHECK_THROWS_AS(interp::ablated_metrics(*m.model, b, {{0, 0}}, interp::AblationMode::Mean), ValueError);
}

TEST_CASE("ablation: zeroing a head through hook_z equals zeroing its columns of w_o") {
  test::Constructed m = test::constructed_decoder();
  const data::Batch b = test::previous_token_batch(8, m.T, m.V, 9);
  NoGradGuard no_grad;
  Array<float> ablated;
  {
    interp::HeadAblation a(*m.model, {{0, 0}}, interp::AblationMode::Zero);
    ablated = m.model->logits(b).value();
  }
  const Array<float> intact = m.model->logits(b).value();  // the hook is gone with the scope
  CHECK(!test::bitwise_equal(ablated, intact));
  StateDict<float> sd = m.model->module().state_dict();
  for (auto& [n, a] : sd)
    if (n == "blocks.0.attn.w_o.weight")
      for (std::size_t r = 0; r < a.shape()[0]; ++r)
        for (std::size_t c = 0; c < 20; ++c) a(r, c) = 0;
  m.model->module().load_state_dict(sd);
  const Array<float> cut = m.model->logits(b).value();
  double diff = 0;
  for (std::size_t i = 0; i < cut.size(); ++i) diff = std::max(diff, double(std::abs(cut.data()[i] - ablated.data()[i])));
  CHECK(diff < 1e-5);
}

TEST_CASE("ablation: head importance is zero for a head that reaches nothing, and pruning removes it first") {
  test::Constructed m = test::constructed_decoder();
  const data::Batch b = test::previous_token_batch(64, m.T, m.V, 11);
  // no head removed yet: |dL/dxi| of head 1 is exactly 0 (its output meets zero weights)
  const auto imp = interp::head_importance(*m.model, b, {}, interp::AblationMode::Zero);
  REQUIRE(imp.size() == 1);
  CHECK(imp[0][1] == 0.0);
  CHECK(imp[0][0] == doctest::Approx(1.0));  // normalised per layer: the only nonzero one is 1
  for (auto& p : m.model->parameters()) CHECK_FALSE(p.has_grad());  // cleared on the way out

  const data::Batch test_batch = test::previous_token_batch(64, m.T, m.V, 12);
  const auto curve = interp::prune_curve(*m.model, b, test_batch, interp::AblationMode::Zero);
  REQUIRE(curve.size() == 3);
  CHECK(curve[0].removed.empty());
  CHECK(curve[0].metrics.token_accuracy == doctest::Approx(1.0));
  REQUIRE(curve[1].removed.size() == 1);
  CHECK(curve[1].removed[0] == interp::HeadRef{0, 1});
  CHECK(curve[1].fraction == doctest::Approx(0.5));
  CHECK(curve[1].metrics.token_accuracy == doctest::Approx(1.0));
  CHECK(curve[2].fraction == doctest::Approx(1.0));
  CHECK(curve[2].metrics.token_accuracy < 0.5);
  CHECK_THROWS_AS(interp::prune_curve(*m.model, b, test_batch, interp::AblationMode::Zero, nullptr, 0), ValueError);
}

TEST_CASE("ablation: head lists are parsed against the model, and bad ones are named") {
  const std::vector<std::size_t> heads = {4, 2};
  const auto h = interp::parse_heads("0.1,1.*", heads);
  REQUIRE(h.size() == 3);
  CHECK(h[0] == interp::HeadRef{0, 1});
  CHECK(h[2] == interp::HeadRef{1, 1});
  CHECK(interp::head_name(h[1]) == "1.0");
  auto message = [&](const std::string& list) {
    try {
      interp::parse_heads(list, heads);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("2.0").find("no attention layer 2 (layers 0..1)") != std::string::npos);
  CHECK(message("1.2").find("attention layer 1 has no head 2 (heads 0..1)") != std::string::npos);
  CHECK(message("").find("empty") != std::string::npos);
  CHECK(message("0.1,0.1").find("listed twice") != std::string::npos);
  CHECK(message("zero").find("not LAYER.HEAD") != std::string::npos);
  CHECK(message("0.x").find("not LAYER.HEAD") != std::string::npos);
  CHECK(message("0.1,").find("not LAYER.HEAD") != std::string::npos);
}

TEST_CASE("ablation: restrict_to_relation scores a relation's tokens only, and names a bad relation") {
  test::Constructed m = test::constructed_role_encoder();
  const auto& task = static_cast<const data::GrammarTask&>(*m.task);
  data::Batch b = task.analyse("他打碎了花瓶");
  b.targets = b.inputs;  // every token scored, to see which stay
  const data::Batch verbs = interp::restrict_to_relation(task, b, "verb->object");
  std::vector<std::size_t> kept;
  for (std::size_t t = 0; t < verbs.targets.shape()[1]; ++t)
    if (verbs.targets(0, t) != data::kIgnore) kept.push_back(t);
  CHECK(kept == std::vector<std::size_t>{1});  // 打: the verb whose object is 花瓶
  CHECK(interp::restrict_to_relation(task, b, "verb-object").targets == verbs.targets);  // no '>' needed in a shell
  CHECK_THROWS_WITH_AS(interp::restrict_to_relation(task, b, "verb->objects"), doctest::Contains("did you mean 'verb->object'"),
                       ValueError);
  test::Constructed plain = test::constructed_decoder();
  CHECK_THROWS_WITH_AS(interp::restrict_to_relation(*plain.task, b, "verb->object"), doctest::Contains("has no gold relations"),
                       ValueError);
}

}  // namespace qkv
