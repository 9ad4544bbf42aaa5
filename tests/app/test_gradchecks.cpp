// qkv gradcheck: every op, layer and model passes its float64 gradient check; --list and --only.
#include <doctest/doctest.h>

#include "app/gradchecks.hpp"
#include "train/train_fixtures.hpp"

TEST_CASE("qkv gradcheck: every op, layer and model passes its float64 gradient check") {
  auto results = qkv::app::run_layer_gradchecks();
  CHECK(results.size() == qkv::app::gradcheck_suite().size());
  CHECK(results.size() >= 30);
  for (auto& r : results) {
    INFO(r.name << ": worst error " << r.worst_error << " (" << r.worst_ratio << " of tolerance)");
    CHECK(r.ok);
    CHECK(r.worst_ratio <= 1.0);
  }
}

TEST_CASE("qkv gradcheck: --list names ops, layers and models - --only selects by substring or glob") {
  std::string out;
  REQUIRE(qkv::test::run_command(std::string(QKV_CLI_PATH) + " gradcheck --list", &out) == 0);
  for (const char* name : {"op     softmax", "op     cross_entropy (ignore_index, label smoothing 0.1)", "op     rope",
                           "op     dropout (p 0.3, a fixed mask)", "layer  MultiHeadAttention cross fused",
                           "model  DecoderModel (rope, tied embeddings, attention only)"})
    CHECK_MESSAGE(out.find(name) != std::string::npos, name);
  REQUIRE(qkv::test::run_command(std::string(QKV_CLI_PATH) + " gradcheck --only 'scaled_dot*causal*'", &out) == 0);
  CHECK(out.find("all passed: 2 checked") != std::string::npos);
  REQUIRE(qkv::test::run_command(std::string(QKV_CLI_PATH) + " gradcheck --only Decoder", &out) == 0);
  CHECK(out.find("TransformerDecoderLayer (pre-LN)") != std::string::npos);
  CHECK(out.find("DecoderModel (learned positions)") != std::string::npos);
  CHECK(out.find("EncoderModel") == std::string::npos);
  CHECK(qkv::test::run_command(std::string(QKV_CLI_PATH) + " gradcheck --only nothing-like-this", &out) == 2);
  CHECK(out.find("selects no check") != std::string::npos);
}
