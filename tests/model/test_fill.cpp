// Masked language models in the model layer: the encoder they need, padding no query attends,
// the rows instruments read from text (masks spelt in it), and fill_masks.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "qkv/autograd/tape.hpp"
#include "qkv/config/config.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/model/fill.hpp"
#include "qkv/model/task_model.hpp"

using namespace qkv;

namespace {

config::Config grammar(const std::string& arch, const std::string& objective = "masked") {
  return config::parse_config("{}", "g.yaml",
                              {"model.arch=" + arch, "model.d_model=32", "model.heads=2", "model.layers=1", "model.d_ff=64",
                               "task.name=grammar", "task.objective=" + objective, "task.length=32"});
}

}  // namespace

TEST_CASE("masked models: a masked task needs an encoder, and a decoder is refused naming model.arch") {
  const config::Config cfg = grammar("decoder");
  const auto task = data::make_task(cfg.task);
  Generator gen(1);
  CHECK_THROWS_WITH_AS(model::make_model(cfg, *task, gen), doctest::Contains("model.arch: task 'grammar' predicts masked tokens"),
                       ValueError);
  const config::Config ok = grammar("encoder");
  CHECK_NOTHROW(model::make_model(ok, *data::make_task(ok.task), gen));
}

TEST_CASE("masked models: padding changes nothing a sentence's tokens read (no query attends a pad key)") {
  const config::Config cfg = grammar("encoder");
  const auto task = data::make_task(cfg.task);
  Generator gen(3);
  auto m = model::make_model(cfg, *task, gen);
  m->module().eval();
  NoGradGuard no_grad;
  const data::Batch padded = static_cast<const data::GrammarTask&>(*task).analyse("他打碎了花瓶");
  const data::Batch trimmed = task->text_row("他打碎了花瓶", "--text");
  REQUIRE(padded.inputs.shape()[1] == 32);
  REQUIRE(trimmed.inputs.shape()[1] == 7);  // 他 打 碎 了 花 瓶 。
  REQUIRE(trimmed.words.shape()[1] == 7);
  REQUIRE(trimmed.relations.shape()[2] == 7);
  const Array<float> a = m->logits(padded).value(), b = m->logits(trimmed).value();
  const std::size_t V = a.shape()[2];
  double worst = 0;
  for (std::size_t t = 0; t < 7; ++t)
    for (std::size_t v = 0; v < V; ++v) worst = std::max(worst, double(std::abs(a(0, t, v) - b(0, t, v))));
  CHECK(worst < 1e-5);
}

TEST_CASE("masked models: text rows spell masks as [MASK] or as --mask-text, and fill_masks gives the softmax's top k") {
  const config::Config cfg = grammar("encoder");
  const auto task = data::make_task(cfg.task);
  Generator gen(5);
  auto m = model::make_model(cfg, *task, gen);
  const data::Batch row = task->text_row("我爱吃[MASK]果", "--text");
  const Index mask = task->mask_token();
  REQUIRE(row.inputs.shape()[1] == 6);  // 我 爱 吃 [MASK] 果 。
  CHECK(row.inputs(0, 3) == mask);
  CHECK(task->text_row("我爱吃__果", "--text", "__").inputs(0, 3) == mask);
  CHECK_THROWS_WITH_AS(task->text_row("我爱吃披萨", "--text"), doctest::Contains("--text: "), ValueError);

  const std::vector<model::Fill> fills = model::fill_masks(*m, *task, row, 4);
  REQUIRE(fills.size() == 1);
  CHECK(fills[0].position == 3);
  REQUIRE(fills[0].top.size() == 4);
  NoGradGuard no_grad;
  m->module().eval();
  const Array<float> logits = m->logits(row).value();
  const std::size_t V = logits.shape()[2];
  double top = -1e300, sum = 0;
  for (std::size_t v = 0; v < V; ++v) top = std::max(top, double(logits(0, 3, v)));
  for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(logits(0, 3, v)) - top);
  for (std::size_t r = 0; r < 4; ++r) {
    const auto [id, p] = fills[0].top[r];
    CHECK(p == doctest::Approx(std::exp(double(logits(0, 3, std::size_t(id))) - top) / sum).epsilon(1e-9));
    if (r) CHECK(p <= fills[0].top[r - 1].p);
  }
  const data::Batch none = task->text_row("我爱吃苹果", "--text");
  CHECK_THROWS_WITH_AS(model::fill_masks(*m, *task, none, 4), doctest::Contains("no mask"), ValueError);

  const config::Config causal = grammar("decoder", "causal");
  const auto causal_task = data::make_task(causal.task);
  auto d = model::make_model(causal, *causal_task, gen);
  CHECK_THROWS_WITH_AS(model::fill_masks(*d, *causal_task, causal_task->text_row("我爱吃苹果", "--text"), 4),
                       doctest::Contains("without masks"), ValueError);
}
