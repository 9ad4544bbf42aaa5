// The instruments from the command line: qkv heads, ablate, explain on a trained model, and
// every bad argument a clear error with exit status 2 and no output file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "reliability/process.hpp"
#include "test_util.hpp"

namespace qkv {
namespace fs = std::filesystem;
namespace {

test::ProcessResult qkv(std::vector<std::string> args) {
  args.insert(args.begin(), QKV_CLI_PATH);
  return test::run_process(args, 600);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A tiny sort encoder (2 layers of 2 heads, 16 tokens), trained for a moment (a second here, a
// minute under the sanitizers); one per test case. What the tests check does not depend on how
// well it learned.
std::string trained_sort(const std::string& name) {
  const std::string dir = test::temp_dir("instruments_cli_" + name);
  const auto r = qkv({"train", std::string(QKV_SOURCE_DIR) + "/configs/sort.yaml", "--quiet", "--out", dir,
                      "--set", "train.steps=30", "--set", "schedule.warmup_steps=5", "--set", "train.eval_every=30",
                      "--set", "model.d_model=32", "--set", "model.heads=2", "--set", "model.d_ff=64",
                      "--set", "task.length=16", "--set", "task.eval_size=64", "--set", "train.threads=1"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  return dir + "/best.h5";
}

}  // namespace

TEST_CASE("instruments cli: heads scores every head of every layer, and --csv writes the same table") {
  const std::string ck = trained_sort("heads");
  const std::string csv = fs::path(ck).parent_path() / "heads.csv";
  const auto r = qkv({"heads", ck, "--examples", "32", "--csv", csv});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("32 held-out (test) examples") != std::string::npos);
  CHECK(r.out.find("blocks.0.attn") != std::string::npos);
  CHECK(r.out.find("blocks.1.attn") != std::string::npos);
  const std::string table = read_file(csv);
  CHECK(table.rfind("layer,layer_index,head,kind,", 0) == 0);
  CHECK(std::count(table.begin(), table.end(), '\n') == 1 + 4);  // header + 2 layers x 2 heads
}

TEST_CASE("instruments cli: ablate removes each head, a listed set, or prunes by importance, on the test split") {
  const std::string ck = trained_sort("ablate");
  auto r = qkv({"ablate", ck, "--examples", "64"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("each head removed alone") != std::string::npos);
  for (const char* h : {"   0.0 ", "   0.1 ", "   1.0 ", "   1.1 "}) CHECK(r.out.find(h) != std::string::npos);
  r = qkv({"ablate", ck, "--heads", "0.*,1.1", "--mode", "mean", "--examples", "64"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  const std::string csv = fs::path(ck).parent_path() / "prune.csv";
  r = qkv({"ablate", ck, "--prune", "--examples", "64", "--csv", csv});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  const std::string curve = read_file(csv);
  CHECK(curve.rfind("removed,fraction,loss,token_accuracy,sequence_accuracy,heads\n", 0) == 0);
  CHECK(std::count(curve.begin(), curve.end(), '\n') == 1 + 5);  // 0, 1, 2, 3, 4 heads removed
}

TEST_CASE("instruments cli: explain walks one query of one head, and --json gives the same numbers") {
  const std::string ck = trained_sort("explain");
  auto r = qkv({"explain", ck, "--example", "2", "--layer", "1", "--head", "0", "--query", "3"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("layer 1 (blocks.1.attn, self-attention), head 0, query 3") != std::string::npos);
  CHECK(r.out.find("check: these weights match") != std::string::npos);
  r = qkv({"explain", ck, "--layer", "0", "--head", "1", "--query", "0", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.rfind("{", 0) == 0);
  CHECK(r.out.find("\"layer\":\"blocks.0.attn\",\"layer_index\":0,\"head\":1,\"query\":0,") != std::string::npos);
  CHECK(r.out.find("\"weight_error\":") != std::string::npos);
}

TEST_CASE("instruments cli: bad arguments exit 2 naming what is wrong, and write nothing") {
  const std::string ck = trained_sort("bad");
  const std::string out = fs::path(ck).parent_path() / "never.csv";
  struct Case {
    std::vector<std::string> args;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {{"explain", ck, "--layer", "2", "--head", "0", "--query", "0"}, "--layer 2: the model has 2 attention layers (0..1)"},
      {{"explain", ck, "--layer", "0", "--head", "2", "--query", "0"}, "--head 2: blocks.0.attn has 2 heads (0..1)"},
      {{"explain", ck, "--layer", "0", "--head", "0", "--query", "99"}, "--query 99"},
      {{"explain", ck, "--layer", "0", "--head", "0", "--query", "0", "--text", "1 2 3"}, "--text: the model was trained on task sort, which has token ids"},
      {{"explain", ck, "--layer", "0", "--head", "0", "--query", "0", "--text", "1 2 99", "--ids"}, "99"},
      {{"explain", ck, "--layer", "0", "--head", "0", "--query", "0", "--example", "5000"}, "--example 5000"},
      {{"ablate", ck, "--heads", "", "--csv", out}, "empty"},
      {{"ablate", ck, "--heads", "2.0", "--csv", out}, "no attention layer 2 (layers 0..1)"},
      {{"ablate", ck, "--heads", "1.2", "--csv", out}, "attention layer 1 has no head 2 (heads 0..1)"},
      {{"ablate", ck, "--heads", "0.1,0.1", "--csv", out}, "listed twice"},
      {{"ablate", ck, "--heads", "zero", "--csv", out}, "not LAYER.HEAD"},
      {{"ablate", ck, "--mode", "half", "--csv", out}, "--mode"},
      {{"ablate", ck, "--plot", out + ".png"}, "--prune"},
      {{"heads", ck, "--examples", "0", "--csv", out}, "--examples"},
      {{"view", ck, "--out", out, "--snapshots", out, "--no-snapshots"}, "choose one"},
  };
  for (const Case& c : cases) {
    const auto r = qkv(c.args);
    CAPTURE(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.expect) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
  const auto r = qkv({"heads", fs::path(ck).parent_path() / "missing.h5"});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("missing.h5") != std::string::npos);
}

}  // namespace qkv

namespace qkv {
namespace {
double percent_after(const std::string& out, const std::string& label) {
  const auto at = out.find(label);
  REQUIRE_MESSAGE(at != std::string::npos, label << " not in: " << out);
  return std::stod(out.substr(at + label.size()));
}
}  // namespace

TEST_CASE("instruments cli: swap replaces the queried value, and a recall model that solved the task follows it") {
  const std::string dir = test::temp_dir("instruments_cli_swap");
  const auto t = qkv({"train", std::string(QKV_SOURCE_DIR) + "/configs/recall.yaml", "--quiet", "--out", dir,
                      "--set", "model.arch=decoder", "--set", "model.d_model=32", "--set", "model.heads=2",
                      "--set", "model.d_ff=64", "--set", "task.vocab=6", "--set", "task.pairs=3", "--set", "task.queries=3",
                      "--set", "task.eval_size=256", "--set", "train.steps=600", "--set", "train.eval_every=100",
                      "--set", "schedule.warmup_steps=50", "--set", "optimizer.lr=0.003", "--set", "train.threads=1"});
  REQUIRE_MESSAGE(t.exit_code == 0, t.describe());
  const auto r = qkv({"swap", dir + "/best.h5"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  const double intact = percent_after(r.out, "right before the swap"), follow = percent_after(r.out, "follow the new value"),
               stay = percent_after(r.out, "stay with the old value");
  CHECK(percent_after(r.out, "queries of the swapped keys") >= 256);  // at least one per example
  REQUIRE(intact > 90);  // the model solved recall: the premise of the probe
  // The values are random per example, so a model that solved the task must read the context.
  CHECK(follow > 90);
  CHECK(stay < 5);
  // The same seed, the same probe.
  CHECK(qkv({"swap", dir + "/best.h5"}).out == r.out);
  // Not a recall model: a clear error, exit 2.
  const auto bad = qkv({"swap", trained_sort("swap_sort")});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("needs a recall or seq2seq_recall model, found task 'sort'") != std::string::npos);
}

}  // namespace qkv
