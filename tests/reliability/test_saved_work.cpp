// Nothing a user saved is lost, no bad number passes: the classes of hostile input of
// docs/reliability.md ("Nothing saved is lost"), each through the qkv command. Every case says
// what was wrong (the flag, key, file, dataset or element), exits non-zero and leaves every file
// it did not create as it was.

#include <hdf5.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "io/checkpoint_edit.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/io/files.hpp"
#include "reliability/run_fixtures.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace qkv;

namespace {

// A finished tiny run in `dir` (its checkpoints, metrics and config).
std::string finished_run(const std::string& root, const std::string& name, int steps = 12) {
  const std::string dir = root + "/" + name;
  const std::string config = test::write_config(root + "/" + name + "_cfg", test::tiny_config(dir, steps, 4));
  auto r = test::run_process(test::qkv_command({"train", config, "--quiet"}));
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  return dir;
}

// The bytes of every file under `dir`, by relative path: what must not change.
std::map<std::string, std::string> contents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = test::read_file(e.path().string());
  return out;
}

void expect_refused(const test::ProcessResult& r, int code, const std::vector<std::string>& expect) {
  CHECK_MESSAGE(r.exit_code == code, r.describe());
  for (auto& s : expect) CHECK_MESSAGE(r.err.find(s) != std::string::npos, "stderr lacks: ", s, "\n", r.describe());
}

}  // namespace

TEST_CASE("saved work: a run directory holding a run is refused, kept byte for byte, and replaced only with --overwrite") {
  const std::string root = test::temp_dir("saved_run_dir");
  const std::string dir = finished_run(root, "done", 12);
  const auto before = contents(dir);
  REQUIRE(before.count("last.h5"));
  const std::string config = root + "/done_cfg/config.yaml";
  const std::string shorter = test::write_config(root + "/short_cfg", test::tiny_config(dir, 4, 2));

  // The same config again, another config into the same directory, and --out naming it.
  for (const auto& args : std::vector<std::vector<std::string>>{{"train", config, "--quiet"},
                                                                {"train", shorter, "--quiet"},
                                                                {"train", shorter, "--quiet", "--out", dir}}) {
    expect_refused(test::run_process(test::qkv_command(args)), 2,
                   {"run directory " + dir + " (", "holds a run (", "last.h5", "--resume " + dir + "/last.h5", "--overwrite"});
    CHECK(contents(dir) == before);
  }
  // Resuming another run's checkpoint into it is refused too.
  const std::string other = finished_run(root, "other", 4);
  expect_refused(test::run_process(test::qkv_command({"train", config, "--quiet", "--resume", other + "/last.h5"})), 2,
                 {"is not one of its checkpoints", "--overwrite"});
  CHECK(contents(dir) == before);
  // An empty --out is an error, not "use run.out".
  expect_refused(test::run_process(test::qkv_command({"train", shorter, "--quiet", "--out", ""})), 2, {"--out: empty"});
  CHECK(contents(dir) == before);
  // --resume of the run's own checkpoint continues it; --overwrite replaces it.
  auto resumed = test::run_process(test::qkv_command({"train", config, "--quiet", "--resume", dir + "/last.h5"}));
  CHECK_MESSAGE(resumed.exit_code == 0, resumed.describe());
  auto replaced = test::run_process(test::qkv_command({"train", shorter, "--quiet", "--overwrite"}));
  REQUIRE_MESSAGE(replaced.exit_code == 0, replaced.describe());
  CHECK(io::load_checkpoint(dir + "/last.h5").step == 4);
  CHECK(!fs::exists(dir + "/checkpoints/step_0000012.h5"));  // the old run's files went with it
  // A run directory that cannot be made: exit 2, naming it and the reason, nothing created.
  test::write_file(root + "/a_file", "x");
  expect_refused(test::run_process(test::qkv_command({"train", shorter, "--quiet", "--out", root + "/a_file/run"})), 2,
                 {"run directory " + root + "/a_file/run (--out)", "cannot create it: Not a directory"});
  expect_refused(test::run_process(test::qkv_command({"train", shorter, "--quiet", "--out", "/proc/qkv_run"})), 2,
                 {"run directory /proc/qkv_run", "cannot create it"});
}

TEST_CASE("saved work: an output that is an input, a directory or not a regular file is refused before any work") {
  const std::string root = test::temp_dir("saved_outputs");
  const std::string dir = finished_run(root, "run", 8);
  const std::string ckpt = dir + "/best.h5";
  const auto before = contents(dir);
  fs::create_directories(root + "/a_dir");
  const std::string fifo = root + "/a_fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {{"attention", ckpt, "--out", ckpt}, {"--out " + ckpt, "an input of this command; not overwritten"}},
      {{"attention", ckpt, "--out", dir + "/./best.h5"}, {"an input of this command"}},  // another spelling
      {{"logits", ckpt, "--out", ckpt}, {"--out " + ckpt, "an input"}},
      {{"heads", ckpt, "--csv", ckpt}, {"--csv " + ckpt, "an input"}},
      {{"ablate", ckpt, "--csv", ckpt}, {"--csv " + ckpt, "an input"}},
      {{"view", ckpt, "--out", ckpt}, {"--out " + ckpt, "an input"}},
      {{"view", ckpt, "--out", root + "/a_dir"}, {"is a directory; give a file name"}},
      {{"attention", ckpt, "--out", root + "/a_dir"}, {"is a directory"}},
      {{"ablate", ckpt, "--prune", "--plot", root + "/a_dir"}, {"--plot " + root + "/a_dir", "is a directory"}},
      {{"view", ckpt, "--out", fifo}, {"is not a regular file", "not replaced"}},
      {{"attention", ckpt, "--out", "/dev/full"}, {"/dev/full: is not a regular file"}},
      {{"view", ckpt, "--out", "/nonexistent/x.html"}, {"directory /nonexistent: No such file or directory"}},
      {{"logits", ckpt, "--out", root + "/a_fifo/x.txt"}, {"--out " + root + "/a_fifo/x.txt: Not a directory"}},
  };
  for (const Case& c : cases) {
    std::string line;
    for (auto& a : c.args) line += a + " ";
    CAPTURE(line);
    auto r = test::run_process(test::qkv_command(c.args));
    CHECK_MESSAGE(r.exit_code == 1, r.describe());
    for (auto& s : c.expect) CHECK_MESSAGE(r.err.find(s) != std::string::npos, "stderr lacks: ", s, "\n", r.describe());
    CHECK(contents(dir) == before);
    struct stat st;
    CHECK((::stat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)));
  }
  CHECK(!fs::exists(root + "/a_dir.csv"));  // nothing written beside a refused output
  CHECK(!fs::exists(root + "/a_dir.png"));
  CHECK(fs::is_empty(root + "/a_dir"));
  // A good output is written whole, and no temporary file stays.
  auto ok = test::run_process(test::qkv_command({"heads", ckpt, "--csv", root + "/heads.csv"}));
  CHECK_MESSAGE(ok.exit_code == 0, ok.describe());
  CHECK(test::read_file(root + "/heads.csv").rfind("layer,", 0) == 0);
  CHECK(test::temp_files(root).empty());
}

TEST_CASE("saved work: the atomic writer replaces a file whole or not at all and names the OS reason") {
  const std::string root = test::temp_dir("saved_atomic");
  const std::string path = root + "/out.txt";
  io::write_file_atomic(path, "first");
  io::write_file_atomic(path, "second");
  CHECK(test::read_file(path) == "second");
  CHECK(test::temp_files(root).empty());
  CHECK_THROWS_WITH_AS(io::write_file_atomic(root + "/missing/out.txt", "x"),
                       doctest::Contains(("cannot write " + root + "/missing/out.txt: No such file or directory").c_str()), io::IoError);
  CHECK_THROWS_WITH_AS(io::write_file_atomic(root, "x"), doctest::Contains("is a directory"), io::IoError);
  CHECK_THROWS_WITH_AS(io::read_file("/dev/zero", 100, "checkpoint"), doctest::Contains("/dev/zero: is not a regular file"),
                       io::IoError);
  test::write_file(root + "/big", std::string(2000, 'x'));
  CHECK_THROWS_WITH_AS(io::read_file(root + "/big", 1000, "config"), doctest::Contains("2000 bytes, more than the 1000 this reads"),
                       io::IoError);
}

TEST_CASE("saved work: a checkpoint with a non-finite weight, moment or training state is refused by every command") {
  const std::string root = test::temp_dir("saved_nonfinite");
  const std::string dir = finished_run(root, "run", 8);
  const std::string good = dir + "/last.h5";
  const std::string bytes = test::read_file(good);
  const io::Checkpoint ck = io::load_checkpoint(good);
  const std::string tensor = ck.model.front().first, moment = ck.optimizer.front().first;
  auto poke = [&](const std::string& dataset, float value) {
    return [=](const std::string& p) {
      test::write_file(p, bytes);
      test::edit(p, [&](hid_t f) {
        hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
        hid_t space = H5Dget_space(d);
        std::vector<float> v(std::size_t(H5Sget_simple_extent_npoints(space)));
        H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
        v[1] = value;
        H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
        H5Sclose(space);
        H5Dclose(d);
      });
    };
  };
  auto train_attribute = [&](const std::string& name, double value) {
    return [=](const std::string& p) {
      test::write_file(p, bytes);
      test::edit(p, [&](hid_t f) {
        // HDF5 1.10 cannot rewrite an attribute of a creation-ordered group in place: replace it.
        REQUIRE(H5Adelete_by_name(f, "/train", name.c_str(), H5P_DEFAULT) >= 0);
        hid_t space = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate_by_name(f, "/train", name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        REQUIRE(H5Awrite(a, H5T_NATIVE_DOUBLE, &value) >= 0);
        H5Aclose(a);
        H5Sclose(space);
      });
    };
  };
  struct Case {
    const char* what;
    std::function<void(const std::string&)> make;
    std::vector<std::string> expect;
    bool resume_only = false;
  };
  const std::vector<Case> cases = {
      {"NaN weight", poke("/model/" + tensor, NAN), {"/model/" + tensor + "[", "is nan", "finite values only"}},
      {"inf weight", poke("/model/" + tensor, INFINITY), {"/model/" + tensor + "[", "is inf"}},
      {"NaN Adam moment", poke("/optimizer/" + moment, NAN), {"/optimizer/" + moment + "[", "is nan"}},
      {"NaN data position", train_attribute("data_position", NAN), {"'data_position' is nan", "expected a whole number >= 0"}, true},
      {"1e30 data position", train_attribute("data_position", 1e30), {"'data_position' is 1e+30"}, true},
      {"negative step count", train_attribute("train_loss_steps", -3), {"'train_loss_steps' is -3"}, true},
      {"accuracy above 1", train_attribute("best_token_accuracy", 7), {"'best_token_accuracy' is 7", "[0, 1]"}, true},
      {"ragged metrics",
       [&](const std::string& p) {
         test::write_file(p, bytes);
         test::edit(p, [](hid_t f) {
           H5Ldelete(f, "/metrics/eval_loss", H5P_DEFAULT);
           hsize_t n = 1;
           double v = 1;
           hid_t space = H5Screate_simple(1, &n, nullptr);
           hid_t d = H5Dcreate2(f, "/metrics/eval_loss", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
           H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v);
           H5Dclose(d);
           H5Sclose(space);
         });
       },
       {"/metrics/eval_loss has 1 rows", "one row per evaluation"},
       true},
  };
  const std::string config = root + "/run_cfg/config.yaml";
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string bad = root + "/bad.h5";
    c.make(bad);
    std::vector<std::vector<std::string>> commands = {{"train", config, "--quiet", "--overwrite", "--out", root + "/resumed", "--resume", bad}};
    if (!c.resume_only)
      commands.insert(commands.end(), {{"eval", bad},
                                       {"heads", bad},
                                       {"ablate", bad, "--heads", "0.0"},
                                       {"explain", bad, "--layer", "0", "--head", "0", "--query", "1"},
                                       {"view", bad, "--out", root + "/v.html"},
                                       {"attention", bad, "--out", root + "/a.csv"}});
    for (auto& args : commands) {
      CAPTURE(args[0]);
      auto r = test::run_process(test::qkv_command(args));
      CHECK_MESSAGE((r.exit_code == 1 || r.exit_code == 2), r.describe());
      CHECK(r.signal == 0);
      for (auto& s : c.expect) CHECK_MESSAGE(r.err.find(s) != std::string::npos, "stderr lacks: ", s, "\n", r.describe());
      CHECK(r.err.find("diverged") == std::string::npos);
    }
  }
  CHECK(!fs::exists(root + "/v.html"));
  CHECK(!fs::exists(root + "/a.csv"));
}

TEST_CASE("saved work: a diverging run names the last good checkpoint only when it exists") {
  const std::string root = test::temp_dir("saved_diverge");
  const std::string config = test::write_config(root + "/cfg", test::tiny_config(root + "/run", 10, 50, "{lr: 1.0e+12, clip_grad_norm: 0}"));
  auto r = test::run_process(test::qkv_command({"train", config, "--quiet"}));
  CHECK_MESSAGE(r.exit_code == 3, r.describe());
  CHECK(r.err.find("training diverged at step") != std::string::npos);
  CHECK(!fs::exists(root + "/run/last.h5"));
  CHECK(r.err.find("last good checkpoint") == std::string::npos);
  CHECK(r.err.find("no checkpoint was saved") != std::string::npos);
}

TEST_CASE("saved work: memory bombs in configs, stored configs and files end in a clear error, quickly") {
  const std::string root = test::temp_dir("saved_bombs");
  const std::string dir = finished_run(root, "run", 4);
  struct Case {
    std::vector<std::string> args;
    int code;
    std::vector<std::string> expect;
  };
  const std::string config = root + "/run_cfg/config.yaml";
  const std::vector<Case> cases = {
      {{"train", config, "--quiet", "--out", root + "/x", "--set", "task.eval_size=1000000000"}, 2, {"task.eval_size", "of memory available"}},
      {{"train", config, "--quiet", "--out", root + "/x", "--set", "task.eval_size=1e9"}, 2, {"task.eval_size", "not an integer"}},
      {{"train", config, "--quiet", "--out", root + "/x", "--set", "task.length=50000000"}, 2, {"task.length", "of memory available"}},
      {{"eval", dir + "/last.h5", "--set", "task.eval_size=1000000000"}, 2, {"task.eval_size", "of memory available"}},
      {{"inspect", "/dev/zero"}, 1, {"/dev/zero", "is not a regular file"}},
      {{"eval", "/dev/zero"}, 1, {"/dev/zero", "is not a regular file"}},
      {{"train", "/dev/zero"}, 2, {"/dev/zero", "is not a regular file"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args[0]);
    CAPTURE(c.args.back());
    auto r = test::run_process(test::qkv_command(c.args), 30);
    expect_refused(r, c.code, c.expect);
    CHECK(r.seconds < 10);
    CHECK(r.err.find("bad_alloc") == std::string::npos);
  }
  CHECK(!fs::exists(root + "/x"));
}

TEST_CASE("saved work: every number on the command line is parsed once, with its flag, range and what was found") {
  const std::string root = test::temp_dir("saved_numbers");
  const std::string dir = finished_run(root, "run", 4);
  const std::string ckpt = dir + "/last.h5";
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {{"attention", ckpt, "--example", ""}, {"--example", "expected a whole number >= 0, found ''"}},
      {{"attention", ckpt, "--example", "-1"}, {"--example", "found '-1'", "negative numbers are not allowed"}},
      {{"view", ckpt, "--out", root + "/v.html", "--example", "18446744073709551616"}, {"--example", "(too large)"}},
      {{"explain", ckpt, "--layer", "", "--head", "0", "--query", "0"}, {"--layer", "found ''"}},
      {{"explain", ckpt, "--layer", "0", "--head", "-1", "--query", "0"}, {"--head", "found '-1'"}},
      {{"explain", ckpt, "--layer", "0", "--head", "0", "--query", "x"}, {"--query", "found 'x'"}},
      {{"generate", ckpt, "--prompt", "1", "--ids", "--temperature", ""}, {"--temperature", "found ''"}},
      {{"generate", ckpt, "--prompt", "1", "--ids", "--temperature", "nan"}, {"--temperature", "found 'nan'"}},
      {{"generate", ckpt, "--prompt", "1", "--ids", "--seed", "-1"}, {"--seed", "found '-1'"}},
      {{"generate", ckpt, "--prompt", "1", "--ids", "--seed", "18446744073709551616"}, {"--seed", "too large"}},
      {{"generate", ckpt, "--prompt", "1", "--ids", "--top-p", "0"}, {"--top-p", "(0, 1]"}},
      {{"sweep", root + "/none.yaml", "--seeds", "-1"}, {"--seeds", "found '-1'"}},
      {{"train", root + "/run_cfg/config.yaml", "--threads", "1e30"}, {"--threads", "found '1e30'"}},
      {{"eval", ckpt, "--threads", "99999999999"}, {"--threads", "in [0, 1024]"}},
      {{"explain", ckpt, "--querry", "0"}, {"unknown option '--querry'", "did you mean '--query'?"}},
  };
  for (const Case& c : cases) {
    std::string line;
    for (auto& a : c.args) line += "'" + a + "' ";
    CAPTURE(line);
    auto r = test::run_process(test::qkv_command(c.args));
    expect_refused(r, 2, c.expect);
    CHECK(r.err.find("18446744073709551615") == std::string::npos);
  }
}
