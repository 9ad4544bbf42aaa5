// End to end: `qkv train <file> [--set k=v]` on malformed configs. Every case must exit with
// status 2 (no signal, no crash), print "<file>:<line>: <section.key>" (or "--set k=v: key")
// on stderr, and leave nothing behind: no run directory at run.out and no other file next to
// the config (the child runs in the case's own directory, so a stray default "runs/..." would
// show up there too).

#include <unistd.h>

#include <filesystem>

#include "reliability/process.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace qkv;

namespace {

struct Case {
  const char* what;
  std::string yaml;                  // the config file, before the run section that is appended
  std::vector<std::string> sets;     // --set arguments
  std::vector<std::string> expect;   // substrings of stderr; "@" stands for the config's path
  bool own_run_section = false;      // the case writes run.out itself (nothing is appended)
};

std::string replace_at(std::string s, const std::string& path) {
  for (auto p = s.find('@'); p != std::string::npos; p = s.find('@', p + path.size())) s.replace(p, 1, path);
  return s;
}

}  // namespace

TEST_CASE("cli config errors: each malformed config exits 2 naming file, line and key, and creates nothing") {
  const std::string root = test::temp_dir("cli_config_errors");
  const std::string blocker = root + "/a_file";
  test::write_file(blocker, "not a directory\n");

  const std::vector<Case> cases = {
      {"yaml syntax", "model:\n  heads: [1, 2\n", {}, {"@:", "YAML syntax error"}},
      {"bad indentation", "model:\n  heads: 4\n d_model: 8\n", {}, {"@:3:", "YAML syntax error"}},
      {"empty file", "", {}, {"@: the file is empty"}, true},
      {"top level is a list", "- 1\n- 2\n", {}, {"@:1:", "mapping"}, true},
      {"misspelt section", "modle:\n  heads: 4\n", {}, {"@:1: modle:", "did you mean 'model'?"}},
      {"section is a number", "model: 5\n", {}, {"@:1: model:", "expected a mapping"}},
      {"empty section", "train:\n", {}, {"@:1: train:", "expected a mapping"}},
      {"unknown key", "model:\n  d_model: 64\n  heds: 4\n", {}, {"@:3: model.heds:", "did you mean 'heads'?"}},
      {"key in the wrong section", "model:\n  lr: 0.1\n", {}, {"@:2: model.lr:", "optimizer"}},
      {"duplicate key", "model:\n  heads: 4\n  heads: 2\n", {}, {"@:3: model.heads:", "duplicate"}},
      {"word for an integer", "model:\n  heads: four\n", {}, {"@:2: model.heads:", "'four'"}},
      {"fraction for an integer", "train:\n  batch_size: 2.5\n", {}, {"@:2: train.batch_size:", "2.5"}},
      {"word for a number", "optimizer:\n  lr: fast\n", {}, {"@:2: optimizer.lr:", "'fast'"}},
      {"nan for a number", "optimizer:\n  lr: .nan\n", {}, {"@:2: optimizer.lr:", "expected a number"}},
      {"missing value", "optimizer:\n  lr:\n", {}, {"@:2: optimizer.lr:", "null"}},
      {"word for a bool", "model:\n  norm_first: maybe\n", {}, {"@:2: model.norm_first:", "true or false"}},
      {"list for a string", "task:\n  name: [sort]\n", {}, {"@:2: task.name:", "expected a string"}},
      {"zero d_model", "model:\n  d_model: 0\n", {}, {"@:2: model.d_model:", "positive"}},
      {"zero layers", "model:\n  layers: 0\n", {}, {"@:2: model.layers:", "positive"}},
      {"negative steps", "train:\n  steps: -5\n", {}, {"@:2: train.steps:", "negative"}},
      {"zero batch", "train:\n  batch_size: 0\n", {}, {"@:2: train.batch_size:", "positive"}},
      {"heads do not divide d_model", "model:\n  d_model: 64\n  heads: 5\n", {}, {"@:3: model.heads:", "divisible"}},
      {"dropout of 1.5", "model:\n  dropout: 1.5\n", {}, {"@:2: model.dropout:", "1.5"}},
      {"negative attention dropout", "model:\n  attn_dropout: -0.1\n", {}, {"@:2: model.attn_dropout:", "-0.1"}},
      {"negative learning rate", "optimizer:\n  lr: -1e-3\n", {}, {"@:2: optimizer.lr:", "-0.001"}},
      {"beta2 of 1", "optimizer:\n  beta2: 1\n", {}, {"@:2: optimizer.beta2:", "[0, 1)"}},
      {"unknown optimizer", "optimizer:\n  name: lamb\n", {}, {"@:2: optimizer.name:", "'lamb'"}},
      {"unknown task", "task:\n  name: sorting\n", {}, {"@:2: task.name:", "'sorting'"}},
      {"recall pairs above vocab", "task:\n  name: recall\n  vocab: 8\n  pairs: 9\n", {}, {"@:4: task.pairs:", "task.vocab"}},
      {"label smoothing of 1", "train:\n  label_smoothing: 1\n", {}, {"@:2: train.label_smoothing:", "[0, 1)"}},
      {"terabyte sequence", "task:\n  length: 100000000\n", {}, {"@:2: task.length:", "of memory available"}},
      {"terabyte vocabulary", "task:\n  vocab: 1000000000000\n", {}, {"@:2: task.vocab:", "of memory available"}},
      {"unwritable output directory", "model:\n  d_model: 16\nrun:\n  out: " + blocker + "/run\n", {},
       {"run directory " + blocker + "/run (run.out of @): cannot create it: Not a directory"}, true},
      {"empty output directory", "run:\n  out: \"\"\n", {}, {"@:2: run.out:", "empty"}, true},
      {"--set unknown key", "model:\n  d_model: 16\n", {"model.heds=4"}, {"--set model.heds=4: model.heds:", "did you mean 'heads'?"}},
      {"--set unknown section", "model:\n  d_model: 16\n", {"modl.heads=4"}, {"--set modl.heads=4: modl:"}},
      {"--set without a section", "model:\n  d_model: 16\n", {"heads=4"}, {"--set heads=4: heads:"}},
      {"--set without '='", "model:\n  d_model: 16\n", {"model.heads"}, {"--set model.heads:", "no '='"}},
      {"--set bad value", "model:\n  d_model: 16\n", {"model.heads=four"}, {"--set model.heads=four: model.heads:", "'four'"}},
      {"--set impossible value", "model:\n  d_model: 16\n", {"optimizer.lr=0"}, {"--set optimizer.lr=0: optimizer.lr:"}},
      {"--set heads not dividing", "model:\n  d_model: 16\n", {"model.heads=3"}, {"--set model.heads=3: model.heads:", "divisible"}},
      {"--set unwritable out", "model:\n  d_model: 16\n", {"run.out=" + blocker + "/x"},
       {"run directory " + blocker + "/x (run.out of @): cannot create it: Not a directory"}},
  };
  CHECK(cases.size() >= 30);

  int n = 0;
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const std::string dir = root + "/case" + std::to_string(n++);
    fs::create_directories(dir);
    const std::string config = dir + "/config.yaml";
    const std::string out = dir + "/run";
    test::write_file(config, c.own_run_section ? c.yaml : c.yaml + "run:\n  out: " + out + "\n");
    std::vector<std::string> args = {"train", config, "--quiet"};
    for (auto& s : c.sets) args.insert(args.end(), {"--set", s});
    test::ProcessResult r = test::run_process(test::qkv_command(args), 60, [&] {
      if (::chdir(dir.c_str()) != 0) ::_exit(126);
    });
    CAPTURE(r.describe());
    CHECK(r.signal == 0);
    CHECK(r.exit_code == 2);
    for (auto& e : c.expect) {
      std::string want = replace_at(e, config);
      CHECK_MESSAGE(r.err.find(want) != std::string::npos, "stderr lacks: ", want);
    }
    CHECK(r.err.find("terminate") == std::string::npos);  // no uncaught exception
    CHECK(!fs::exists(out));
    std::vector<std::string> left;
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().filename() != "config.yaml") left.push_back(e.path().filename().string());
    CHECK_MESSAGE(left.empty(), "left behind: ", left.empty() ? "" : left[0]);
  }
}

TEST_CASE("cli config errors: a missing config file and bad arguments exit 2") {
  const std::string dir = test::temp_dir("cli_config_args");
  const std::string config = dir + "/ok.yaml";
  test::write_file(config, "model:\n  d_model: 16\n  heads: 2\nrun:\n  out: " + dir + "/run\n");
  struct ArgCase {
    const char* what;
    std::vector<std::string> args;
    const char* expect;
  };
  const std::vector<ArgCase> cases = {
      {"missing config file", {"train", dir + "/nope.yaml"}, "nope.yaml"},
      {"no config at all", {"train"}, "config"},
      {"unknown option", {"train", config, "--frobnicate"}, "frobnicate"},
      {"non-numeric --threads", {"train", config, "--threads", "many"}, "--threads: expected a whole number in [0, 1024], found 'many'"},
      {"--set without value", {"train", config, "--set"}, "--set: 1 required KEY=VALUE missing"},
      {"misspelt command", {"trian", config}, "unknown command 'trian' (did you mean 'train'?); commands: train, eval"},
      {"unknown command", {"frobnicate", config}, "unknown command 'frobnicate'; commands: train, eval"},
      {"no command", {}, "a command is required; commands: train, eval"},
      {"negative --threads", {"train", config, "--threads", "-1"}, "--threads: expected a whole number in [0, 1024], found '-1'"},
  };
  for (auto& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    test::ProcessResult r = test::run_process(test::qkv_command(c.args));
    CAPTURE(r.describe());
    CHECK(r.signal == 0);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
    CHECK(!fs::exists(dir + "/run"));
  }
}
