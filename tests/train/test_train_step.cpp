// One training step on its own, the training state's checkpoint round trip, and the
// data-parallel object of a single process (every call the identity).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/dist/data_parallel.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/train/train_state.hpp"
#include "qkv/train/train_step.hpp"
#include "train/train_fixtures.hpp"

namespace qkv {

TEST_CASE("count_correct: argmax hits over the scored rows only, and logits that do not match the targets throw") {
  // (1, 3, 4) logits: rows 0 and 2 scored, row 1 ignored (its argmax would be a hit).
  Array<float> logits = Array<float>::from_shape({1, 3, 4});
  const float rows[3][4] = {{0, 5, 1, 2}, {9, 0, 0, 0}, {3, 1, 4, 0}};
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t v = 0; v < 4; ++v) logits.data()[r * 4 + v] = rows[r][v];
  IndexArray targets = IndexArray::from_shape({1, 3});
  targets.data()[0] = 1, targets.data()[1] = data::kIgnore, targets.data()[2] = 0;
  double correct = 0, counted = 0;
  train::count_correct(logits, targets, correct, counted);
  CHECK(counted == 2);
  CHECK(correct == 1);  // row 0 hits (1), row 2 misses (argmax 2, target 0)
  IndexArray two = IndexArray::from_shape({1, 2});
  two.fill(0);
  CHECK_THROWS_WITH_AS(train::count_correct(logits, two, correct, counted),
                       doctest::Contains("do not hold a row of V = 4 for each of the 2 targets"), ShapeError);
}

TEST_CASE("scored_logits: a masked encoder scores its masked positions alone, with the loss and gradients of every position") {
  const config::Config cfg = test::tiny_config(test::temp_dir("scored_logits"), {"model.arch=encoder", "task.name=grammar",
                                                                                  "task.objective=masked", "task.length=32"});
  data::Dataset data(std::shared_ptr<data::Task>(data::make_task(cfg.task)), 1, 16);
  Generator gen(2);
  auto model = model::make_model(cfg, data.task(), gen);
  const data::Batch batch = data.next_train(16);
  std::size_t scored = 0;
  for (std::size_t i = 0; i < batch.targets.size(); ++i) scored += batch.targets.data()[i] != data::kIgnore;
  REQUIRE(scored > 0);
  REQUIRE(scored < batch.targets.size() / 2);
  auto loss_and_grads = [&](const model::ScoredLogits& s) {
    Variable<float> loss = cross_entropy(s.logits, s.targets, data::kIgnore);
    loss.backward();
    std::vector<Array<float>> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad()), p.zero_grad();
    return std::make_pair(double(loss.item()), grads);
  };
  const model::ScoredLogits some = model->scored_logits(batch);
  CHECK(some.logits.shape() == Shape{scored, data.task().num_classes()});
  CHECK(some.targets.size() == scored);
  const auto [loss_some, grads_some] = loss_and_grads(some);
  const auto [loss_all, grads_all] = loss_and_grads(model->model::TaskModel::scored_logits(batch));
  CHECK(loss_some == doctest::Approx(loss_all).epsilon(1e-6));
  double worst = 0, largest = 0;
  for (std::size_t k = 0; k < grads_all.size(); ++k)
    for (std::size_t i = 0; i < grads_all[k].size(); ++i) {
      worst = std::max(worst, double(std::abs(grads_some[k].data()[i] - grads_all[k].data()[i])));
      largest = std::max(largest, double(std::abs(grads_all[k].data()[i])));
    }
  CHECK(largest > 0);
  CHECK(worst <= 1e-5 * largest);
  // With the model's output hooked the hook sees every position: the whole logits again.
  const Shape whole{batch.targets.shape()[0], batch.targets.shape()[1], data.task().num_classes()};
  nn::HookHandle handle = model->module().add_forward_hook([](const Variable<float>& y) { return y; });
  CHECK(model->scored_logits(batch).logits.shape() == whole);
  model->module().remove_forward_hook(handle);
  handle = model->module().add_forward_hook("head", [](const Variable<float>& y) { return y; });
  CHECK(model->scored_logits(batch).logits.shape() == whole);
  model->module().remove_forward_hook(handle);
  CHECK(model->scored_logits(batch).logits.shape() == Shape{scored, data.task().num_classes()});
}

TEST_CASE("train_step: forward, backward, clip and update: the loss falls, a NaN stops before any update") {
  const config::Config cfg = test::tiny_config(test::temp_dir("train_step"));
  auto task = data::make_task(cfg.task);
  data::Dataset data(std::shared_ptr<data::Task>(std::move(task)), 1, 16);
  Generator gen(1);
  auto model = model::make_model(cfg, data.task(), gen);
  auto opt = optim::make_optimizer(model->module(), cfg.optimizer);
  dist::Comm& alone = dist::world();
  dist::DataParallel dp(alone);
  train::StepOptions o{0.0, 1.0, true, 1, kernels::Precision::Float32, {}};
  int called = 0;
  o.after_backward = [&] { ++called; };
  const data::Batch batch = data.next_train(32);
  train::StepResult first = train_step(*model, batch, *opt, o, dp);
  CHECK(std::string(first.diverged).empty());
  CHECK(called == 1);
  CHECK(first.counted == 32 * 8);
  CHECK(first.grad_norm > 0);
  double last = first.loss;
  for (int i = 0; i < 30; ++i) last = train_step(*model, batch, *opt, o, dp).loss;
  CHECK(last < 0.5 * first.loss);  // the same batch 30 more times: it is being learned
  CHECK(opt->steps() == 31);

  // A non-finite loss: no update, no step counted.
  const auto before = model->module().state_dict();
  model->parameters().front().value().data()[0] = NAN;
  train::StepResult bad = train_step(*model, batch, *opt, o, dp);
  CHECK(std::string(bad.diverged) == "loss");
  CHECK(opt->steps() == 31);
  CHECK(std::isnan(model->parameters().front().value().data()[0]));
  CHECK(test::bitwise_equal(model->module().state_dict()[1].second, before[1].second));
  autograd::Tape::current().clear();
}

TEST_CASE("TrainState: save and load through a checkpoint give every field back") {
  train::TrainState s;
  s.step = 1234, s.data_position = 567890, s.dropout_rng = {11, 22};
  s.best = {0.5, 0.9, 0.7};
  s.last_eval.token_accuracy = 0.8;
  s.steps_to_target = 1000, s.train_loss_sum = 3.25, s.train_loss_steps = 7, s.train_correct = 40, s.train_counted = 50;
  io::Checkpoint c;
  s.save(c);
  CHECK(c.step == 1234);
  REQUIRE(c.scalars.size() == 10);
  CHECK(c.scalars[0].first == "data_position");  // the file's attribute names and order
  const train::TrainState back = train::TrainState::load(c, "x.h5");
  CHECK(back.step == s.step);
  CHECK(back.data_position == s.data_position);
  CHECK(back.dropout_rng == s.dropout_rng);
  CHECK(back.best.loss == 0.5);
  CHECK(back.best.token_accuracy == 0.9);
  CHECK(back.best.sequence_accuracy == 0.7);
  CHECK(back.last_eval.token_accuracy == 0.8);
  CHECK(std::isnan(back.last_eval.loss));
  CHECK(back.steps_to_target == 1000);
  CHECK(back.train_loss_sum == 3.25);
  CHECK(back.train_loss_steps == 7);
  CHECK(back.train_correct == 40);
  CHECK(back.train_counted == 50);
  c.scalars.pop_back();
  CHECK_THROWS_WITH_AS(train::TrainState::load(c, "x.h5"), "x.h5: /train has no attribute 'last_eval_token_accuracy'",
                       io::IoError);
  c.rng.clear();
  CHECK_THROWS_WITH_AS(train::TrainState::load(c, "x.h5"), doctest::Contains("no /rng/dropout"), io::IoError);
}

TEST_CASE("DataParallel alone: sums, flags and gradients pass through unchanged, parameters in sync") {
  dist::Comm single;
  dist::DataParallel dp(single);
  CHECK(dp.size() == 1);
  double v[2] = {1.5, -2};
  dp.sum(v, 2);
  CHECK(v[0] == 1.5);
  CHECK(v[1] == -2);
  CHECK(dp.any(true));
  CHECK_FALSE(dp.any(false));
  Variable<float> p(full<float>({3}, 1.0f), true);
  p.accumulate_grad(full<float>({3}, 0.25f));
  dp.average_gradients({p});
  CHECK(p.grad()(1) == 0.25f);
  nn::Linear<float> lin(2, 2);
  CHECK(dp.check_in_sync(lin).differing_rank == 0);
  CHECK(dist::parameter_checksum(lin) != 0);
  CHECK(dp.seconds() == 0.0);
}

}  // namespace qkv
