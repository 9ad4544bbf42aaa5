// End to end: damaged or mismatched checkpoints given to `qkv train --resume` and `qkv eval`.
// Each must fail with a non-zero exit status (no signal) and a message naming the file and the
// problem; none may run on with a silently wrong model.

#include <hdf5.h>

#include <filesystem>

#include "qkv/io/checkpoint.hpp"
#include "reliability/run_fixtures.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace qkv;

namespace {

// Opens a checkpoint for editing with the HDF5 C API; on scope exit closes it and reseals the qkv
// header, so the edit reaches the loader's checks after the checksum.
struct H5Edit {
  explicit H5Edit(const std::string& path) : path(path), file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)) {
    REQUIRE(file >= 0);
  }
  ~H5Edit() {
    H5Fclose(file);
    io::seal_checkpoint_file(path);
  }
  void remove(const char* name) { REQUIRE(H5Ldelete(file, name, H5P_DEFAULT) >= 0); }
  void float_dataset(const char* name, std::vector<hsize_t> dims) {
    hid_t space = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
    hid_t d = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(d >= 0);
    std::vector<float> zeros(numel(Shape(dims.begin(), dims.end())), 0.0f);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
    H5Dclose(d);
    H5Sclose(space);
  }
  void int_attribute(const char* name, long long value) {
    hid_t a = H5Aopen_by_name(file, "/", name, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(a >= 0);
    H5Awrite(a, H5T_NATIVE_LLONG, &value);
    H5Aclose(a);
  }
  void config_text(const std::string& text) {
    remove("/config");
    hid_t t = H5Tcopy(H5T_C_S1);  // fixed-length, as qkv writes strings
    H5Tset_size(t, text.size());
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(file, "/config", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
    H5Dclose(d);
    H5Sclose(space);
    H5Tclose(t);
  }
  std::string path;
  hid_t file;
};

}  // namespace

TEST_CASE("cli checkpoint errors: damaged and mismatched checkpoints fail resume and eval with a clear message") {
  const std::string root = test::temp_dir("cli_checkpoint_errors");
  const std::string dir = root + "/run";
  const std::string config = test::write_config(root, test::tiny_config(dir, 10, 5));
  auto ok = test::run_process(test::qkv_command({"train", config, "--quiet"}));
  REQUIRE_MESSAGE(ok.exit_code == 0, ok.describe());
  const std::string good = dir + "/last.h5";
  const std::string bytes = test::read_file(good);
  io::Checkpoint ck = io::load_checkpoint(good);
  const std::string first_tensor = "/model/" + ck.model.front().first;

  // Sanity: the good checkpoint evaluates and resumes.
  auto e = test::run_process(test::qkv_command({"eval", good}));
  REQUIRE_MESSAGE(e.exit_code == 0, e.describe());

  // A checkpoint of a wider model, made by a real run.
  const std::string wide_dir = root + "/wide";
  const std::string wide_config = test::write_config(
      root + "/wide_cfg", test::tiny_config(wide_dir, 5, 5).replace(test::tiny_config(wide_dir, 5, 5).find("d_model: 16"), 11, "d_model: 32"));
  auto w = test::run_process(test::qkv_command({"train", wide_config, "--quiet"}));
  REQUIRE_MESSAGE(w.exit_code == 0, w.describe());

  struct Case {
    const char* what;
    std::function<void(const std::string&)> make;  // writes the bad file at the given path
    std::vector<const char*> expect;               // in stderr of both commands
    bool eval_too = true;                          // eval reads the config inside the file
    bool resume_too = true;  // resume builds the model from the command's config, not the file's
  };
  const std::vector<Case> cases = {
      {"truncated to half", [&](auto& p) { test::write_file(p, bytes.substr(0, bytes.size() / 2)); }, {"load_checkpoint", "truncated"}},
      {"truncated by 1 byte", [&](auto& p) { test::write_file(p, bytes.substr(0, bytes.size() - 1)); }, {"truncated: "}},
      // Before the whole-file checksum this trained on from a silently different parameter.
      {"one flipped bit in the last tensor bytes",
       [&](auto& p) {
         std::string b = bytes;
         b[b.size() - 3] ^= 0x10;
         test::write_file(p, b);
       },
       {"checksum mismatch", "--reseal"}},
      {"truncated to 100 bytes", [&](auto& p) { test::write_file(p, bytes.substr(0, 100)); }, {"load_checkpoint"}},
      {"empty file", [&](auto& p) { test::write_file(p, ""); }, {"empty"}},
      {"not HDF5", [&](auto& p) { test::write_file(p, "model:\n  d_model: 16\n"); }, {"not a qkv checkpoint (no qkv header"}},
      {"another format version",
       [&](auto& p) {
         test::write_file(p, bytes);
         H5Edit(p).int_attribute("format_version", 99);
       },
       {"format_version 99"}},
      {"a missing parameter",
       [&](auto& p) {
         test::write_file(p, bytes);
         H5Edit(p).remove(first_tensor.c_str());
       },
       {"missing", ck.model.front().first.c_str()}},
      {"a missing group",
       [&](auto& p) {
         test::write_file(p, bytes);
         H5Edit(p).remove("/optimizer");
       },
       {"/optimizer"}},
      {"a parameter of the wrong shape",
       [&](auto& p) {
         test::write_file(p, bytes);
         H5Edit h(p);
         h.remove(first_tensor.c_str());
         h.float_dataset(first_tensor.c_str(), {3, 5});
       },
       {ck.model.front().first.c_str(), "(3, 5)"}},
      {"a checkpoint of another model", [&](auto& p) { fs::copy_file(wide_dir + "/last.h5", p); }, {"model.d_model: checkpoint 32, config 16", "another model"}, false},
      {"a config that does not match the tensors",
       [&](auto& p) {
         test::write_file(p, bytes);
         H5Edit(p).config_text(test::tiny_config(dir, 10, 5).replace(test::tiny_config(dir, 10, 5).find("d_model: 16"), 11,
                                                                    "d_model: 32"));
       },
       {"shape of"}, true, false},
      {"a directory", [&](auto& p) { fs::create_directories(p); }, {"directory"}},
      {"a file that does not exist", [&](auto&) {}, {"No such file"}},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const std::string bad = root + "/bad" + std::to_string(n++) + ".h5";
    c.make(bad);
    std::vector<std::vector<std::string>> commands;
    if (c.resume_too) commands.push_back({"train", config, "--quiet", "--resume", bad, "--out", root + "/resumed"});
    if (c.eval_too) commands.push_back({"eval", bad});
    for (auto& args : commands) {
      CAPTURE(args[0]);
      auto r = test::run_process(test::qkv_command(args));
      CAPTURE(r.describe());
      CHECK(r.signal == 0);
      CHECK(r.exit_code != 0);
      CHECK(r.exit_code != 130);
      CHECK(r.err.find(bad) != std::string::npos);
      for (const char* s : c.expect) CHECK_MESSAGE(r.err.find(s) != std::string::npos, "stderr lacks: ", s);
      CHECK(r.err.find("terminate") == std::string::npos);
    }
  }
  // The good checkpoint was never touched by any of this.
  CHECK(test::read_file(good) == bytes);
}
