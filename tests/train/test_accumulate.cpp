// Gradient accumulation: k micro-batches of b/k rows follow the trajectory of one batch of b
// (to float32 rounding), for an encoder and for a decoder language model on text.
#include <doctest/doctest.h>

#include <fstream>

#include "qkv/train/train_step.hpp"
#include "train/train_fixtures.hpp"

namespace qkv {
namespace {

// Parameters after `steps` steps of train_step with micro-batches of batch/accumulate, and the
// loss of every step.
std::vector<Array<float>> trained(const config::Config& cfg, std::size_t accumulate, int steps,
                                  std::vector<double>* losses = nullptr) {
  auto task = std::shared_ptr<data::Task>(data::make_task(cfg.task));
  data::Dataset data(task, cfg.seed, 8);
  Generator gen(1);
  auto model = model::make_model(cfg, *task, gen);
  auto opt = optim::make_optimizer(model->module(), cfg.optimizer);
  dist::Comm single;
  dist::DataParallel dp(single);
  train::StepOptions o{0.0, 1.0, true, accumulate, kernels::Precision::Float32, {}};
  for (int s = 0; s < steps; ++s) {
    const auto r = train::train_step(*model, data.next_train(cfg.train.batch_size), *opt, o, dp);
    REQUIRE(std::string(r.diverged).empty());
    if (losses) losses->push_back(r.loss);
  }
  // Not the key biases: their gradient is exactly 0 in exact arithmetic (softmax ignores a shift
  // of all scores), so what they get is rounding noise, which Adam scales up to steps of size lr
  // however the batch is split (the MPI equivalence test leaves them out for the same reason).
  std::vector<Array<float>> out;
  for (auto& [name, p] : model->module().named_parameters())
    if (name.find("w_k.bias") == std::string::npos) out.push_back(p.value());
  return out;
}

// The parameters under SGD with momentum (whose update is linear in the gradient, so the sum of
// the micro-batches' gradients shows to float32 rounding), and the losses under AdamW (whose
// normalisation magnifies rounding in near-zero gradients, so parameters drift by ~lr * 1e-2).
void same_trajectory(config::Config cfg) {
  std::vector<double> loss_one, loss_four;
  trained(cfg, 1, 8, &loss_one);
  trained(cfg, 4, 8, &loss_four);
  for (std::size_t s = 0; s < loss_one.size(); ++s) CHECK(loss_four[s] == doctest::Approx(loss_one[s]).epsilon(1e-5));
  cfg.optimizer.name = optim::OptimizerKind::SGD;
  cfg.optimizer.lr = 0.1, cfg.optimizer.momentum = 0.9, cfg.optimizer.weight_decay = 0;
  const auto one = trained(cfg, 1, 8), four = trained(cfg, 4, 8);
  REQUIRE(one.size() == four.size());
  double worst = 0;
  for (std::size_t i = 0; i < one.size(); ++i)
    for (std::size_t j = 0; j < one[i].size(); ++j) worst = std::max(worst, double(std::fabs(one[i].data()[j] - four[i].data()[j])));
  CHECK(worst < 1e-5);
  CHECK(worst > 0);  // micro-batches round differently: a real comparison, not the same computation
}

}  // namespace

TEST_CASE("accumulate: 4 micro-batches follow the trajectory of one batch (encoder on sort)") {
  same_trajectory(test::tiny_config(test::temp_dir("accumulate_enc")));
}

TEST_CASE("accumulate: 4 micro-batches follow the trajectory of one batch (decoder on text)") {
  const std::string dir = test::temp_dir("accumulate_lm");
  {
    std::ofstream f(dir + "/t.txt");
    for (int i = 0; i < 200; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog.\n";
  }
  auto cfg = test::tiny_config(dir, {"model.arch=decoder", "task.name=text", "task.path=" + dir + "/t.txt", "task.length=16",
                                     "model.positional=rope"});
  same_trajectory(cfg);
}

TEST_CASE("accumulate: 4 micro-batches follow the trajectory of one batch (masked encoder, unequal token counts)") {
  // Every row scores a different number of masked tokens: each micro-batch's loss must be
  // weighted by its share of the batch's scored tokens, not by 1/4.
  const std::string dir = test::temp_dir("accumulate_masked");
  same_trajectory(test::tiny_config(dir, {"model.arch=encoder", "task.name=grammar", "task.objective=masked",
                                          "task.length=32", "task.eval_size=64"}));
}

TEST_CASE("accumulate: the batch must split into whole micro-batches") {
  CHECK_THROWS_WITH_AS(test::tiny_config(test::temp_dir("accumulate_bad"), {"train.accumulate=5"}),
                       doctest::Contains("train.batch_size (32) must be divisible by train.accumulate (5)"), config::ConfigError);
}

}  // namespace qkv
