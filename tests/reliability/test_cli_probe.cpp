// The qkv command reads a checkpoint first in a probe child process (src/cli/probe.cpp), so that a
// file that crashes HDF5 1.10.8 itself gives an error naming the file, not a segfault. The inputs
// are the fuzzer's HDF5-crash regressions (tests/fuzz/regressions/checkpoint/hdf5-*.h5), resealed
// with a valid qkv header so that they get past the checksum and reach HDF5, as a file crafted on
// purpose would.

#include <cstdlib>
#include <filesystem>

#include "reliability/run_fixtures.hpp"
#include "test_paths.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace qkv;

namespace {

std::vector<fs::path> hdf5_crash_inputs() {
  std::vector<fs::path> out;
  for (auto& e : fs::directory_iterator(fs::path(QKV_SOURCE_DIR) / "tests/fuzz/regressions/checkpoint"))
    if (e.path().filename().string().rfind("hdf5-", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("cli probe: checkpoints crafted to crash HDF5 give an error naming the file, never a signal") {
  const std::string root = test::temp_dir("cli_probe");
  const std::string config = test::write_config(root, test::tiny_config(root + "/run", 4, 2));
  const auto inputs = hdf5_crash_inputs();
  REQUIRE(inputs.size() >= 5);
  int crashes_without_probe = 0;
  for (const fs::path& input : inputs) {
    const std::string file = root + "/" + input.filename().string();
    fs::copy_file(input, file, fs::copy_options::overwrite_existing);
    io::seal_checkpoint_file(file);  // a valid qkv header: the bytes after it reach HDF5

    // `qkv inspect` without the probe: does this input crash HDF5 here? (Most of them do only
    // under AddressSanitizer or with a particular heap state; some segfault in any build.)
    const auto bare = test::run_process(test::qkv_command({"inspect", file}), 60, [] { setenv("QKV_NO_PROBE", "1", 1); });
    // (In a QKV_SANITIZE build, AddressSanitizer ends a crash with its report and exit status 1.)
    const bool crashes = bare.signal != 0 || bare.err.find("ERROR: AddressSanitizer") != std::string::npos;
    crashes_without_probe += crashes;

    for (const std::vector<std::string>& args : {std::vector<std::string>{"inspect", file}, {"eval", file},
                                                  {"train", config, "--quiet", "--resume", file}}) {
      CAPTURE(args[0]);
      CAPTURE(file);
      const auto r = test::run_process(test::qkv_command(args), 60);
      CHECK_MESSAGE(r.signal == 0, r.describe());
      if (args[0] == "inspect") {
        // inspect shows what it can read of a damaged file, so it may also succeed; when the
        // unprobed run crashed, the probed one must say so.
        CHECK_MESSAGE((r.exit_code == 0 || r.exit_code == 1), r.describe());
        if (crashes) CHECK_MESSAGE(r.err.find("crashed the HDF5 library") != std::string::npos, r.describe());
      } else {
        // eval and --resume must refuse the file (whether the probe or the loader found it bad)
        CHECK_MESSAGE(r.exit_code == 1, r.describe());
        CHECK_MESSAGE(r.err.find(file) != std::string::npos, r.describe());
      }
    }
  }
  // On Debian 12's HDF5 1.10.8 at least two of these inputs crash `qkv inspect` without the probe, so the
  // probe above really was what stood between them and a crash.
  CHECK(crashes_without_probe >= 2);
  CHECK_FALSE(fs::exists(root + "/run/last.h5"));  // no --resume went on to train
}
