// Sweeps end to end: the plan a sweep file makes, a tiny sweep run through the qkv command
// (runner, results table), and the report script on its output (table and one plot) when
// /usr/bin/python3 has numpy and matplotlib.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "qkv/config/config.hpp"
#include "app/sweep.hpp"
#include "support/skip.hpp"
#include "train/train_fixtures.hpp"

using namespace qkv;
namespace fs = std::filesystem;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string cell; std::getline(ss, cell, sep);) out.push_back(cell);
  return out;
}

// A CSV as rows of column -> cell.
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  const auto header = split(line, ',');
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(f, line)) {
    const auto cells = split(line, ',');
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

// A sweep over a recall model small enough that 6 runs take a few seconds in all.
std::string tiny_sweep(const std::string& dir) {
  write(dir + "/base.yaml",
        "model: {d_model: 16, heads: 2, layers: 1, d_ff: 32, positional: learned}\n"
        "task: {name: recall, vocab: 6, pairs: 2, queries: 2, eval_size: 32}\n"
        "optimizer: {lr: 0.003}\n"
        "schedule: {warmup_steps: 2}\n"
        "train: {steps: 20, batch_size: 16, eval_every: 10, checkpoint_every: 10, log_every: 10}\n");
  write(dir + "/sweep.yaml",
        "base: base.yaml\n"
        "set:\n  train.threads: 1\n"
        "grid:\n  model.heads: [1, 2]\n"
        "seeds: [1, 2, 3]\n"
        "out: " + dir + "/out\n");
  return dir + "/sweep.yaml";
}

bool python_with_matplotlib() {
  return std::system("/usr/bin/python3 -c 'import numpy, matplotlib' > /dev/null 2>&1") == 0;
}

}  // namespace

TEST_CASE("sweep: the plan is every grid combination times every seed, last key fastest") {
  const std::string dir = test::temp_dir("sweep_plan");
  write(dir + "/base.yaml", "model: {d_model: 32}\n");
  write(dir + "/s.yaml",
        "base: base.yaml\nset: {train.steps: 700}\ngrid:\n  model.heads: [1, 2]\n  model.scale: [0, 1]\nseeds: [4, 5]\n");
  auto plan = app::load_sweep(dir + "/s.yaml", {"train.batch_size=8"});
  REQUIRE(plan.runs.size() == 8);
  CHECK(plan.grid_keys == std::vector<std::string>{"model.heads", "model.scale"});
  CHECK(plan.runs[0].name == "heads=1_scale=0_seed=4");
  CHECK(plan.runs[1].name == "heads=1_scale=0_seed=5");
  CHECK(plan.runs[2].name == "heads=1_scale=1_seed=4");
  CHECK(plan.runs[7].name == "heads=2_scale=1_seed=5");
  CHECK(plan.out == "sweeps/s");
  // Every run's overrides give the config it claims to be.
  auto cfg = config::load_config(plan.base, plan.runs[6].overrides);
  CHECK(cfg.model.attn.num_heads == 2);
  CHECK(cfg.model.attn.scale == 1.0);
  CHECK(cfg.seed == 4);
  CHECK(cfg.train.steps == 700);
  CHECK(cfg.train.batch_size == 8);
  // --seeds replaces the file's seeds.
  auto quick = app::load_sweep(dir + "/s.yaml", {}, {9});
  REQUIRE(quick.runs.size() == 4);
  CHECK(quick.runs[0].name == "heads=1_scale=0_seed=9");
  CHECK(config::load_config(quick.base, quick.runs[3].overrides).seed == 9);
  // --grid replaces one key's values; the names stay those of the full sweep.
  auto one = app::load_sweep(dir + "/s.yaml", {}, {}, {"model.scale=1"});
  REQUIRE(one.runs.size() == 4);
  CHECK(one.runs[0].name == "heads=1_scale=1_seed=4");
  CHECK(one.runs[3].name == "heads=2_scale=1_seed=5");
  auto wider = app::load_sweep(dir + "/s.yaml", {}, {}, {"model.heads=1,2,4"});
  CHECK(wider.runs.size() == 12);
  CHECK(wider.runs[11].name == "heads=4_scale=1_seed=5");
  auto grid_error = [&](const std::string& g) {
    try {
      app::load_sweep(dir + "/s.yaml", {}, {}, {g});
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(grid_error("train.steps=5").find("grid does not have") != std::string::npos);
  CHECK(grid_error("model.heads=").find("KEY=V1,V2") != std::string::npos);
}

TEST_CASE("sweep: bad sweep files name the file, line and key") {
  const std::string dir = test::temp_dir("sweep_errors");
  write(dir + "/base.yaml", "{}\n");
  auto message = [&](const std::string& text) {
    write(dir + "/bad.yaml", text);
    try {
      app::load_sweep(dir + "/bad.yaml");
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("base: base.yaml\ngrdi: {model.heads: [1]}\n").find("bad.yaml:2: grdi: unknown key") != std::string::npos);
  CHECK(message("grid: {model.heads: [1]}\n").find("base") != std::string::npos);
  CHECK(message("base: base.yaml\ngrid: {model.heads: []}\n").find("grid.model.heads") != std::string::npos);
  CHECK(message("base: base.yaml\nseeds: [x]\n").find("seeds") != std::string::npos);
  // An impossible run is found before anything trains: 64 is not divisible by 5 heads.
  CHECK(message("base: base.yaml\ngrid: {model.heads: [5]}\n").find("model.heads") != std::string::npos);
  // A list where a value belongs, and the other way round: the file, the line and the key.
  CHECK(message("base: base.yaml\nset:\n  train.steps: [1, 2]\n").find("bad.yaml:3: set.train.steps: expected a single value, found a list") !=
        std::string::npos);
  CHECK(message("base: [base.yaml]\n").find("bad.yaml:1: base: expected a single value, found a list") != std::string::npos);
  CHECK(message("base: base.yaml\nseeds: [-1]\n").find("bad.yaml:2: seeds: expected non-negative integers") != std::string::npos);
  CHECK(message("base: base.yaml\nseeds: [{a: 1}]\n").find("seeds: expected a single value, found a mapping") != std::string::npos);
  // Not a sweep file: a directory, a checkpoint, a nesting bomb.
  try {
    app::load_sweep(dir);
    FAIL("a directory was read as a sweep file");
  } catch (const config::ConfigError& e) {
    CHECK(std::string(e.what()).find("cannot read the sweep file: is a directory, not a file") != std::string::npos);
  }
  CHECK(message("qkv-checkpoint\nformat_version 2\n").find("is a qkv checkpoint") != std::string::npos);
  CHECK(message("base: " + std::string(100000, '[')).find("nested more than 64 deep") != std::string::npos);
}

TEST_CASE("sweep: a tiny sweep end to end - runner, results table, rerun skips, report and plot") {
  const std::string dir = test::temp_dir("sweep_e2e");
  const std::string file = tiny_sweep(dir);
  std::string out;
  const std::string qkv = QKV_CLI_PATH;
  REQUIRE_MESSAGE(test::run_command(qkv + " sweep " + file + " --jobs 2 --threads 1", &out) == 0, out);

  auto rows = read_csv(dir + "/out/results.csv");
  REQUIRE(rows.size() == 6);
  std::map<std::string, std::vector<double>> acc_by_heads;
  for (auto& r : rows) {
    CHECK(r["status"] == "steps");
    CHECK(r["steps"] == "20");
    const std::string run_dir = dir + "/out/runs/" + r["run"];
    CHECK(r["run"] == "heads=" + r["model.heads"] + "_seed=" + r["seed"]);
    // The row is the run's own result.csv, and the run trained with its setting.
    auto own = read_csv(run_dir + "/result.csv");
    REQUIRE(own.size() == 1);
    CHECK(own[0]["final_token_acc"] == r["final_token_acc"]);
    CHECK(slurp(run_dir + "/config.yaml").find("heads: " + r["model.heads"]) != std::string::npos);
    // Diagnostics of every attention layer are logged at each evaluation.
    auto metrics = read_csv(run_dir + "/metrics.csv");
    REQUIRE(metrics.size() == 2);
    for (const char* c : {"blocks.0.attn.entropy", "blocks.0.attn.max_weight", "blocks.0.attn.grad_q",
                          "blocks.0.attn.grad_k", "blocks.0.attn.redundancy", "blocks.0.attn.qk_var"})
      CHECK(metrics[1].count(c) == 1);
    CHECK(std::stod(metrics[1]["blocks.0.attn.qk_var"]) > 0);
    const double entropy = std::stod(metrics[1]["blocks.0.attn.entropy"]);
    CHECK(entropy > 0);
    CHECK(entropy <= std::log(6.0) + 1e-6);  // at most log(Tk); Tk = 2 pairs * 2 + 2 queries
    CHECK(std::stod(metrics[1]["blocks.0.attn.grad_q"]) > 0);
    // One head has no pair to compare; two heads do.
    CHECK(std::isnan(std::stod(metrics[1]["blocks.0.attn.redundancy"])) == (r["model.heads"] == "1"));
    acc_by_heads[r["model.heads"]].push_back(std::stod(r["final_token_acc"]));
  }
  // Seeds are different runs, not copies.
  CHECK(rows[0]["final_loss"] != rows[1]["final_loss"]);

  // Rerunning skips finished runs: nothing is retrained, results are unchanged.
  const auto before = slurp(dir + "/out/results.csv");
  const auto mtime = fs::last_write_time(dir + "/out/runs/heads=1_seed=1/metrics.csv");
  REQUIRE(test::run_command(qkv + " sweep " + file + " --jobs 2", &out) == 0);
  CHECK(out.find("start") == std::string::npos);
  CHECK(slurp(dir + "/out/results.csv") == before);
  CHECK(fs::last_write_time(dir + "/out/runs/heads=1_seed=1/metrics.csv") == mtime);

  QKV_REQUIRE_OR_SKIP(python_with_matplotlib(), "the report and plot part: /usr/bin/python3 lacks numpy or matplotlib");
  const std::string report = "/usr/bin/python3 " + std::string(QKV_SOURCE_DIR) + "/tools/sweep_report.py ";
  REQUIRE_MESSAGE(test::run_command(report + "table " + dir + "/out --metrics final_token_acc,steps_to_target --out " +
                                        dir + "/table.md", &out) == 0, out);
  const auto table = split(slurp(dir + "/table.md"), '\n');
  REQUIRE(table.size() == 4);  // header, rule, two settings
  CHECK(table[0].find("heads") != std::string::npos);
  // The table's mean and std are those of the three seeds (in %, one decimal).
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& v = acc_by_heads[i == 0 ? "1" : "2"];
    const double mean = (v[0] + v[1] + v[2]) / 3;
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    char expect[64];
    std::snprintf(expect, sizeof expect, "| %.1f ± %.1f |", 100 * mean, 100 * std::sqrt(var / 2));
    CHECK_MESSAGE(table[2 + i].find(expect) != std::string::npos, table[2 + i], " lacks ", expect);
    CHECK(table[2 + i].find("3/3") != std::string::npos);
  }
  REQUIRE_MESSAGE(test::run_command(report + "final " + dir + "/out --x model.heads --metrics final_token_acc --out " +
                                        dir + "/final.png", &out) == 0, out);
  const std::string png = slurp(dir + "/final.png");
  REQUIRE(png.size() > 8);
  CHECK(png.substr(1, 3) == "PNG");
  CHECK(png.size() < 150 * 1024);
}

namespace {

// A one-run sweep file DIR/one.yaml over tiny_sweep's base, and its run as the sweep would start it
// in DIR/a, stopped after 10 of its 20 steps: the run's directory.
std::string stopped_run(const std::string& dir) {
  tiny_sweep(dir);
  write(dir + "/one.yaml", "base: base.yaml\nset:\n  train.threads: 1\ngrid:\n  model.heads: [2]\nseeds: [1]\n");
  const std::string run = dir + "/a/runs/heads=2_seed=1";
  std::string out;
  REQUIRE_MESSAGE(test::run_command(std::string(QKV_CLI_PATH) + " train " + dir + "/base.yaml --quiet --set train.threads=1 "
                                    "--set model.heads=2 --set seed=1 --set run.out=" + run + " --stop-after 10", &out) == 0,
                  out);
  return run;
}

}  // namespace

TEST_CASE("sweep: an interrupted run resumes from its last.h5 and ends as if never interrupted") {
  const std::string dir = test::temp_dir("sweep_resume");
  const std::string run = stopped_run(dir);
  const std::string qkv = QKV_CLI_PATH;
  std::string out;
  REQUIRE(fs::exists(run + "/last.h5"));
  REQUIRE_FALSE(fs::exists(run + "/result.csv"));
  // Evidence of a resume, not a restart (which would give the same numbers): the step-10
  // checkpoint is not written again. Its time is moved back so a rewrite would show.
  const std::string ck10 = run + "/checkpoints/step_0000010.h5";
  REQUIRE(fs::exists(ck10));
  const auto old_time = fs::last_write_time(ck10) - std::chrono::hours(1);
  fs::last_write_time(ck10, old_time);
  REQUIRE_MESSAGE(test::run_command(qkv + " sweep " + dir + "/one.yaml --out " + dir + "/a", &out) == 0, out);
  REQUIRE_MESSAGE(test::run_command(qkv + " sweep " + dir + "/one.yaml --out " + dir + "/b", &out) == 0, out);
  CHECK(fs::last_write_time(ck10) == old_time);
  CHECK(fs::exists(run + "/checkpoints/step_0000020.h5"));
  auto resumed = read_csv(run + "/metrics.csv");
  auto fresh = read_csv(dir + "/b/runs/heads=2_seed=1/metrics.csv");
  REQUIRE(resumed.size() == 2);
  REQUIRE(fresh.size() == 2);
  for (std::size_t i = 0; i < 2; ++i)
    for (const char* c : {"step", "train_loss", "eval_loss", "eval_token_acc", "blocks.0.attn.entropy", "blocks.0.attn.grad_q"})
      CHECK_MESSAGE(resumed[i][c] == fresh[i][c], c, " at row ", i);
}

TEST_CASE("sweep: a run stopped before its first last.h5 starts again in place, and ends as a fresh one") {
  const std::string dir = test::temp_dir("sweep_restart");
  const std::string run = stopped_run(dir);
  const std::string qkv = QKV_CLI_PATH;
  std::string out;
  // What a kill before the first periodic save leaves: the run's config and metrics, no last.h5.
  fs::remove(run + "/last.h5");
  REQUIRE(fs::exists(run + "/config.yaml"));
  REQUIRE_MESSAGE(test::run_command(qkv + " sweep " + dir + "/one.yaml --out " + dir + "/a", &out) == 0, out);
  CHECK_FALSE(fs::exists(run + "/failed"));
  REQUIRE(fs::exists(run + "/result.csv"));
  REQUIRE_MESSAGE(test::run_command(qkv + " sweep " + dir + "/one.yaml --out " + dir + "/b", &out) == 0, out);
  auto again = read_csv(run + "/metrics.csv");  // no rows left from the first attempt
  auto fresh = read_csv(dir + "/b/runs/heads=2_seed=1/metrics.csv");
  REQUIRE(again.size() == 2);
  REQUIRE(fresh.size() == 2);
  for (std::size_t i = 0; i < 2; ++i)
    for (const char* c : {"step", "train_loss", "eval_loss", "eval_token_acc", "blocks.0.attn.entropy"})
      CHECK_MESSAGE(again[i][c] == fresh[i][c], c, " at row ", i);
}
