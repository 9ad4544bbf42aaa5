// Language models from the command line: train a tiny decoder on a generated corpus, evaluate it
// (nats/token, bits/char, perplexity on validation and test), generate text (deterministic per
// seed, the cache or not), and every bad input a clear error with its exit status and nothing
// written.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "reliability/process.hpp"
#include "train/train_fixtures.hpp"

namespace qkv {
namespace fs = std::filesystem;
namespace {

test::ProcessResult qkv(std::vector<std::string> args) {
  args.insert(args.begin(), QKV_CLI_PATH);
  return test::run_process(args, 120);
}

// A corpus with Chinese and English lines, and a tiny char-level decoder trained on it.
struct Trained {
  std::string dir, corpus, config, checkpoint;
};

// One per test case (test cases run as separate processes, possibly at once).
Trained trained(const std::string& name, const std::string& model_extra = "", const std::string& task_extra = "") {
  {
    Trained r;
    r.dir = test::temp_dir("lm_cli_" + name);
    r.corpus = r.dir + "/corpus.txt";
    {
      std::ofstream f(r.corpus);
      for (int i = 0; i < 300; ++i) f << "我爱吃苹果。猫喜欢追逐老鼠。the cat chases the mouse " << i % 10 << ".\n";
    }
    r.config = r.dir + "/lm.yaml";
    std::ofstream(r.config) << "model: {arch: decoder, d_model: 32, heads: 2, layers: 2, d_ff: 64, positional: rope" + model_extra + "}\n"
                               "task: {name: text, path: " + r.corpus + ", length: 32, eval_size: 16" + task_extra + "}\n"
                               "optimizer: {lr: 0.003}\nschedule: {warmup_steps: 5}\n"
                               "train: {steps: 60, batch_size: 16, eval_every: 30, checkpoint_every: 30, threads: 1}\n"
                               "run: {out: " + r.dir + "/run}\n";
    const auto res = qkv({"train", r.config, "--quiet"});
    REQUIRE_MESSAGE(res.exit_code == 0, res.describe());
    r.checkpoint = r.dir + "/run/last.h5";
    return r;
  }
}

}  // namespace

TEST_CASE("language model cli: eval reports nats/token, bits per char and perplexity on validation and test") {
  const Trained t = trained("eval");
  const auto res = qkv({"eval", t.checkpoint});
  REQUIRE_MESSAGE(res.exit_code == 0, res.describe());
  CHECK(res.out.find("loss (nats/token)") != std::string::npos);
  CHECK(res.out.find("bits/char") != std::string::npos);
  CHECK(res.out.find("perplexity") != std::string::npos);
  CHECK(res.out.find("validation") != std::string::npos);
  CHECK(res.out.find("test") != std::string::npos);
  // The vocabulary is in the checkpoint: the corpus moved away, generation still works.
  fs::rename(t.corpus, t.corpus + ".moved");
  const auto gen = qkv({"generate", t.checkpoint, "--prompt", "我爱", "--max-tokens", "20", "--seed", "3"});
  REQUIRE_MESSAGE(gen.exit_code == 0, gen.describe());
  CHECK(gen.out.rfind("我爱", 0) == 0);
  CHECK(gen.err.find("tokens/s") != std::string::npos);
}

TEST_CASE("language model cli: eval --train adds the training set, which a model trained on 8 windows fits best") {
  const Trained t = trained("eval_train", "", ", train_size: 8");
  const auto res = qkv({"eval", t.checkpoint, "--train"});
  REQUIRE_MESSAGE(res.exit_code == 0, res.describe());
  CHECK(res.out.find("8 train, 16 validation and 16 test examples") != std::string::npos);
  // The rows read train, validation, test: 60 steps on a fixed set of 8 windows fit them best.
  std::istringstream lines(res.out);
  std::string line;
  double train = 0, val = 0, test = 0;
  bool header = false;
  while (std::getline(lines, line)) {
    if (line.find("train") != std::string::npos && line.find("validation") != std::string::npos &&
        line.find("test") != std::string::npos && line.find("examples") == std::string::npos)
      header = line.find("train") < line.find("validation") && line.find("validation") < line.find("test");
    if (line.find("loss (nats/token)") != std::string::npos)
      std::istringstream(line.substr(line.find(')') + 1)) >> train >> val >> test;
  }
  CHECK(header);
  CHECK(train > 0);
  CHECK(train < val);
  CHECK(train < test);
}

TEST_CASE("language model cli: generation is a function of the seed, and the KV cache does not change it") {
  const std::string ck = trained("seed").checkpoint;
  const auto a = qkv({"generate", ck, "--prompt", "the cat", "--max-tokens", "60", "--seed", "7", "--top-k", "5"});
  const auto b = qkv({"generate", ck, "--prompt", "the cat", "--max-tokens", "60", "--seed", "7", "--top-k", "5", "--no-cache"});
  const auto c = qkv({"generate", ck, "--prompt", "the cat", "--max-tokens", "60", "--seed", "8", "--top-k", "5"});
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(a.out == b.out);
  CHECK(a.out != c.out);
  CHECK(a.err.find("KV cache") != std::string::npos);
  CHECK(b.err.find("no cache") != std::string::npos);
  const auto greedy = qkv({"generate", ck, "--prompt", "the cat", "--max-tokens", "40", "--temperature", "0"});
  const auto greedy2 = qkv({"generate", ck, "--prompt", "the cat", "--max-tokens", "40", "--temperature", "0", "--seed", "9"});
  CHECK(greedy.out == greedy2.out);
}

TEST_CASE("language model cli: model.value_dim sets the value width apart from d_k: shapes, cached generation, instruments") {
  // d_model 32, 2 heads: d_k = 16; values of width 24, so w_v is (2 * 24, 32) and w_o (32, 48).
  const std::string ck = trained("value_dim", ", value_dim: 24").checkpoint;
  const auto shapes = qkv({"inspect", ck});
  REQUIRE(shapes.exit_code == 0);
  CHECK(shapes.out.find("/model/blocks.0.attn.w_v.weight  float32 (48, 32)") != std::string::npos);
  CHECK(shapes.out.find("/model/blocks.0.attn.w_o.weight  float32 (32, 48)") != std::string::npos);
  CHECK(shapes.out.find("/model/blocks.0.attn.w_q.weight  float32 (32, 32)") != std::string::npos);
  const auto a = qkv({"generate", ck, "--prompt", "the cat", "--max-tokens", "30", "--temperature", "0"});
  const auto b = qkv({"generate", ck, "--prompt", "the cat", "--max-tokens", "30", "--temperature", "0", "--no-cache"});
  REQUIRE(a.exit_code == 0);
  CHECK(a.out == b.out);
  const auto ablate = qkv({"ablate", ck});
  CHECK_MESSAGE(ablate.exit_code == 0, ablate.describe());
  const auto explain = qkv({"explain", ck, "--example", "0", "--layer", "1", "--head", "0", "--query", "3"});
  CHECK_MESSAGE(explain.exit_code == 0, explain.describe());
  CHECK(explain.out.find("(Dv = 24)") != std::string::npos);
}

TEST_CASE("language model cli: bad generate arguments exit 2 with a message naming what is wrong") {
  const std::string ck = trained("bad_args").checkpoint;
  struct Case {
    std::vector<std::string> args;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{"--prompt", "the 🙂 cat"}, "🙂"},  // not in the vocabulary: named
      {{"--prompt", "a", "--max-tokens", "0"}, "--max-tokens"},
      {{"--prompt", "a", "--max-tokens", "50000000"}, "at most 1000000"},
      {{"--prompt", "a", "--temperature", "-1"}, "--temperature"},
      {{"--prompt", "a", "--top-p", "0"}, "--top-p: expected a number in (0, 1]"},
      {{"--prompt", "a", "--top-p", "1.5"}, "--top-p"},
      {{"--prompt", "a", "--top-k", "0"}, "--top-k"},
      {{"--prompt", "1 2 99999", "--ids"}, "expected token ids in [0,"},
      {{"--prompt", ""}, "empty"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"generate", ck};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = qkv(args);
    CAPTURE(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
  }
  // A checkpoint without a vocabulary (a sort model) needs --ids; an encoder cannot generate.
  const std::string dir = test::temp_dir("lm_cli_nontext");
  const auto sort = qkv({"train", std::string(QKV_SOURCE_DIR) + "/configs/sort.yaml", "--quiet", "--set", "train.steps=2",
                         "--set", "model.arch=decoder", "--set", "train.threads=1", "--set", "schedule.warmup_steps=0", "--out", dir});
  REQUIRE_MESSAGE(sort.exit_code == 0, sort.describe());
  auto r = qkv({"generate", dir + "/last.h5", "--prompt", "abc"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("has no vocabulary") != std::string::npos);
  r = qkv({"generate", dir + "/last.h5", "--prompt", "1 2 3", "--ids", "--max-tokens", "5"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("1 2 3 ", 0) == 0);
}

TEST_CASE("language model cli: bad corpora exit 2 naming the file, and create no run directory") {
  const Trained t = trained("bad_corpora");
  const std::string dir = test::temp_dir("lm_cli_bad");
  std::ofstream(dir + "/empty.txt");
  std::ofstream(dir + "/latin1.txt") << "ok\ncaf\xe9\n";
  fs::create_directories(dir + "/nothing");
  std::ofstream(dir + "/nothing/index.dat") << "binary";
  std::ofstream(dir + "/short.txt") << "too short\n";
  struct Case {
    std::string path;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {dir + "/missing.txt", "no such file or directory"},
      {dir + "/empty.txt", "empty"},
      {dir + "/nothing", "has no text files"},
      {dir + "/latin1.txt", "latin1.txt: not valid UTF-8 at byte 6"},
      {dir + "/short.txt", "fewer than one window"},
  };
  for (const Case& c : cases) {
    const std::string out = dir + "/run_" + std::to_string(&c - cases.data());
    const auto r = qkv({"train", t.config, "--quiet", "--set", "task.path=" + c.path, "--out", out});
    CAPTURE(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
  // A next-token task needs a causal model.
  const auto enc = qkv({"train", t.config, "--quiet", "--set", "model.arch=encoder", "--set",
                        "model.positional=learned", "--out", dir + "/enc"});
  CHECK(enc.exit_code == 2);
  CHECK(enc.err.find("needs arch decoder") != std::string::npos);
}

}  // namespace qkv
