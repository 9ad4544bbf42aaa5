#include <doctest/doctest.h>
#include <hdf5.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "io/checkpoint_edit.hpp"
#include "io/checkpoint_testing.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/version.hpp"
#include "support/skip.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::io;
using qkv::test::edit;
using qkv::test::load_error;
namespace fs = std::filesystem;

namespace {

// A checkpoint exercising every field, with values that only survive a bit-exact round trip.
Checkpoint sample_checkpoint() {
  Checkpoint ck;
  ck.step = 123456789012345;
  ck.config_yaml = "# résumé ünïcode\nmodel:\n  d_model: 8\n  heads: 2\n";
  Array<float> w = test::random_array<float>({4, 8}, 1);
  w(0, 0) = -0.0f;
  w(0, 1) = std::numeric_limits<float>::denorm_min();
  w(0, 2) = std::numeric_limits<float>::max();
  w(0, 3) = std::numeric_limits<float>::lowest();
  ck.model = {{"embed.weight", w},
              {"blocks.0.attn.w_q.weight", test::random_array<float>({8, 8}, 2)},
              {"blocks.0.attn.w_q.bias", test::random_array<float>({8}, 3)},
              {"blocks.0.ln.gain", test::random_array<float>({2, 3, 4}, 4)},
              {"temperature", full<float>(Shape{}, 0.25f)},
              {"empty", zeros<float>({0, 3})}};
  ck.optimizer_step = 77;
  for (const char* buffer : {"exp_avg", "exp_avg_sq"})
    for (std::size_t i = 0; i < 3; ++i)
      ck.optimizer.emplace_back(std::string(buffer) + "/" + ck.model[i].first,
                                test::random_array<float>(Shape(ck.model[i].second.shape().begin(), ck.model[i].second.shape().end()), 10 + i));
  ck.rng = {{"data", {42, 1000}}, {"dropout", {std::numeric_limits<std::uint64_t>::max(), 0}}};
  ck.scalars = {{"best_accuracy", 0.1 + 0.2}, {"data_position", 9007199254740993.0}, {"loss_scale", -1e-300}};
  ck.metrics = {{"step", {10, 20, 30}}, {"loss", {2.5, 1.0 / 3.0, std::nan("")}}, {"empty", {}}};
  return ck;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void check_equal(const Checkpoint& a, const Checkpoint& b) {
  CHECK(a.step == b.step);
  CHECK(a.config_yaml == b.config_yaml);
  CHECK(a.optimizer_step == b.optimizer_step);
  for (auto pair : {std::make_pair(&a.model, &b.model), std::make_pair(&a.optimizer, &b.optimizer)}) {
    REQUIRE(pair.first->size() == pair.second->size());
    for (std::size_t i = 0; i < pair.first->size(); ++i) {
      CAPTURE((*pair.first)[i].first);
      CHECK((*pair.first)[i].first == (*pair.second)[i].first);
      CHECK(test::bitwise_equal((*pair.first)[i].second, (*pair.second)[i].second));
    }
  }
  CHECK(a.rng == b.rng);
  REQUIRE(a.scalars.size() == b.scalars.size());
  for (std::size_t i = 0; i < a.scalars.size(); ++i) {
    CHECK(a.scalars[i].first == b.scalars[i].first);
    CHECK(same_bits(a.scalars[i].second, b.scalars[i].second));
  }
  REQUIRE(a.metrics.size() == b.metrics.size());
  for (std::size_t i = 0; i < a.metrics.size(); ++i) {
    CHECK(a.metrics[i].first == b.metrics[i].first);
    REQUIRE(a.metrics[i].second.size() == b.metrics[i].second.size());
    for (std::size_t j = 0; j < a.metrics[i].second.size(); ++j)
      CHECK(same_bits(a.metrics[i].second[j], b.metrics[i].second[j]));
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void set_int_attribute(hid_t file, const char* name, long long value) {
  H5Adelete(file, name);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(file, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_LLONG, &value);
  H5Aclose(a);
  H5Sclose(space);
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("checkpoint: a NaN or an infinity in a weight or an optimizer buffer is refused, naming the dataset and the element") {
  const std::string dir = test::temp_dir("ckpt_nonfinite");
  struct Case {
    const char* what;
    bool optimizer;
    float value;
    const char* expect;
  };
  for (const Case& c : {Case{"nan weight", false, std::numeric_limits<float>::quiet_NaN(), "/model/blocks.0.attn.w_q.weight[1, 5] is nan"},
                        Case{"inf weight", false, std::numeric_limits<float>::infinity(), "/model/blocks.0.attn.w_q.weight[1, 5] is inf"},
                        Case{"-inf moment", true, -std::numeric_limits<float>::infinity(),
                             "/optimizer/exp_avg/blocks.0.attn.w_q.weight[1, 5] is -inf"}}) {
    CAPTURE(c.what);
    Checkpoint ck = sample_checkpoint();
    Array<float>& t = c.optimizer ? ck.optimizer[1].second : ck.model[1].second;
    t(1, 5) = c.value;
    save_checkpoint(dir + "/bad.h5", ck);  // saved as given: the reader is what guards
    try {
      load_checkpoint(dir + "/bad.h5");
      FAIL("loaded a checkpoint holding ", c.what);
    } catch (const IoError& e) {
      CHECK(std::string(e.what()).find(c.expect) != std::string::npos);
      CHECK(std::string(e.what()).find(dir + "/bad.h5") != std::string::npos);
    }
  }
}

TEST_CASE("checkpoint: every field round-trips bit for bit, in order") {
  std::string dir = test::temp_dir("ckpt_roundtrip");
  Checkpoint ck = sample_checkpoint();
  save_checkpoint(dir + "/a.h5", ck);
  Checkpoint back = load_checkpoint(dir + "/a.h5");
  check_equal(ck, back);
  CHECK(files_in(dir) == std::vector<std::string>{"a.h5"});  // no temp file left behind

  SUBCASE("saving over an existing file replaces it") {
    Checkpoint next = ck;
    next.step = 5;
    next.model.pop_back();
    save_checkpoint(dir + "/a.h5", next);
    check_equal(next, load_checkpoint(dir + "/a.h5"));
  }
  SUBCASE("an empty checkpoint round-trips too") {
    Checkpoint empty;
    save_checkpoint(dir + "/empty.h5", empty);
    check_equal(empty, load_checkpoint(dir + "/empty.h5"));
  }
}

TEST_CASE("checkpoint: a failed save leaves the previous file untouched and no temp file") {
  std::string dir = test::temp_dir("ckpt_atomic");
  std::string path = dir + "/ckpt.h5";
  Checkpoint first = sample_checkpoint();
  save_checkpoint(path, first);
  const std::string before = read_bytes(path);

  Checkpoint second = first;
  second.step = 999;
  for (const char* stage : {"written", "renaming"}) {
    CAPTURE(stage);
    testing::set_save_hook([&](const std::string& s) {
      if (s == stage) throw IoError("simulated failure: No space left on device");
    });
    CHECK_THROWS_WITH_AS(save_checkpoint(path, second), doctest::Contains("No space left on device"), IoError);
    testing::set_save_hook(nullptr);
    CHECK(read_bytes(path) == before);
    CHECK(load_checkpoint(path).step == first.step);
    CHECK(files_in(dir) == std::vector<std::string>{"ckpt.h5"});
  }

  // A directory that does not exist: the error says so, nothing is created.
  std::string missing = dir + "/no/such/dir/ckpt.h5";
  CHECK_THROWS_WITH_AS(save_checkpoint(missing, first), doctest::Contains("No such file or directory"), IoError);
  CHECK(!fs::exists(dir + "/no"));
  // A path that is a directory: rename fails, the temp file is cleaned up.
  fs::create_directory(dir + "/adir");
  CHECK_THROWS_AS(save_checkpoint(dir + "/adir", first), IoError);
  CHECK(fs::is_directory(dir + "/adir"));
  CHECK(files_in(dir).size() == 2);
}

TEST_CASE("checkpoint: truncated, empty, garbage and missing files give IoError naming the path") {
  std::string dir = test::temp_dir("ckpt_bad");
  std::string good = dir + "/good.h5";
  save_checkpoint(good, sample_checkpoint());
  const std::string bytes = read_bytes(good);
  REQUIRE(bytes.size() > 1000);
  std::string cut = dir + "/cut.h5";
  for (std::size_t n : {std::size_t(0), std::size_t(7), std::size_t(8), std::size_t(100), std::size_t(512),
                        bytes.size() / 3, bytes.size() / 2, bytes.size() - 100, bytes.size() - 1}) {
    CAPTURE(n);
    write_bytes(cut, bytes.substr(0, n));
    std::string msg = load_error(cut);
    CHECK(msg.find("load_checkpoint: " + cut + ":") == 0);
  }
  write_bytes(cut, "");
  CHECK(load_error(cut).find("the file is empty") != std::string::npos);

  std::string text = dir + "/notes.txt";
  write_bytes(text, "model:\n  d_model: 8\n");
  CHECK(load_error(text).find("not a qkv checkpoint (no qkv header in the first 512 bytes)") != std::string::npos);
  CHECK(load_error(dir + "/nothing.h5").find("No such file or directory") != std::string::npos);
  CHECK(load_error(dir).find("is a directory") != std::string::npos);
}

TEST_CASE("checkpoint: wrong format, wrong version and missing objects are named") {
  std::string dir = test::temp_dir("ckpt_layout");
  std::string path = dir + "/c.h5";
  auto fresh = [&] { save_checkpoint(path, sample_checkpoint()); };

  fresh();
  edit(path, [](hid_t f) { set_int_attribute(f, "format_version", kCheckpointVersion + 1); });
  std::string msg = load_error(path);
  CHECK(msg.find(path) != std::string::npos);
  CHECK(msg.find("format_version " + std::to_string(kCheckpointVersion + 1) + " is not supported") != std::string::npos);
  CHECK(msg.find("reads format_version " + std::to_string(kCheckpointVersion)) != std::string::npos);
  CHECK(msg.find("newer qkv") != std::string::npos);

  fresh();
  edit(path, [](hid_t f) { H5Adelete(f, "format_version"); });
  CHECK(load_error(path).find("not a qkv checkpoint: the root attribute 'format_version' is missing") != std::string::npos);

  fresh();
  edit(path, [](hid_t f) { H5Adelete(f, "format"); });
  CHECK(load_error(path).find("not a qkv checkpoint: the root attribute 'format' is missing") != std::string::npos);

  fresh();
  edit(path, [](hid_t f) { H5Ldelete(f, "/config", H5P_DEFAULT); });
  CHECK(load_error(path).find("dataset /config is missing") != std::string::npos);

  fresh();
  edit(path, [](hid_t f) { H5Ldelete(f, "/model", H5P_DEFAULT); });
  CHECK(load_error(path).find("group /model is missing") != std::string::npos);

  fresh();
  edit(path, [](hid_t f) { H5Adelete_by_name(f, "/optimizer", "step", H5P_DEFAULT); });
  CHECK(load_error(path).find("attribute 'step' of /optimizer is missing") != std::string::npos);

  fresh();
  edit(path, [](hid_t f) {
    // /rng/data becomes a float tensor of the wrong shape.
    H5Ldelete(f, "/rng/data", H5P_DEFAULT);
    hsize_t dims[1] = {3};
    double v[3] = {1, 2, 3};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t d = H5Dcreate2(f, "/rng/data", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    H5Sclose(space);
  });
  msg = load_error(path);
  CHECK(msg.find("/rng/data: expected uint64 (2), found float64 (3)") != std::string::npos);

  fresh();
  edit(path, [](hid_t f) {
    H5Ldelete(f, "/model/embed.weight", H5P_DEFAULT);
    hsize_t dims[1] = {2};
    long long v[2] = {1, 2};
    hid_t space = H5Screate_simple(1, dims, nullptr);
    hid_t d = H5Dcreate2(f, "/model/embed.weight", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    H5Sclose(space);
  });
  CHECK(load_error(path).find("/model/embed.weight: expected float32, found int64") != std::string::npos);
}

TEST_CASE("checkpoint: invalid tensor names are rejected before anything is published") {
  std::string dir = test::temp_dir("ckpt_names");
  Checkpoint ck;
  ck.model = {{"a//b", zeros<float>({2})}};
  CHECK_THROWS_WITH_AS(save_checkpoint(dir + "/x.h5", ck), doctest::Contains("'a//b'"), IoError);
  ck.model = {{"w", zeros<float>({2})}, {"w", zeros<float>({2})}};
  CHECK_THROWS_WITH_AS(save_checkpoint(dir + "/x.h5", ck), doctest::Contains("/model/w is written twice"), IoError);
  CHECK(files_in(dir).empty());
}

TEST_CASE("check_compatible lists every missing, unexpected and misshapen tensor") {
  StateDict<float> model = {{"a", zeros<float>({2, 3})}, {"b", zeros<float>({4})}, {"c", zeros<float>({5})}};
  CHECK_NOTHROW(check_compatible(model, model, "m.h5"));
  StateDict<float> found = {{"a", zeros<float>({3, 2})}, {"c", zeros<float>({5})}, {"d", zeros<float>({1})}};
  try {
    check_compatible(model, found, "m.h5");
    FAIL("no error");
  } catch (const ValueError& e) {
    std::string msg = e.what();
    CHECK(msg.find("m.h5") == 0);
    CHECK(msg.find("shape of a: the model has (2, 3), the checkpoint (3, 2)") != std::string::npos);
    CHECK(msg.find("missing: b (4)") != std::string::npos);
    CHECK(msg.find("unexpected: d (1)") != std::string::npos);
    CHECK(msg.find(" c ") == std::string::npos);
  }
}

TEST_CASE("inspect lists groups, datasets with shapes and statistics, attributes and the config") {
  std::string dir = test::temp_dir("ckpt_inspect");
  std::string path = dir + "/c.h5";
  Checkpoint ck = sample_checkpoint();
  save_checkpoint(path, ck);
  std::string text = inspect(path);
  INFO(text);
  CHECK(text.find("@format = \"qkv-checkpoint\"") != std::string::npos);
  CHECK(text.find("@format_version = " + std::to_string(kCheckpointVersion)) != std::string::npos);
  CHECK(text.find("note:") == std::string::npos);  // only for other format versions
  CHECK(text.find(std::string("@qkv_version = \"") + QKV_VERSION + "\"") != std::string::npos);
  CHECK(text.find("@step = 123456789012345") != std::string::npos);
  CHECK(text.find("/optimizer/exp_avg_sq/blocks.0.attn.w_q.bias  float32 (8)") != std::string::npos);
  CHECK(text.find("/rng/dropout  uint64 (2)  [18446744073709551615, 0]") != std::string::npos);
  CHECK(text.find("@best_accuracy = 0.3") != std::string::npos);
  CHECK(text.find("/metrics/loss  float64 (3)") != std::string::npos);
  CHECK(text.find("non-finite 1") != std::string::npos);
  CHECK(text.find(ck.config_yaml) != std::string::npos);

  // Statistics of one tensor, computed here independently.
  const Array<float>& q = ck.model[1].second;
  double lo = 1e9, hi = -1e9, sum = 0, sq = 0;
  for (float v : q) lo = std::min(lo, double(v)), hi = std::max(hi, double(v)), sum += v;
  double mean = sum / double(q.size());
  for (float v : q) sq += (v - mean) * (v - mean);
  char expect[256];
  std::snprintf(expect, sizeof expect, "/model/blocks.0.attn.w_q.weight  float32 (8, 8)  min %.6g  max %.6g  mean %.6g  std %.6g",
                lo, hi, mean, std::sqrt(sq / double(q.size())));
  CHECK(text.find(expect) != std::string::npos);

  CHECK_THROWS_AS(inspect(dir + "/none.h5"), IoError);
}

TEST_CASE("checkpoint: h5dump reads the file") {
  QKV_REQUIRE_OR_SKIP(std::system("command -v h5dump >/dev/null 2>&1") == 0, "h5dump (hdf5-tools) is not installed");
  std::string dir = test::temp_dir("ckpt_h5dump");
  std::string path = dir + "/c.h5";
  save_checkpoint(path, sample_checkpoint());
  std::string out = dir + "/dump.txt";
  int rc = std::system(("h5dump -H " + path + " > " + out + " 2>&1").c_str());
  std::string dump = read_bytes(out);
  INFO(dump);
  CHECK(rc == 0);
  CHECK(dump.find("DATASET \"blocks.0.attn.w_q.weight\"") != std::string::npos);
  CHECK(dump.find("ATTRIBUTE \"format_version\"") != std::string::npos);
  CHECK(dump.find("GROUP \"exp_avg\"") != std::string::npos);
  rc = std::system(("h5dump -d /config " + path + " > " + out + " 2>&1").c_str());
  CHECK(rc == 0);
  CHECK(read_bytes(out).find("d_model: 8") != std::string::npos);
}

TEST_CASE("save_checkpoint removes temporary files left by killed saves of the same path") {
  namespace fs = std::filesystem;
  const std::string dir = qkv::test::temp_dir("ckpt_stale_tmp");
  const std::string path = dir + "/last.h5";
  // A pid that cannot be alive (above the kernel's pid_max) and a live one (this process's parent).
  std::ofstream(path + ".tmp-999999999") << "partial";
  const std::string live = path + ".tmp-" + std::to_string(::getppid());
  std::ofstream(live) << "another process is writing";
  qkv::io::Checkpoint c;
  c.step = 1;
  qkv::io::save_checkpoint(path, c);
  CHECK_FALSE(fs::exists(path + ".tmp-999999999"));
  CHECK(fs::exists(live));
  CHECK(qkv::io::load_checkpoint(path).step == 1);
}
