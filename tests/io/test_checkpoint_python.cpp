// The Python side of the checkpoint format: h5py reads what qkv writes (README, "Checkpoints"),
// an h5py edit is caught by the checksum and scripts/convert_checkpoint.py --reseal makes it
// loadable again, and the converter turns the committed version-1 fixture into a file qkv loads
// with the same tensors. These need /usr/bin/python3 with numpy and h5py, which `make test`
// installs; without them the tests are skipped (a failure under CI=true: support/skip.hpp).

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "qkv/io/checkpoint.hpp"
#include "support/skip.hpp"
#include "test_util.hpp"
#include "train/train_fixtures.hpp"

namespace qkv {
namespace {

bool python_with_h5py() {
  return std::system("/usr/bin/python3 -c 'import numpy, h5py' > /dev/null 2>&1") == 0;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

io::Checkpoint small_checkpoint() {
  io::Checkpoint ck;
  ck.step = 42;
  ck.config_yaml = "seed: 7\nmodel:\n  d_model: 4\n";
  Array<float> w = test::random_array<float>({3, 4}, 5);
  ck.model = {{"blocks.0.attn.w_q.weight", w}, {"head.bias", test::random_array<float>({3}, 6)}};
  ck.optimizer_step = 42;
  ck.optimizer = {{"exp_avg/blocks.0.attn.w_q.weight", test::random_array<float>({3, 4}, 7)}};
  ck.rng = {{"dropout", {11, 22}}};
  ck.scalars = {{"data_position", 1344.0}};
  ck.metrics = {{"step", {10, 20}}, {"eval_loss", {1.5, 0.25}}};
  return ck;
}

}  // namespace

TEST_CASE("checkpoint with h5py: attributes are bytes, tensors and metrics read back exactly") {
  QKV_REQUIRE_OR_SKIP(python_with_h5py(), "/usr/bin/python3 lacks numpy or h5py (python3-h5py)");
  const std::string dir = test::temp_dir("ckpt_h5py");
  const io::Checkpoint ck = small_checkpoint();
  io::save_checkpoint(dir + "/c.h5", ck);
  // The values qkv wrote, as the script's expectations (printed with every digit a float has).
  std::string expect = "w = [";
  for (float v : ck.model[0].second) expect += std::to_string(double(v)) + ", ";
  expect += "]\n";
  write_text(dir + "/read.py", expect + R"PY(
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["format"] == b"qkv-checkpoint", f.attrs["format"]
assert int(f.attrs["format_version"]) == 2
assert int(f.attrs["step"]) == 42
assert f["config"][()].decode().startswith("seed: 7\n")
got = f["model/blocks.0.attn.w_q.weight"][:]
assert got.dtype == np.float32 and got.shape == (3, 4), (got.dtype, got.shape)
assert np.allclose(got.ravel(), np.array(w), rtol=0, atol=1e-6), (got, w)
assert list(f["metrics/eval_loss"][:]) == [1.5, 0.25]
assert list(f["rng/dropout"][:]) == [11, 22]
assert f["train"].attrs["data_position"] == 1344.0
assert "exp_avg" in f["optimizer"]
print("h5py read ok")
)PY");
  std::string out;
  const int rc = test::run_command("/usr/bin/python3 " + dir + "/read.py " + dir + "/c.h5", &out);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("h5py read ok") != std::string::npos);
}

TEST_CASE("checkpoint with h5py: an edit is refused by the checksum until convert_checkpoint.py --reseal") {
  QKV_REQUIRE_OR_SKIP(python_with_h5py(), "/usr/bin/python3 lacks numpy or h5py (python3-h5py)");
  const std::string dir = test::temp_dir("ckpt_h5py_edit");
  const std::string path = dir + "/c.h5";
  io::save_checkpoint(path, small_checkpoint());
  std::string out;
  REQUIRE(test::run_command("/usr/bin/python3 -c \"import h5py; f = h5py.File('" + path +
                                "', 'r+'); f['model/blocks.0.attn.w_q.weight'][0, 0] = 42; f.close()\"",
                            &out) == 0);
  CHECK_THROWS_WITH_AS(io::load_checkpoint(path), doctest::Contains("checksum mismatch"), io::IoError);
  const std::string script = std::string(QKV_SOURCE_DIR) + "/scripts/convert_checkpoint.py";
  const int rc = test::run_command("/usr/bin/python3 " + script + " --reseal " + path, &out);
  INFO(out);
  REQUIRE(rc == 0);
  io::Checkpoint back = io::load_checkpoint(path);
  CHECK(back.model[0].second(0, 0) == 42.0f);
  CHECK(back.model[0].second(0, 1) == small_checkpoint().model[0].second(0, 1));
}

TEST_CASE("convert_checkpoint.py: the version-1 fixture converts to a file qkv loads with the same tensors") {
  QKV_REQUIRE_OR_SKIP(python_with_h5py(), "/usr/bin/python3 lacks numpy or h5py (python3-h5py)");
  const std::string dir = test::temp_dir("ckpt_convert");
  const std::string src = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/checkpoint-v1.h5";
  const std::string script = std::string(QKV_SOURCE_DIR) + "/scripts/convert_checkpoint.py";
  CHECK_THROWS_WITH_AS(io::load_checkpoint(src), doctest::Contains("convert_checkpoint.py"), io::IoError);
  std::string out;
  const int rc = test::run_command("/usr/bin/python3 " + script + " " + src + " " + dir + "/v2.h5", &out);
  INFO(out);
  REQUIRE(rc == 0);
  const io::Checkpoint converted = io::load_checkpoint(dir + "/v2.h5");
  const io::Checkpoint fixture =
      io::load_checkpoint(std::string(QKV_SOURCE_DIR) + "/tests/fixtures/checkpoint-v1-converted.h5");
  CHECK(converted.step == fixture.step);
  CHECK(converted.config_yaml == fixture.config_yaml);
  REQUIRE(converted.model.size() == fixture.model.size());
  REQUIRE(!converted.model.empty());
  for (std::size_t i = 0; i < converted.model.size(); ++i) {
    CAPTURE(converted.model[i].first);
    CHECK(converted.model[i].first == fixture.model[i].first);
    CHECK(test::bitwise_equal(converted.model[i].second, fixture.model[i].second));
  }
}

}  // namespace qkv
