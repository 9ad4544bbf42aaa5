#include "sweep.hpp"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "qkv/config/config.hpp"
#include "qkv/tensor/random.hpp"

extern char** environ;

namespace qkv::app {
namespace fs = std::filesystem;
namespace {

// "model.heads" -> "heads": short names for run directories, unless two keys would collide.
std::vector<std::string> short_names(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (auto& k : keys) out.push_back(k.substr(k.rfind('.') + 1));
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t j = 0; j < out.size(); ++j)
      if (i != j && out[i] == out[j]) {
        out = keys;
        return out;
      }
  return out;
}

std::string dir_safe(std::string s) {
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '=' || c == '_')) c = '-';
  return s;
}

std::vector<std::string> read_csv_row(const std::string& path, std::vector<std::string>& header) {
  std::ifstream f(path);
  std::string h, r;
  if (!std::getline(f, h) || !std::getline(f, r)) return {};
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string cell;
    while (std::getline(ss, cell, ',')) out.push_back(cell);
    return out;
  };
  header = split(h);
  return split(r);
}

// Cores this rank may use: its CPU affinity when the launcher bound it (mpirun binds each of <= 2
// ranks to a core by default; the runs it starts inherit that), else the machine's cores shared
// by the ranks on this machine.
int usable_cores(const dist::Comm& comm) {
  const int all = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < all) return std::max(1, CPU_COUNT(&set));
  return std::max(1, all / std::max(1, comm.local_size()));
}

bool finished(const std::string& dir) { return fs::exists(fs::path(dir) / "result.csv"); }

}  // namespace

SweepPlan load_sweep(const std::string& path, const std::vector<std::string>& extra,
                     const std::vector<std::uint64_t>& seed_override, const std::vector<std::string>& grid_override) {
  const config::SweepFile file = config::load_sweep_file(path);
  SweepPlan plan;
  plan.file = path;
  plan.base = file.base;
  plan.out = file.out;
  std::vector<std::string> common = file.set;
  common.insert(common.end(), extra.begin(), extra.end());
  std::vector<std::vector<std::string>> values;
  for (auto& [key, v] : file.grid) plan.grid_keys.push_back(key), values.push_back(v);
  for (auto& g : grid_override) {  // --grid KEY=V1,V2: this key's values instead of the file's
    const auto eq = g.find('=');
    const std::string key = g.substr(0, eq);
    const auto at = std::find(plan.grid_keys.begin(), plan.grid_keys.end(), key);
    if (eq == std::string::npos || eq + 1 == g.size())
      throw config::ConfigError(path, 0, key, "--grid expects KEY=V1,V2,..., found '" + g + "'");
    if (at == plan.grid_keys.end())
      throw config::ConfigError(path, 0, key, "--grid names a key the sweep file's grid does not have (use --set for the others)");
    auto& v = values[std::size_t(at - plan.grid_keys.begin())];
    v.clear();
    std::stringstream ss(g.substr(eq + 1));
    for (std::string x; std::getline(ss, x, ',');) v.push_back(x);
  }
  std::vector<std::string> seeds;
  for (auto s : seed_override.empty() ? file.seeds : seed_override) seeds.push_back(std::to_string(s));

  // Every combination of the grid, in order (the last key varies fastest), times every seed, each
  // validated on the base config read once: listing a sweep costs a constant per run.
  const config::Config base = config::load_config(plan.base, common);
  const auto names = short_names(plan.grid_keys);
  std::vector<std::size_t> idx(values.size(), 0);
  while (true) {
    for (auto& seed : seeds) {
      SweepRun run;
      std::string name;
      for (std::size_t k = 0; k < values.size(); ++k) {
        run.settings.push_back(plan.grid_keys[k] + "=" + values[k][idx[k]]);
        name += names[k] + "=" + values[k][idx[k]] + "_";
      }
      run.settings.push_back("seed=" + seed);
      run.name = dir_safe(name + "seed=" + seed);
      run.overrides = common;
      run.overrides.insert(run.overrides.end(), run.settings.begin(), run.settings.end());
      config::apply_overrides(base, run.settings);  // validate before anything runs
      plan.runs.push_back(std::move(run));
    }
    std::size_t k = values.size();
    while (k > 0 && ++idx[k - 1] == values[k - 1].size()) idx[--k] = 0;
    if (k == 0) break;
  }
  return plan;
}

void write_sweep_results(const SweepPlan& plan, const std::string& out) {
  // A per-process temporary name: several sweep processes may share one sweep directory.
  const std::string tmp = (fs::path(out) / ("results.csv.tmp-" + std::to_string(::getpid()))).string();
  std::ofstream f(tmp);
  std::vector<std::string> result_header;
  bool header_written = false;
  for (auto& run : plan.runs) {
    const fs::path dir = fs::path(out) / "runs" / run.name;
    std::vector<std::string> header;
    auto row = read_csv_row((dir / "result.csv").string(), header);
    if (!header_written && !row.empty()) {
      result_header = header;
      f << "run";
      for (auto& k : plan.grid_keys) f << ',' << k;
      f << ",seed";
      for (auto& h : header) f << ',' << h;
      f << '\n';
      header_written = true;
    }
  }
  if (!header_written) {
    f << "run";
    for (auto& k : plan.grid_keys) f << ',' << k;
    f << ",seed,status\n";
  }
  for (auto& run : plan.runs) {
    const fs::path dir = fs::path(out) / "runs" / run.name;
    std::vector<std::string> header;
    auto row = read_csv_row((dir / "result.csv").string(), header);
    f << run.name;
    for (auto& s : run.settings) f << ',' << s.substr(s.find('=') + 1);
    if (row.empty()) {
      f << (fs::exists(dir / "failed") ? ",failed" : ",not run");
      for (std::size_t i = 1; i < result_header.size(); ++i) f << ",nan";
    } else {
      for (auto& cell : row) f << ',' << cell;
    }
    f << '\n';
  }
  f.close();
  fs::rename(tmp, fs::path(out) / "results.csv");
}

int run_sweep(const SweepPlan& plan, const SweepOptions& opt, dist::Comm& comm) {
  const std::string out = opt.out.empty() ? plan.out : opt.out;
  const int threads = opt.threads > 0 ? opt.threads : std::max(1, usable_cores(comm) / std::max(1, opt.jobs));

  // A session id shared by every rank: claims of earlier (interrupted) sessions do not count.
  std::string session = std::to_string(hash64(std::uint64_t(::getpid()),
                                              std::uint64_t(std::chrono::system_clock::now().time_since_epoch().count())));
  comm.broadcast(session);
  if (comm.is_root()) fs::create_directories(fs::path(out) / "runs");
  comm.barrier();

  auto claim = [&]() -> const SweepRun* {
    for (auto& run : plan.runs) {
      const fs::path dir = fs::path(out) / "runs" / run.name;
      if (finished(dir.string())) continue;
      fs::create_directories(dir);
      const std::string token = (dir / (".claim-" + session)).string();
      const int fd = ::open(token.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
      if (fd < 0) continue;  // another slot or rank has it
      ::close(fd);
      return &run;
    }
    return nullptr;
  };

  std::map<pid_t, const SweepRun*> running;
  int failures = 0;
  auto start = [&](const SweepRun& run) {
    const fs::path dir = fs::path(out) / "runs" / run.name;
    std::vector<std::string> args = {opt.executable, "train", plan.base, "--quiet", "--threads", std::to_string(threads)};
    for (auto& o : run.overrides) args.insert(args.end(), {"--set", o});
    args.insert(args.end(), {"--set", "run.out=" + dir.string()});
    // An interrupted run continues from its last.h5; one stopped before its first last.h5 (the
    // sweep's own, unfinished: no result.csv) starts again in place.
    if (fs::exists(dir / "last.h5")) args.insert(args.end(), {"--resume", (dir / "last.h5").string()});
    else if (fs::exists(dir / "config.yaml")) args.push_back("--overwrite");
    fs::remove(dir / "failed");

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = (dir / "train.log").string();
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // The run is a plain process even when the sweep is an MPI job.
    std::vector<std::string> env_storage = {"QKV_NO_MPI=1"};
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "QKV_NO_MPI=", 11) != 0) env_storage.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_storage) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, opt.executable.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      std::fprintf(stderr, "qkv sweep: cannot start %s: %s\n", opt.executable.c_str(), std::strerror(rc));
      std::ofstream(dir / "failed") << "could not start\n";
      ++failures;
      return;
    }
    if (opt.verbose) std::fprintf(stderr, "[%s] start %s\n", comm.description().c_str(), run.name.c_str());
    running[pid] = &run;
  };

  while (true) {
    while (int(running.size()) < opt.jobs) {
      const SweepRun* run = claim();
      if (!run) break;
      start(*run);
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) break;
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const fs::path dir = fs::path(out) / "runs" / it->second->name;
    const bool ok = finished(dir.string());
    if (!ok) {
      ++failures;
      std::ofstream(dir / "failed") << "exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status))
                                    << "; see train.log\n";
    }
    if (opt.verbose)
      std::fprintf(stderr, "[%s] %s %s\n", comm.description().c_str(), ok ? "done " : "FAILED", it->second->name.c_str());
    running.erase(it);
    // Partial results after every run, so a long sweep can be inspected (or reported) while it runs.
    if (comm.is_root()) write_sweep_results(plan, out);
  }
  comm.barrier();
  if (comm.is_root()) write_sweep_results(plan, out);
  std::uint64_t all_failures = 0;  // every rank reports the sweep's total
  for (auto f : comm.allgather(std::uint64_t(failures))) all_failures += f;
  return int(all_failures);
}

}  // namespace qkv::app
