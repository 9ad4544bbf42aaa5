// One query step by step: the recomputed softmax matches the layer's own weights and output, masks
// are shown for causal layers, cross-attention reads the source.
#include <doctest/doctest.h>

#include <cmath>

#include "constructed.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/model/evaluate.hpp"

namespace qkv {

TEST_CASE("explain: the hand-set previous-token head's query 5 puts its weight on key 4, keys after 5 masked") {
  test::Constructed m = test::constructed_decoder();
  const data::Batch b = data::rows(test::previous_token_batch(4, m.T, m.V, 1), 2, 3);
  const interp::QueryExplanation e = interp::explain_query(*m.model, *m.task, b, 0, 0, 5);
  CHECK(e.kind == model::AttentionKind::Causal);
  REQUIRE(e.keys.size() == m.T);
  CHECK(e.q.size() == 20);
  CHECK(e.scale == doctest::Approx(1 / std::sqrt(20.0)));
  double total = 0;
  for (auto& k : e.keys) {
    CHECK(k.masked == (k.key > 5));
    if (k.masked) CHECK(k.weight == 0.0);
    total += k.weight;
    CHECK(k.scaled == doctest::Approx(k.raw * e.scale));
  }
  CHECK(total == doctest::Approx(1.0));
  REQUIRE(e.k.size() == m.T);  // k_j, as the studio draws them: s_j = q . k_j
  for (auto& k : e.keys) {
    double dot = 0;
    for (std::size_t d = 0; d < e.q.size(); ++d) dot += e.q[d] * e.k[k.key][d];
    CHECK(k.raw == doctest::Approx(dot));
  }
  CHECK(e.keys[4].weight > 0.99);
  CHECK(e.weight_error < 1e-5);
  CHECK(e.output_error < 1e-4);
  // the output is the value of key 4: its token's dimension is the largest
  const Index prev = b.inputs(0, 4);
  CHECK(std::max_element(e.output.begin(), e.output.begin() + m.V) - e.output.begin() == prev);

  const std::string text = interp::format_explanation(e, 4);
  CHECK(text.find("layer 0 (blocks.0.attn, causal self-attention), head 0, query 5") != std::string::npos);
  CHECK(text.find("masked") != std::string::npos);
  CHECK(text.find("1/sqrt(20)") != std::string::npos);
  CHECK(text.find("keys by weight") != std::string::npos);
  CHECK(text.find("check: these weights match") != std::string::npos);
  const std::string json = interp::explanation_json(e);
  CHECK(json.find("\"kind\":\"causal\"") != std::string::npos);
  CHECK(json.find("\"masked\":true") != std::string::npos);

  auto message = [&](std::size_t layer, std::size_t head, std::size_t query) {
    try {
      interp::explain_query(*m.model, *m.task, b, layer, head, query);
    } catch (const ValueError& err) {
      return std::string(err.what());
    }
    return std::string("no error");
  };
  CHECK(message(1, 0, 0).find("layer 1: the model has 1 attention layers (0..0)") != std::string::npos);
  CHECK(message(0, 2, 0).find("head 2: blocks.0.attn has 2 heads (0..1)") != std::string::npos);
  CHECK(message(0, 0, 16).find("query 16: blocks.0.attn reads 16 queries (0..15)") != std::string::npos);
}

TEST_CASE("explain: cross-attention takes its queries from the target and its keys from the source") {
  const config::Config cfg = config::parse_config(
      "{}", "s2s.yaml",
      {"model.arch=encoder_decoder", "model.d_model=16", "model.heads=2", "model.layers=1", "model.d_ff=32",
       "task.name=seq2seq_reverse", "task.vocab=6", "task.length=5", "task.eval_size=4"});
  std::shared_ptr<data::Task> task = data::make_task(cfg.task);
  Generator gen(3);
  auto model = model::make_model(cfg, *task, gen);
  model->module().eval();
  const data::Batch b = data::rows(task->examples(data::Split::Val, 1, 0, 2), 0, 1);
  const auto layers = model::attention_layers(*model);
  std::size_t cross = layers.size(), self_dec = layers.size();
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (model->attention_kind(*layers[l].second) == model::AttentionKind::Cross) cross = l;
    if (layers[l].first.find("decoder") != std::string::npos &&
        model->attention_kind(*layers[l].second) == model::AttentionKind::Causal)
      self_dec = l;
  }
  REQUIRE(cross < layers.size());
  REQUIRE(self_dec < layers.size());
  const interp::QueryExplanation e = interp::explain_query(*model, *task, b, cross, 1, 2);
  CHECK(e.kind == model::AttentionKind::Cross);
  CHECK(e.query_tokens[0] == "<bos>");
  CHECK(e.key_tokens.size() == 5);
  for (std::size_t j = 0; j < 5; ++j) CHECK(e.key_tokens[j] == std::to_string(b.inputs(0, j)));
  for (auto& k : e.keys) CHECK_FALSE(k.masked);
  CHECK(e.weight_error < 1e-5);
  CHECK(e.output_error < 1e-4);
  CHECK(interp::format_explanation(e).find("cross-attention: queries from the target") != std::string::npos);
  const interp::QueryExplanation d = interp::explain_query(*model, *task, b, self_dec, 0, 1);
  CHECK(d.keys[2].masked);
  CHECK_FALSE(d.keys[1].masked);
  CHECK(d.weight_error < 1e-5);
}

}  // namespace qkv
