// A program that links libqkv alone (not the qkv command's application layer) and drives training
// through the API: the library trains, stops when asked without a signal, resumes exactly, and
// leaves the process as it found it (environment, SIGINT handler, process image).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "qkv/qkv.hpp"

extern char** environ;

namespace {

using namespace qkv;

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  std::sort(env.begin(), env.end());
  return env;
}

extern "C" void program_handler(int) {}

struct ProcessState {
  std::vector<std::string> env = environment();
  void (*sigint)(int) = nullptr;
  pid_t pid = ::getpid();
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  ProcessState() {
    struct sigaction sa;
    sigaction(SIGINT, nullptr, &sa);
    sigint = sa.sa_handler;
  }
};

config::Config tiny() {
  return config::parse_config("{}", "tiny.yaml",
                              {"model.d_model=32", "model.heads=2", "model.layers=1", "model.d_ff=64", "task.vocab=8",
                               "task.length=8", "task.eval_size=64", "train.batch_size=16", "train.steps=12",
                               "train.eval_every=4", "train.checkpoint_every=4", "schedule.warmup_steps=2", "optimizer.lr=0.003"});
}

// Train `cfg` to its end (or until `stop_at`), keeping the last checkpoint the loop asked for.
train::RunResult train_to(train::Session& s, std::int64_t stop_at, io::Checkpoint& last) {
  train::Callbacks cb;
  cb.stop_requested = [&] { return stop_at > 0 && s.state().step >= stop_at; };
  cb.on_checkpoint = [&](train::Session& session, const std::string& name) {
    if (name == "last.h5") last = session.checkpoint();
  };
  return train::train_loop(s, {}, cb);
}

}  // namespace

TEST_CASE("library: a program trains through the API, stops it without a signal, resumes exactly, and its process is unchanged") {
  std::signal(SIGINT, program_handler);  // the program's own handler: the library must keep it
  const ProcessState before;
  const config::Config cfg = tiny();
  dist::Comm single;

  io::Checkpoint straight, stopped, resumed;
  {
    train::Session s(cfg, single);
    const train::RunResult r = train_to(s, 0, straight);
    CHECK(r.stop_reason == "steps");
    CHECK(r.step == 12);
  }
  {
    train::Session s(cfg, single);
    const train::RunResult r = train_to(s, 6, stopped);
    CHECK(r.stop_reason == "interrupted");
    CHECK(r.step == 6);
    CHECK(stopped.step == 6);  // the loop saved where it stopped
  }
  {
    train::Session s(cfg, single);
    s.resume(stopped, "stopped");
    CHECK(s.state().step == 6);
    const train::RunResult r = train_to(s, 0, resumed);
    CHECK(r.stop_reason == "steps");
  }
  // Bit for bit the run that was never stopped.
  REQUIRE(resumed.model.size() == straight.model.size());
  for (std::size_t i = 0; i < straight.model.size(); ++i) {
    CAPTURE(straight.model[i].first);
    const Array<float>& a = straight.model[i].second;
    const Array<float>& b = resumed.model[i].second;
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  CHECK(resumed.metrics.size() == straight.metrics.size());

  // And a model loaded back from a checkpoint, evaluated: the other half of the library's use.
  const std::string dir = std::filesystem::temp_directory_path() / ("qkv_library_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  io::save_checkpoint(dir + "/last.h5", resumed);
  model::LoadedModel m = model::load_model(dir + "/last.h5");
  const model::EvalMetrics e = model::evaluate(*m.model, m.data->eval_set(), 16);
  CHECK(e.token_accuracy >= 0);
  std::filesystem::remove_all(dir);

  const ProcessState after;
  CHECK(after.env == before.env);
  CHECK(reinterpret_cast<void*>(after.sigint) == reinterpret_cast<void*>(before.sigint));
  CHECK(reinterpret_cast<void*>(after.sigint) == reinterpret_cast<void*>(&program_handler));
  CHECK(after.pid == before.pid);
  CHECK(after.exe == before.exe);
}
