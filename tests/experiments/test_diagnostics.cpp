// The attention diagnostics the experiments rely on, against values worked out by hand.
#include <doctest/doctest.h>

#include <cmath>

#include "qkv/config/config.hpp"
#include "qkv/tensor/random.hpp"
#include "qkv/train/diagnostics.hpp"
#include "qkv/model/evaluate.hpp"
#include "qkv/model/task_model.hpp"

using namespace qkv;

namespace {
// (1, H, 2, 3) weights from a flat list.
Array<float> maps(std::size_t H, const std::vector<float>& v) {
  Array<float> w = Array<float>::from_shape({1, H, 2, 3});
  std::copy(v.begin(), v.end(), w.data());
  return w;
}
}  // namespace

TEST_CASE("diagnostics: entropy and largest weight of uniform, one-hot and mixed rows") {
  const float u = 1.0f / 3;
  auto s = train::attention_stats(maps(1, {u, u, u, 1, 0, 0}));
  CHECK(s.entropy == doctest::Approx((std::log(3.0) + 0.0) / 2).epsilon(1e-6));
  CHECK(s.max_weight == doctest::Approx((u + 1.0) / 2).epsilon(1e-6));
  s = train::attention_stats(maps(1, {0.5f, 0.25f, 0.25f, 0, 1, 0}));
  CHECK(s.entropy == doctest::Approx((0.5 * std::log(2.0) + 0.5 * std::log(4.0)) / 2).epsilon(1e-6));
  CHECK(s.max_weight == doctest::Approx(0.75).epsilon(1e-6));
}

TEST_CASE("diagnostics: fully masked rows do not count") {
  auto s = train::attention_stats(maps(1, {0, 0, 0, 0, 1, 0}));
  CHECK(s.entropy == doctest::Approx(0.0));
  CHECK(s.max_weight == doctest::Approx(1.0));
}

TEST_CASE("diagnostics: head redundancy is the mean pairwise cosine of the heads' maps") {
  // Identical heads: 1. Heads with disjoint support: 0.
  CHECK(train::head_redundancy(maps(2, {1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0})) == doctest::Approx(1.0));
  CHECK(train::head_redundancy(maps(2, {1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1})) == doctest::Approx(0.0));
  // Three heads: pairs (0,1) identical, (0,2) and (1,2) cosine of one-hot vs uniform maps.
  const float u = 1.0f / 3;
  const double c = (2 * u) / (std::sqrt(2.0) * std::sqrt(6 * u * u));  // <onehot,uniform>/(|a||b|)
  const double r = train::head_redundancy(maps(3, {1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, u, u, u, u, u, u}));
  CHECK(r == doctest::Approx((1 + 2 * c) / 3).epsilon(1e-6));
  CHECK(std::isnan(train::head_redundancy(maps(1, {1, 0, 0, 0, 1, 0}))));
}

TEST_CASE("diagnostics: score variance is the variance of q . k over examples, heads and pairs") {
  // One head, two queries, two keys: scores 1, 3, 2, 0; mean 1.5, E[s^2] 3.5, variance 1.25.
  Array<float> q = Array<float>::from_shape({1, 1, 2, 2}), k = Array<float>::from_shape({1, 1, 2, 2});
  const float qv[] = {1, 0, 0, 2}, kv[] = {1, 1, 3, 0};
  std::copy(qv, qv + 4, q.data());
  std::copy(kv, kv + 4, k.data());
  CHECK(train::score_variance(q, k) == doctest::Approx(1.25));
  // Unit-variance independent components: Var(q . k) = D (the footnote of Vaswani et al.).
  Generator gen(3);
  for (std::size_t D : {4, 64}) {
    Array<float> a = Array<float>::from_shape({8, 2, 16, D}), b = Array<float>::from_shape({8, 2, 16, D});
    for (auto* arr : {&a, &b})
      for (std::size_t i = 0; i < arr->size(); ++i) arr->data()[i] = float(gen.normal());
    CHECK(train::score_variance(a, b) == doctest::Approx(double(D)).epsilon(0.15));
  }
  CHECK_THROWS_WITH_AS(train::score_variance(q, Array<float>::from_shape({1, 1, 2, 3})),
                       doctest::Contains("score_variance: q (1, 1, 2, 2) and k (1, 1, 2, 3)"), ShapeError);
}

TEST_CASE("diagnostics and evaluation: any micro-batch size gives the same statistics to rounding, and eval_batch_size is the micro-batch") {
  config::Config cfg = config::parse_config(
      "{}", "diagnostics.yaml",
      {"model.arch=decoder", "model.d_model=32", "model.heads=4", "model.layers=2", "model.d_ff=64",
       "model.dropout=0.1", "task.name=induction", "task.vocab=8", "task.length=16", "task.eval_size=40",
       "train.batch_size=12", "train.accumulate=3"});
  CHECK(model::eval_batch_size(cfg) == 4);
  std::shared_ptr<const data::Task> task = data::make_task(cfg.task);
  Generator gen(3);
  auto model = model::make_model(cfg, *task, gen);
  const data::Dataset data(task, cfg.seed, cfg.task.eval_size);
  const data::Batch& eval = data.eval_set();
  REQUIRE(eval.inputs.shape()[0] == 40);

  model->module().train();
  const auto whole = train::attention_diagnostics(*model, eval, 30, 30);
  CHECK(model->module().is_training());  // the mode is restored
  REQUIRE(whole.size() == 2);
  for (std::size_t chunk : {1, 4, 7, 64}) {
    CAPTURE(chunk);
    const auto split = train::attention_diagnostics(*model, eval, 30, chunk);
    REQUIRE(split.size() == whole.size());
    for (std::size_t l = 0; l < whole.size(); ++l) {
      CHECK(split[l].name == whole[l].name);
      // The sums are added in example order whatever the split; only the forward pass's rounding
      // may differ (OpenBLAS chooses its kernel by the matrix sizes, so a row's product can round
      // differently in a batch of 4 than in one of 30).
      CHECK(split[l].stats.entropy == doctest::Approx(whole[l].stats.entropy).epsilon(1e-6));
      CHECK(split[l].stats.max_weight == doctest::Approx(whole[l].stats.max_weight).epsilon(1e-6));
      CHECK(split[l].redundancy == doctest::Approx(whole[l].redundancy).epsilon(1e-6));
      CHECK(split[l].qk_var == doctest::Approx(whole[l].qk_var).epsilon(1e-6));
    }
  }
  for (const auto& d : whole) {
    CHECK(d.stats.entropy > 0);
    CHECK(d.stats.max_weight > 0);
    CHECK(d.stats.max_weight <= 1);
    CHECK(std::abs(d.redundancy) <= 1);
    CHECK(d.qk_var > 0);
  }
  // Only the first n examples count: 30 differ from 40.
  CHECK(train::attention_diagnostics(*model, eval, 40, 4)[0].stats.entropy != whole[0].stats.entropy);

  // evaluate: the loss is a mean per chunk in float, added in double, so the chunking moves it
  // by rounding only.
  const model::EvalMetrics all = model::evaluate(*model, eval, 40);
  for (std::size_t chunk : {1, 4, 7}) {
    CAPTURE(chunk);
    const model::EvalMetrics m = model::evaluate(*model, eval, chunk);
    CHECK(m.loss == doctest::Approx(all.loss).epsilon(1e-6));
    CHECK(m.token_accuracy == doctest::Approx(all.token_accuracy));
    CHECK(m.sequence_accuracy == doctest::Approx(all.sequence_accuracy));
  }
  CHECK(model->module().is_training());
}
