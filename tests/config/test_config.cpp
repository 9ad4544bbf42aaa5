#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "qkv/config/config.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::config;

namespace {

// The message of the ConfigError that parsing throws, or "" if it parses.
// The memory a config may ask for in these tests (the qkv command passes the machine's).
constexpr std::size_t kMemoryBudget = std::size_t(64) << 30;

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "bad.yaml", overrides, kMemoryBudget);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

struct Case {
  const char* what;
  const char* yaml;
  std::vector<const char*> expect;  // substrings of the message
};

}  // namespace

TEST_CASE("config: defaults when every section is missing") {
  Config c = parse_config("{}", "empty-map.yaml");
  Config d;
  CHECK(c == d);
  CHECK(c.seed == 1);
  CHECK(c.model.arch == nn::Arch::Encoder);
  CHECK(c.model.d_model == 64);
  CHECK(c.model.attn.num_heads == 4);
  CHECK(c.model.attn.head_dim == 0);
  CHECK(c.model.norm_first);
  CHECK(c.task.name == "sort");
  CHECK(c.optimizer.name == optim::OptimizerKind::AdamW);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.schedule.name == optim::Schedule::Cosine);
  CHECK(c.train.steps == 2000);
  CHECK(c.train.diagnostics);
  CHECK(c.run.out == "runs/default");
  CHECK(c.source == "empty-map.yaml");
  CHECK_NOTHROW(validate(d));
}

TEST_CASE("config: a full file sets every key") {
  const char* text = R"(
seed: 12345678901234
model:
  arch: encoder_decoder
  d_model: 96
  heads: 3
  head_dim: 16
  layers: 3
  d_ff: 192
  dropout: 0.1
  attn_dropout: 0.05
  activation: relu
  norm_first: false
  positional: learned
  attention: composite
  scale: 1
task:
  name: recall
  vocab: 40
  length: 24
  pairs: 6
  queries: 2
  eval_size: 128
  train_size: 10000
optimizer:
  name: sgd
  lr: 0.05
  weight_decay: 0
  beta1: 0.8
  beta2: 0.95
  eps: 1.0e-6
  momentum: 0.9
  dampening: 0
  nesterov: true
  decay_bias_and_norm: yes
  clip_grad_norm: 0
schedule:
  name: step
  warmup_steps: 0
  step_size: 300
  min_lr: 1e-5
  gamma: 0.1
train:
  steps: 900
  batch_size: 16
  eval_every: 50
  checkpoint_every: 300
  log_every: 5
  target_accuracy: 0.99
  label_smoothing: 0.1
  threads: 2
  diagnostics: false
run:
  out: runs/full
)";
  Config c = parse_config(text, "full.yaml");
  CHECK(c.seed == 12345678901234ull);
  CHECK(c.model.arch == nn::Arch::EncoderDecoder);
  CHECK(c.model.d_model == 96);
  CHECK(c.model.attn.num_heads == 3);
  CHECK(c.model.attn.head_dim == 16);
  CHECK(c.model.layers == 3);
  CHECK(c.model.ff.hidden == 192);
  CHECK(c.model.dropout == 0.1);
  CHECK(c.model.attn.dropout == 0.05);
  CHECK(c.model.ff.activation == nn::Activation::Relu);
  CHECK(!c.model.norm_first);
  CHECK(c.model.positional == nn::Positional::Learned);
  CHECK(c.model.attn.impl == AttentionImpl::Composite);
  CHECK(c.model.attn.scale == 1.0);
  CHECK(c.task.name == "recall");
  CHECK(c.task.vocab == 40);
  CHECK(c.task.length == 24);
  CHECK(c.task.pairs == 6);
  CHECK(c.task.queries == 2);
  CHECK(c.task.eval_size == 128);
  CHECK(c.task.train_size == 10000);
  CHECK(c.optimizer.name == optim::OptimizerKind::SGD);
  CHECK(c.optimizer.lr == 0.05);
  CHECK(c.optimizer.weight_decay == 0.0);
  CHECK(c.optimizer.beta1 == 0.8);
  CHECK(c.optimizer.beta2 == 0.95);
  CHECK(c.optimizer.eps == 1e-6);
  CHECK(c.optimizer.momentum == 0.9);
  CHECK(c.optimizer.dampening == 0.0);
  CHECK(c.optimizer.nesterov);
  CHECK(c.optimizer.decay_bias_and_norm);
  CHECK(c.optimizer.clip_grad_norm == 0.0);
  CHECK(c.schedule.name == optim::Schedule::Step);
  CHECK(c.schedule.warmup_steps == 0);
  CHECK(c.schedule.step_size == 300);
  CHECK(c.schedule.min_lr == 1e-5);
  CHECK(c.schedule.gamma == 0.1);
  CHECK(c.train.steps == 900);
  CHECK(c.train.batch_size == 16);
  CHECK(c.train.eval_every == 50);
  CHECK(c.train.checkpoint_every == 300);
  CHECK(c.train.log_every == 5);
  CHECK(c.train.target_accuracy == 0.99);
  CHECK(c.train.label_smoothing == 0.1);
  CHECK(c.train.threads == 2);
  CHECK(!c.train.diagnostics);
  CHECK(c.run.out == "runs/full");

  SUBCASE("to_yaml round trip gives the same config, and is stable") {
    std::string y = to_yaml(c);
    Config back = parse_config(y, "resolved.yaml");
    CHECK(back == c);
    CHECK(to_yaml(back) == y);
  }
}

TEST_CASE("config: to_yaml writes every key and keeps awkward values exact") {
  Config c;
  c.optimizer.lr = 0.1 + 0.2;  // not a short decimal
  c.model.dropout = 1.0 / 3.0;
  c.seed = 18446744073709551615ull;
  c.run.out = "runs/with \"quotes\" and: colon #hash";
  c.task.program = "vocab a\n\tmax_len 2 \x01\n";  // a program's lines, written as JSON reads them too
  std::string y = to_yaml(c);
  CHECK(y.find("program: \"vocab a\\n\\u0009max_len 2 \\u0001\\n\"") != std::string::npos);
  for (const char* key : {"seed:", "arch:", "d_model:", "heads:", "head_dim:", "layers:", "d_ff:", "dropout:",
                          "attn_dropout:", "activation:", "norm_first:", "positional:", "attention:", "scale:",
                          "qk_init_gain:", "norm:", "program:", "vocab:", "length:", "pairs:", "queries:", "eval_size:", "train_size:", "lr:",
                          "weight_decay:", "beta1:", "beta2:", "eps:", "momentum:", "dampening:", "nesterov:",
                          "decay_bias_and_norm:", "clip_grad_norm:", "warmup_steps:", "step_size:", "min_lr:",
                          "gamma:", "steps:", "batch_size:", "eval_every:", "checkpoint_every:", "log_every:",
                          "target_accuracy:", "label_smoothing:", "threads:", "diagnostics:", "out:"})
    CHECK_MESSAGE(y.find(key) != std::string::npos, key);
  Config back = parse_config(y, "resolved.yaml");
  CHECK(back == c);
  CHECK(back.optimizer.lr == 0.1 + 0.2);
  CHECK(back.run.out == c.run.out);
  CHECK(back.task.program == c.task.program);
}

TEST_CASE("config: malformed files name file, line, key, expected and found") {
  // Every category: syntax, structure, unknown names, types, impossible values.
  const std::vector<Case> cases = {
      {"yaml syntax", "model:\n  heads: [1, 2\n", {"bad.yaml:", "YAML syntax error"}},
      {"yaml syntax, bad indent", "model:\n  heads: 4\n d_model: 8\n", {"bad.yaml:3:", "YAML syntax error"}},
      {"empty file", "", {"bad.yaml: the file is empty"}},
      {"only comments", "# nothing here\n", {"bad.yaml: the file is empty"}},
      {"top level is a list", "- 1\n- 2\n", {"bad.yaml:1:", "expected a mapping of sections", "a sequence"}},
      {"unknown section", "modle:\n  heads: 4\n", {"bad.yaml:1: modle:", "unknown section 'modle'", "did you mean 'model'?"}},
      {"key at top level", "lr: 0.1\n", {"bad.yaml:1: lr:", "unknown section 'lr'", "section 'optimizer'"}},
      {"section not a mapping", "model: 5\n", {"bad.yaml:1: model:", "expected a mapping", "found '5'"}},
      {"section is a list", "task:\n  - 1\n", {"bad.yaml:1: task:", "expected a mapping", "a sequence"}},
      {"empty section", "train:\n", {"bad.yaml:1: train:", "expected a mapping", "nothing (null)"}},
      {"unknown key", "model:\n  d_model: 64\n  heds: 4\n",
       {"bad.yaml:3: model.heds:", "unknown key 'heds'", "did you mean 'heads'?", "d_model"}},
      {"key in the wrong section", "model:\n  lr: 0.1\n", {"bad.yaml:2: model.lr:", "section 'optimizer'"}},
      {"misspelt key of another section", "model:\n  warmup: 3\n", {"bad.yaml:2: model.warmup:", "did you mean 'schedule.warmup_steps'?"}},
      {"duplicate key", "model:\n  heads: 4\n  heads: 2\n", {"bad.yaml:3: model.heads:", "duplicate key", "line 2"}},
      {"string for an integer", "model:\n  heads: four\n", {"bad.yaml:2: model.heads:", "expected a non-negative integer", "found 'four'"}},
      {"quoted number for an integer", "model:\n  heads: \"4\"\n", {"bad.yaml:2: model.heads:", "the string \"4\""}},
      {"negative unsigned", "train:\n  steps: -5\n", {"bad.yaml:2: train.steps:", "non-negative integer", "-5 (negative)"}},
      {"float for integer", "train:\n  batch_size: 2.5\n", {"bad.yaml:2: train.batch_size:", "2.5 (not an integer)"}},
      {"list for a number", "optimizer:\n  lr: [0.1]\n", {"bad.yaml:2: optimizer.lr:", "expected a number", "a sequence"}},
      {"string for a float", "optimizer:\n  lr: fast\n", {"bad.yaml:2: optimizer.lr:", "expected a number", "'fast'"}},
      {"nan for a float", "optimizer:\n  lr: nan\n", {"bad.yaml:2: optimizer.lr:", "expected a number"}},
      {"missing value", "optimizer:\n  lr:\n", {"bad.yaml:2: optimizer.lr:", "nothing (null)"}},
      {"non-bool", "model:\n  norm_first: maybe\n", {"bad.yaml:2: model.norm_first:", "expected true or false", "'maybe'"}},
      {"number for a bool", "train:\n  diagnostics: 1\n", {"bad.yaml:2: train.diagnostics:", "expected true or false"}},
      {"mapping for a string", "run:\n  out: {a: 1}\n", {"bad.yaml:2: run.out:", "expected a string", "a mapping"}},
      {"negative seed", "seed: -1\n", {"bad.yaml:1: seed:", "negative"}},
      {"int out of range", "train:\n  threads: 99999999999\n", {"bad.yaml:2: train.threads:", "out of range"}},
      {"zero size", "model:\n  layers: 0\n", {"bad.yaml:2: model.layers:", "expected a positive integer, found 0"}},
      {"zero d_model", "model:\n  d_model: 0\n", {"bad.yaml:2: model.d_model:", "positive integer"}},
      {"zero batch", "train:\n  batch_size: 0\n", {"bad.yaml:2: train.batch_size:", "positive integer"}},
      {"not divisible", "model:\n  d_model: 64\n  heads: 5\n",
       {"bad.yaml:3: model.heads:", "divisible", "64", "5"}},
      {"dropout of 1", "model:\n  dropout: 1.0\n", {"bad.yaml:2: model.dropout:", "[0, 1)", "found 1"}},
      {"negative dropout", "model:\n  attn_dropout: -0.1\n", {"bad.yaml:2: model.attn_dropout:", "[0, 1)", "-0.1"}},
      {"zero qk gain", "model:\n  qk_init_gain: 0\n", {"bad.yaml:2: model.qk_init_gain:", "positive gain", "found 0"}},
      {"zero lr", "optimizer:\n  lr: 0\n", {"bad.yaml:2: optimizer.lr:", "(0, inf)", "found 0"}},
      {"negative lr", "optimizer:\n  lr: -1e-3\n", {"bad.yaml:2: optimizer.lr:", "found -0.001"}},
      {"beta of 1", "optimizer:\n  beta2: 1\n", {"bad.yaml:2: optimizer.beta2:", "[0, 1)"}},
      {"zero eps", "optimizer:\n  eps: 0\n", {"bad.yaml:2: optimizer.eps:", "found 0"}},
      {"unknown activation", "model:\n  activation: gelu2\n",
       {"bad.yaml:2: model.activation:", "expected one of gelu, relu", "found 'gelu2'", "did you mean 'gelu'?"}},
      {"unknown task", "task:\n  name: sorting\n", {"bad.yaml:2: task.name:", "copy, reverse, sort, recall", "'sorting'"}},
      {"unknown optimizer", "optimizer:\n  name: lamb\n", {"bad.yaml:2: optimizer.name:", "sgd, adam, adamw"}},
      {"unknown schedule", "schedule:\n  name: linear\n", {"bad.yaml:2: schedule.name:", "constant, cosine, step"}},
      {"unknown arch", "model:\n  arch: gpt\n", {"bad.yaml:2: model.arch:", "encoder, encoder_decoder, decoder"}},
      {"recall pairs above vocab", "task:\n  name: recall\n  vocab: 8\n  pairs: 9\n",
       {"bad.yaml:4: task.pairs:", "must not exceed task.vocab", "9", "8"}},
      {"eval_size zero", "task:\n  eval_size: 0\n", {"bad.yaml:2: task.eval_size:", "positive integer"}},
      {"min_lr above lr", "optimizer:\n  lr: 0.01\nschedule:\n  min_lr: 0.1\n", {"bad.yaml:4: schedule.min_lr:", "must not exceed optimizer.lr"}},
      {"nesterov without momentum", "optimizer:\n  name: sgd\n  nesterov: true\n", {"bad.yaml:3: optimizer.nesterov:", "momentum"}},
      {"negative threads", "train:\n  threads: -2\n", {"bad.yaml:2: train.threads:", "found -2"}},
      {"label smoothing of 1", "train:\n  label_smoothing: 1\n", {"bad.yaml:2: train.label_smoothing:", "[0, 1)"}},
      {"terabyte vocab", "task:\n  vocab: 1000000000000\n", {"bad.yaml:2: task.vocab:", "more than the 64.0 GB of memory available", "V=1000000000000"}},
      {"terabyte length", "task:\n  length: 100000000\n", {"bad.yaml:2: task.length:", "of memory available"}},
      {"billion held-out examples", "task:\n  eval_size: 1000000000\n", {"bad.yaml:2: task.eval_size:", "of memory available"}},
      {"empty run.out", "run:\n  out: \"\"\n", {"bad.yaml:2: run.out:", "empty"}},
  };
  CHECK(cases.size() >= 30);
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    std::string msg = error_of(c.yaml);
    CAPTURE(msg);
    REQUIRE(!msg.empty());
    for (const char* s : c.expect) CHECK_MESSAGE(msg.find(s) != std::string::npos, "missing: ", s);
  }
}

TEST_CASE("config: ConfigError carries its parts") {
  try {
    parse_config("model:\n  heads: 0\n", "f.yaml");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.file == "f.yaml");
    CHECK(e.line == 2);
    CHECK(e.key == "model.heads");
    CHECK(std::string(e.what()) == "f.yaml:2: model.heads: " + e.message);
  }
  CHECK_THROWS_AS(parse_config("model: [", "f.yaml"), ValueError);
}

TEST_CASE("config: validation creates nothing (the run directory is made by the run)") {
  namespace fs = std::filesystem;
  std::string dir = test::temp_dir("config_out");
  std::string fresh = dir + "/new/deeper";
  Config c = parse_config("run:\n  out: " + fresh + "\n", "ok.yaml");
  CHECK(c.run.out == fresh);
  CHECK(!fs::exists(dir + "/new"));
}

TEST_CASE("config: --set overrides are parsed and validated like the file") {
  Config c = parse_config("model:\n  heads: 4\n", "f.yaml",
                          {"model.heads=8", "optimizer.lr=0.5", "seed=99", "model.activation=relu",
                           "train.diagnostics=false", "run.out=runs/x"});
  CHECK(c.model.attn.num_heads == 8);
  CHECK(c.optimizer.lr == 0.5);
  CHECK(c.seed == 99);
  CHECK(c.model.ff.activation == nn::Activation::Relu);
  CHECK(!c.train.diagnostics);
  CHECK(c.run.out == "runs/x");
  Config d = apply_overrides(Config{}, {"task.vocab=20"});
  CHECK(d.task.vocab == 20);

  const std::vector<Case> cases = {
      {"unknown key", "model.heds=4", {"--set model.heds=4: model.heds:", "unknown key 'heds'", "did you mean 'heads'?"}},
      {"unknown section", "modl.heads=4", {"--set modl.heads=4: modl:", "unknown section", "did you mean 'model'?"}},
      {"no section", "heads=4", {"--set heads=4: heads:", "expected section.key", "did you mean 'model.heads'?"}},
      {"no '='", "model.heads", {"--set model.heads:", "expected section.key=value", "no '='"}},
      {"bad value", "model.heads=four", {"--set model.heads=four: model.heads:", "non-negative integer", "'four'"}},
      {"empty value", "model.heads=", {"--set model.heads=: model.heads:", "nothing (null)"}},
      {"yaml syntax in value", "model.heads=[1,", {"--set model.heads=[1,: model.heads:", "YAML syntax error"}},
      {"impossible value", "optimizer.lr=0", {"--set optimizer.lr=0: optimizer.lr:", "found 0"}},
      {"impossible combination", "model.heads=5", {"--set model.heads=5: model.heads:", "divisible"}},
  };
  for (const Case& k : cases) {
    CAPTURE(k.what);
    std::string msg = error_of("model:\n  d_model: 64\n", {k.yaml});
    CAPTURE(msg);
    REQUIRE(!msg.empty());
    for (const char* s : k.expect) CHECK_MESSAGE(msg.find(s) != std::string::npos, "missing: ", s);
  }
  try {
    parse_config("{}", "f.yaml", {"model.heds=4"});
  } catch (const ConfigError& e) {
    CHECK(e.file == "--set");
    CHECK(e.line == 0);
    CHECK(e.override_text == "model.heds=4");
  }
}

TEST_CASE("config: load_config reads a file and reports a missing one") {
  std::string dir = test::temp_dir("config_load");
  std::string path = dir + "/run.yaml";
  std::ofstream(path) << "seed: 7\nmodel:\n  layers: 3\n";
  Config c = load_config(path, {"model.layers=4"});
  CHECK(c.seed == 7);
  CHECK(c.model.layers == 4);
  CHECK(c.source == path);
  std::ofstream(path) << "model:\n  layers: x\n";
  CHECK_THROWS_WITH_AS(load_config(path), doctest::Contains((path + ":2: model.layers:").c_str()), ConfigError);
  CHECK_THROWS_WITH_AS(load_config(dir + "/nope.yaml"), doctest::Contains("nope.yaml: cannot read the config: No such file"),
                       ConfigError);
  // Not a config: a directory, a device, a checkpoint, a binary file, a nesting bomb; named as such.
  CHECK_THROWS_WITH_AS(load_config(dir), doctest::Contains("config_load: cannot read the config: is a directory"), ConfigError);
  CHECK_THROWS_WITH_AS(load_config("/dev/zero"), doctest::Contains("is not a regular file"), ConfigError);
  std::ofstream(path, std::ios::binary) << "qkv-checkpoint\nformat_version 2\n" << std::string(600, '\0');
  CHECK_THROWS_WITH_AS(load_config(path), doctest::Contains("is a qkv checkpoint, not a YAML config; to continue its run: qkv train CONFIG --resume"),
                       ConfigError);
  std::ofstream(path, std::ios::binary) << std::string("seed: 1\0\x01\x02", 11);
  CHECK_THROWS_WITH_AS(load_config(path), doctest::Contains("is a binary file"), ConfigError);
  std::ofstream(path) << "model: " << std::string(100000, '[') << "\n";
  CHECK_THROWS_WITH_AS(load_config(path), doctest::Contains(":1: collections nested more than 64 deep"), ConfigError);
  CHECK_THROWS_WITH_AS(load_config(""), doctest::Contains("cannot read the config: empty path"), ConfigError);
}

TEST_CASE("config: validate catches values set in code, and the memory estimate scales") {
  Config c;
  c.model.d_model = 30;
  c.model.attn.num_heads = 4;
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("model.heads: model.d_model (30) must be divisible"), ConfigError);
  c.model.attn.head_dim = 8;  // explicit head_dim lifts the divisibility rule
  CHECK_NOTHROW(validate(c));

  Config small, big;
  big.task.vocab = small.task.vocab * 1000;
  CHECK(estimate_memory_bytes(big) > estimate_memory_bytes(small));
  Config longer;
  longer.task.length = small.task.length * 4;
  CHECK(estimate_memory_bytes(longer) > estimate_memory_bytes(small));
  const std::size_t gigabyte = std::size_t(1) << 30;
  CHECK(estimate_memory_bytes(small) < gigabyte);
  Config huge;
  huge.task.vocab = std::size_t(1) << 62;
  CHECK(estimate_memory_bytes(huge) > 1000 * gigabyte);
  Config held_out;
  held_out.task.eval_size = std::size_t(1e9);
  CHECK(estimate_data_bytes(held_out) > 500 * gigabyte);
  CHECK(estimate_data_bytes(small) < estimate_memory_bytes(small));
}

TEST_CASE("config: docs/config.md has a row for every key and names every choice of the name tables") {
  std::ifstream in(std::string(QKV_SOURCE_DIR) + "/docs/config.md");
  REQUIRE(in.good());
  const std::string doc((std::istreambuf_iterator<char>(in)), {});
  const auto ref = reference();
  REQUIRE(ref.size() > 40);
  std::string section;
  for (auto& [path, what] : ref) {
    CAPTURE(path);
    const auto dot = path.find('.');
    const std::string key = dot == std::string::npos ? path : path.substr(dot + 1);
    const std::string sec = dot == std::string::npos ? "Top level" : path.substr(0, dot);
    const auto at = doc.find("## " + sec);
    REQUIRE(at != std::string::npos);
    const auto end = doc.find("\n## ", at + 3);
    const std::string part = doc.substr(at, end == std::string::npos ? std::string::npos : end - at);
    CHECK(part.find("| `" + key + "` |") != std::string::npos);
    // Choice keys: every choice of the table appears in backticks in that section.
    if (what.find(", ") != std::string::npos && what.find('"') == std::string::npos) {
      std::size_t from = 0;
      while (from <= what.size()) {
        const std::size_t comma = what.find(", ", from);
        const std::string choice = what.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
        CHECK_MESSAGE(part.find("`" + choice + "`") != std::string::npos, "choice not documented: ", choice);
        if (comma == std::string::npos) break;
        from = comma + 2;
      }
    }
  }
}
