// qkv grade from the command line: the table, its CSV and JSON, the shelf written out, and the
// errors of a bad name, instrument or checkpoint.
#include <doctest/doctest.h>

#include <filesystem>

#include "qkv/io/files.hpp"
#include "qkv/io/json.hpp"
#include "reliability/process.hpp"
#include "test_util.hpp"

namespace qkv {
namespace fs = std::filesystem;
namespace {

test::ProcessResult qkv(std::vector<std::string> args) {
  args.insert(args.begin(), QKV_CLI_PATH);
  args.insert(args.end(), {"--programs", std::string(QKV_SOURCE_DIR) + "/programs", "--threads", "1"});
  return test::run_process(args, 600);
}

}  // namespace

TEST_CASE("grade cli: the histogram circuit graded, as a table, CSV and JSON, and the shelf written") {
  const std::string dir = test::temp_dir("grade_cli");
  auto r = qkv({"grade", "histogram", "--instruments", "patching,dla", "--pairs", "4", "--csv", dir + "/g.csv",
                "--write", dir + "/shelf"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  CHECK(r.out.find("histogram       patching          1/3  1.000  1.000") != std::string::npos);
  CHECK(r.out.find("histogram       dla               1/3  0.500") != std::string::npos);
  const std::string csv = io::read_file(dir + "/g.csv", 1 << 20, "csv");
  CHECK(csv.rfind("model,instrument,heads,circuit_heads,head_auroc", 0) == 0);
  CHECK(csv.find("\nhistogram,patching,3,1,1,1,") != std::string::npos);
  CHECK(fs::exists(dir + "/shelf/histogram.h5"));
  CHECK(fs::exists(dir + "/shelf/histogram.circuit.json"));

  r = qkv({"grade", "histogram", "--instruments", "patching", "--pairs", "2", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  const json::Value v = json::parse(r.out);
  REQUIRE(v.items.size() == 1);
  CHECK(v.items[0].find("model")->text == "histogram");
  CHECK(v.items[0].find("grades")->items[0].find("head_auroc")->number == 1.0);

  r = qkv({"grade", "histgram"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no model named 'histgram'") != std::string::npos);
  r = qkv({"grade", "histogram", "--instruments", "patchign"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("did you mean 'patching'") != std::string::npos);
  r = qkv({"grade", dir + "/shelf/histogram.h5"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("give --circuit FILE") != std::string::npos);
}

}  // namespace qkv
