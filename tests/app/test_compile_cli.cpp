// qkv compile from the command line: a checkpoint every command opens, its circuit file beside it,
// and a bad program refused with the line and the construct, nothing written.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "reliability/process.hpp"
#include "test_util.hpp"

namespace qkv {
namespace fs = std::filesystem;
namespace {

test::ProcessResult qkv(std::vector<std::string> args) {
  args.insert(args.begin(), QKV_CLI_PATH);
  return test::run_process(args, 600);
}

std::string program(const char* name) { return std::string(QKV_SOURCE_DIR) + "/programs/" + name + ".rasp"; }

}  // namespace

TEST_CASE("compile cli: a compiled induction program is checked, written with its circuit, and eval and heads open it") {
  const std::string dir = test::temp_dir("compile_cli");
  const std::string ck = dir + "/induction.h5";
  // A sample of the domain (tests/compile checks every input of it; this is the command's wiring).
  auto r = qkv({"compile", program("induction"), "--out", ck, "--threads", "1", "--check", "2000"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("a decoder (causal) of 2 layers x 1 head") != std::string::npos);
  CHECK(r.out.find("  0.0    aggregate") != std::string::npos);
  CHECK(r.out.find("checked on 2,000 random inputs (the domain has 87,380): 100.00% of") != std::string::npos);
  CHECK(fs::exists(dir + "/induction.circuit.json"));
  r = qkv({"eval", ck, "--threads", "1"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("token accuracy                100.00%      100.00%") != std::string::npos);
  r = qkv({"heads", ck, "--examples", "32", "--threads", "1"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("previous-token") != std::string::npos);
  r = qkv({"explain", ck, "--text", "a b a", "--query", "3", "--layer", "1", "--head", "0"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("scaled by 100.000000 (set by the layer, not 1/sqrt(9))") != std::string::npos);
}

TEST_CASE("compile cli: a bad program exits 2 naming the file, line and construct, and writes nothing") {
  const std::string dir = test::temp_dir("compile_cli_bad");
  const std::string bad = dir + "/bad.rasp", out = dir + "/bad.h5";
  std::ofstream(bad) << "vocab a b\nmax_len 3\nr = aggregate(select(indices, indices, EQ), tokns)\noutput r\n";
  auto r = qkv({"compile", bad, "--out", out});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.rasp:3: tokns: unknown name 'tokns'; did you mean 'tokens'?") != std::string::npos);
  CHECK(!fs::exists(out));
  CHECK(!fs::exists(dir + "/bad.circuit.json"));
  r = qkv({"compile", dir + "/missing.rasp", "--out", out});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("missing.rasp") != std::string::npos);
}

}  // namespace qkv
