// End to end through the qkv binary: a training process killed at random moments (also during
// checkpoint writes), a full disk, a run directory that disappears, a diverging run, Ctrl-C, and
// determinism across runs and thread counts. See docs/reliability.md for the promises these
// tests check.

#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>
#include <thread>

#include "reliability/run_fixtures.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace qkv;
using namespace std::chrono_literals;

namespace {

// Wait until `pred` holds (polling every `poll`), at most `timeout`.
template <class P>
bool wait_until(P pred, std::chrono::duration<double> timeout, std::chrono::microseconds poll = 1000us) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(poll);
  }
  return pred();
}

test::ProcessResult train(const std::vector<std::string>& args, const std::function<void()>& in_child = {}) {
  std::vector<std::string> a = {"train"};
  a.insert(a.end(), args.begin(), args.end());
  a.push_back("--quiet");
  return test::run_process(test::qkv_command(a), 120, in_child);
}

bool all_finite(const io::Checkpoint& c) {
  for (auto& [name, t] : c.model)
    for (float v : t)
      if (!std::isfinite(v)) return false;
  return true;
}

// One kill-and-resume trial; runs on its own thread, so it only records what it saw.
struct Trial {
  bool by_temp_file = false;   // kill when a checkpoint's temporary file is seen, else at a time
  double delay = 0;            // seconds (by time)
  int skip = 0;                // temporary files to let pass first (by temp file)
  bool killed_during_write = false, killed_before_first = false;
  std::vector<std::string> load_errors;  // checkpoints on disk after the kill that did not load
  test::ProcessResult resumed;
  std::string fingerprint, metrics;
};

void run_trial(Trial& t, const std::string& root, int index, int steps, int every) {
  const std::string id = std::to_string(index), dir = root + "/trial" + id;
  const std::string config = test::write_config(root + "/cfg" + id, test::tiny_config(dir, steps, every));
  {
    test::Child child(test::qkv_command({"train", config, "--quiet"}), root + "/out" + id, root + "/err" + id);
    if (!t.by_temp_file) {
      std::this_thread::sleep_for(std::chrono::duration<double>(t.delay));
    } else {
      int seen = 0;
      std::string last_seen;
      wait_until(
          [&] {
            auto tmps = test::temp_files(dir);
            if (!tmps.empty() && tmps[0] != last_seen) last_seen = tmps[0], ++seen;
            t.killed_during_write = !tmps.empty() && seen > t.skip;
            return t.killed_during_write || !child.running();
          },
          30s, 200us);
    }
    child.signal(SIGKILL);
    child.wait();
  }
  // (A kill before the run directory exists leaves nothing to check.)
  for (auto& f : fs::is_directory(dir) ? fs::recursive_directory_iterator(dir) : fs::recursive_directory_iterator()) {
    if (f.path().extension() != ".h5") continue;
    try {
      io::load_checkpoint(f.path().string());
    } catch (const std::exception& e) {
      t.load_errors.push_back(e.what());
    }
  }
  std::vector<std::string> args = {config};
  t.killed_before_first = !fs::exists(dir + "/last.h5");
  // Killed before last.h5 existed: nothing to resume, and the directory holds a started run,
  // which qkv replaces only when told to.
  if (t.killed_before_first) args.push_back("--overwrite");
  else args.insert(args.end(), {"--resume", dir + "/last.h5"});
  t.resumed = train(args);
  if (t.resumed.exit_code != 0) return;
  t.fingerprint = test::checkpoint_fingerprint(dir + "/last.h5");
  t.metrics = test::deterministic_metrics(dir);
}

}  // namespace

TEST_CASE("training faults: SIGKILL at 20 random moments, incl. during checkpoint writes - resume matches an uninterrupted run") {
  const std::string root = test::temp_dir("faults_kill");
  const int steps = 18, every = 3;  // 6 checkpoints (12 fsync'ed saves): about 0.4 s per run
  const std::string ref_dir = root + "/reference";
  auto ref = train({test::write_config(root + "/ref_cfg", test::tiny_config(ref_dir, steps, every))});
  REQUIRE_MESSAGE(ref.exit_code == 0, ref.describe());
  const std::string want_ckpt = test::checkpoint_fingerprint(ref_dir + "/last.h5");
  const std::string want_metrics = test::deterministic_metrics(ref_dir);
  MESSAGE("uninterrupted run: " << ref.seconds << " s");

  // Seeded kill moments: even trials at a random time of the run, odd ones the moment the n-th
  // checkpoint temporary file appears. Two trials run at a time (one per core).
  Generator rng(2024);
  std::vector<Trial> trials(20);
  for (std::size_t i = 0; i < trials.size(); ++i) {
    trials[i].by_temp_file = i % 2 == 1;
    trials[i].delay = rng.uniform(0.05, 1.0) * ref.seconds;
    trials[i].skip = int(rng.uniform(0.0, 2.0 * steps / every - 1));
  }
  std::vector<std::string> failures(trials.size());
  auto guarded = [&](std::size_t i) {
    try {
      run_trial(trials[i], root, int(i), steps, every);
    } catch (const std::exception& e) {
      failures[i] = e.what();
    }
  };
  for (std::size_t i = 0; i < trials.size(); i += 2) {
    std::thread other(guarded, i + 1);
    guarded(i);
    other.join();
  }
  for (auto& f : failures) REQUIRE_MESSAGE(f.empty(), f);
  int during_write = 0, before_first = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const Trial& t = trials[i];
    CAPTURE(i);
    for (auto& e : t.load_errors) CHECK_MESSAGE(false, "a checkpoint left by the kill does not load: ", e);
    REQUIRE_MESSAGE(t.resumed.exit_code == 0, t.resumed.describe());
    CHECK(t.fingerprint == want_ckpt);
    CHECK(t.metrics == want_metrics);
    during_write += t.killed_during_write;
    before_first += t.killed_before_first;
  }
  MESSAGE("kills seen during a checkpoint write: " << during_write << ", before the first checkpoint: " << before_first);
  CHECK(during_write >= 5);
}

TEST_CASE("training faults: a full disk is a clear error and the previous checkpoint stays intact") {
  const std::string root = test::temp_dir("faults_full_disk");
  const std::string dir = root + "/run";
  const std::string config = test::write_config(root, test::tiny_config(dir, 40, 2));
  auto first = train({config, "--stop-after", "4"});
  REQUIRE_MESSAGE(first.exit_code == 0, first.describe());
  const std::string before = test::read_file(dir + "/last.h5");
  REQUIRE(before.size() > 1000);

  // Every file the child writes may hold at most half a checkpoint: the next save fails.
  const rlim_t limit = before.size() / 2;
  auto r = train({config, "--resume", dir + "/last.h5"}, [limit] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &rl);
  });
  CAPTURE(r.describe());
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(dir) != std::string::npos);               // names the file it could not write
  CHECK(r.err.find("File too large") != std::string::npos);  // and why (EFBIG)
  CHECK(test::read_file(dir + "/last.h5") == before);
  CHECK(test::temp_files(root).empty());
  CHECK(io::load_checkpoint(dir + "/last.h5").step == 4);
}

TEST_CASE("training faults: a run directory that disappears while training is a clear error - the last checkpoint survives") {
  const std::string root = test::temp_dir("faults_vanishing_dir");
  const std::string dir = root + "/run";
  const std::string config = test::write_config(root, test::tiny_config(dir, 100000, 5));
  test::Child child(test::qkv_command({"train", config, "--quiet"}), root + "/out", root + "/err");
  REQUIRE(wait_until([&] { return fs::exists(dir + "/last.h5"); }, 30s));
  // Root ignores permissions, so take the directory away instead: move it, and put a file where
  // it was. Every later write in the run directory fails (ENOTDIR).
  fs::rename(dir, root + "/moved");
  test::write_file(dir, "in the way\n");
  auto r = child.wait(30);
  std::string err = test::read_file(root + "/err");
  CAPTURE(err);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 1);
  CHECK(err.find(dir) != std::string::npos);
  io::Checkpoint kept = io::load_checkpoint(root + "/moved/last.h5");
  CHECK(kept.step > 0);
  CHECK(all_finite(kept));
}

TEST_CASE("training faults: a diverging run stops at the step where the loss turns non-finite, keeping the last good checkpoint") {
  const std::string root = test::temp_dir("faults_diverge");
  const std::string dir = root + "/run";
  const std::string config =
      test::write_config(root, test::tiny_config(dir, 200, 1, "{name: sgd, lr: 1.0e6, clip_grad_norm: 0, weight_decay: 0}"));
  auto r = train({config});
  CAPTURE(r.describe());
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 3);
  std::smatch m;
  REQUIRE(std::regex_search(r.err, m, std::regex("diverged at step ([0-9]+): (loss|gradient norm) is (-?nan|-?inf)")));
  const long bad_step = std::stol(m[1]);
  CHECK(bad_step > 0);
  CHECK(bad_step < 200);
  // The last checkpoint is the one before the bad step, and it is finite.
  io::Checkpoint last = io::load_checkpoint(dir + "/last.h5");
  CHECK(last.step == bad_step - 1);
  CHECK(all_finite(last));
}

TEST_CASE("training faults: SIGINT saves a final checkpoint and exits 130 - resuming from it continues") {
  const std::string root = test::temp_dir("faults_sigint");
  const std::string dir = root + "/run";
  const std::string config = test::write_config(root, test::tiny_config(dir, 100000, 1000));
  test::Child child(test::qkv_command({"train", config}), root + "/out", root + "/err");
  // Wait until training has started (the first evaluation is in metrics.csv).
  REQUIRE(wait_until([&] { return test::read_file(dir + "/metrics.csv").find("\n5,") != std::string::npos; }, 30s));
  child.signal(SIGINT);
  auto r = child.wait(30);
  std::string err = test::read_file(root + "/err");
  CAPTURE(err);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 130);
  CHECK(err.find("interrupted") != std::string::npos);
  io::Checkpoint last = io::load_checkpoint(dir + "/last.h5");
  CHECK(last.step >= 5);
  CHECK(test::temp_files(dir).empty());
  auto resumed = train({config, "--resume", dir + "/last.h5", "--stop-after", "3"});
  CHECK_MESSAGE(resumed.exit_code == 0, resumed.describe());
  CHECK(io::load_checkpoint(dir + "/last.h5").step == last.step + 3);
}

TEST_CASE("determinism: the same config and seed give bitwise identical checkpoints and metrics, with 1 or 2 threads") {
  const std::string root = test::temp_dir("determinism_cli");
  std::vector<std::string> prints, metrics;
  for (const char* threads : {"1", "1", "2"}) {
    const std::string dir = root + "/run" + std::to_string(prints.size());
    auto r = train({test::write_config(dir + "_cfg", test::tiny_config(dir, 20, 10)), "--threads", threads});
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
    prints.push_back(test::checkpoint_fingerprint(dir + "/last.h5") + test::checkpoint_fingerprint(dir + "/best.h5") +
                     test::checkpoint_fingerprint(dir + "/checkpoints/step_0000010.h5"));
    metrics.push_back(test::deterministic_metrics(dir));
  }
  CHECK(metrics[0].size() > 100);
  CHECK(prints[0] == prints[1]);
  CHECK(metrics[0] == metrics[1]);
  CHECK(prints[0] == prints[2]);
  CHECK(metrics[0] == metrics[2]);
}
