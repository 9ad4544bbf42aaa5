// qkv fill, and the instruments on a masked grammar model, end to end through the command.
#include <doctest/doctest.h>

#include "reliability/process.hpp"
#include "test_util.hpp"

using namespace qkv;

TEST_CASE("cli fill: the fills of every mask, errors for text without one and for models without masks") {
  const std::string root = test::temp_dir("cli_fill");
  const std::vector<std::string> tiny = {"--quiet", "--threads", "1", "--set", "model.d_model=32", "--set", "model.layers=1",
                                         "--set", "model.d_ff=64", "--set", "train.steps=20", "--set", "schedule.warmup_steps=2",
                                         "--set", "train.eval_every=10", "--set", "task.eval_size=32"};
  auto train = [&](const std::string& config, const std::string& out) {
    std::vector<std::string> args = {"train", std::string(QKV_SOURCE_DIR) + "/configs/" + config, "--out", root + "/" + out};
    args.insert(args.end(), tiny.begin(), tiny.end());
    auto r = test::run_process(test::qkv_command(args), 120);
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
    return root + "/" + out + "/last.h5";
  };
  const std::string masked = train("grammar_zh.yaml", "masked"), causal = train("grammar_zh_decoder.yaml", "causal");

  auto r = test::run_process(test::qkv_command({"fill", masked, "--text", "我爱吃[MASK]果", "--top-k", "3"}));
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("mask 1 (position 3):") != std::string::npos);
  CHECK(r.out.find("most likely: 我爱吃") != std::string::npos);
  auto two = test::run_process(test::qkv_command({"fill", masked, "--text", "猫喜欢追逐__鼠__", "--mask-text", "__"}));
  REQUIRE_MESSAGE(two.exit_code == 0, two.describe());
  CHECK(two.out.find("mask 2 (position 7):") != std::string::npos);

  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const Case& c : {Case{{"fill", masked, "--text", "我爱吃苹果"}, "--text: no [MASK] in '我爱吃苹果'"},
                        Case{{"fill", masked, "--text", "我爱吃[MASK]果", "--mask-text", ""}, "--mask-text: empty"},
                        Case{{"fill", causal, "--text", "我爱吃[MASK]果"}, "trained without masks (task.objective: causal)"},
                        Case{{"fill", masked, "--text", "我爱吃[MASK]披萨"}, "披"},
                        Case{{"fill", masked, "--text", "[MASK]", "--top-k", "0"}, "--top-k"}}) {
    CAPTURE(c.expect);
    auto e = test::run_process(test::qkv_command(c.args));
    CHECK_MESSAGE(e.exit_code == 2, e.describe());
    CHECK_MESSAGE(e.err.find(c.expect) != std::string::npos, e.describe());
  }
  // The instruments read the sentence without its padding: 吃 is token 2 of 6.
  auto ex = test::run_process(test::qkv_command({"explain", masked, "--text", "我爱吃苹果", "--query", "2"}));
  REQUIRE_MESSAGE(ex.exit_code == 0, ex.describe());
  CHECK(ex.out.find("query 2 '吃'; tokens: 0:'我' 1:'爱' 2:'吃' 3:'苹' 4:'果' 5:'。'\n") != std::string::npos);
  CHECK(ex.out.find("<pad>") == std::string::npos);
  auto help = test::run_process(test::qkv_command({"fill", "--help"}));
  CHECK(help.out.find("to have the characters [MASK] themselves in the text") != std::string::npos);
}
