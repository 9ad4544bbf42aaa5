#include "qkv/train/run_directory.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "qkv/io/files.hpp"

namespace qkv::train {
namespace fs = std::filesystem;
namespace {

const char* const kRunFiles[] = {"config.yaml", "metrics.csv", "result.csv", "last.h5", "best.h5", "snapshots.h5",
                                 "checkpoints"};

// Is `checkpoint` one of `dir`'s own checkpoints (dir/x.h5 or dir/checkpoints/x.h5)?
bool belongs_to(const std::string& checkpoint, const std::string& dir) {
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(checkpoint, ec);
  const fs::path run = fs::weakly_canonical(dir, ec);
  if (ec) return false;
  return file.parent_path() == run || (file.parent_path().filename() == "checkpoints" && file.parent_path().parent_path() == run);
}

void remove_run(const std::string& dir) {
  for (const char* f : kRunFiles) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / f;
    if (std::string(f) == "checkpoints") {
      // Only the run's own checkpoints, never anything else a user put there.
      if (fs::is_directory(p, ec))
        for (auto& e : fs::directory_iterator(p, ec))
          if (e.path().extension() == ".h5" && e.path().filename().string().rfind("step_", 0) == 0) fs::remove(e.path(), ec);
      continue;
    }
    fs::remove(p, ec);
    if (ec) throw io::IoError("--overwrite: cannot remove " + p.string() + ": " + ec.message());
  }
}

}  // namespace

std::vector<std::string> run_files(const std::string& dir) {
  std::vector<std::string> found;
  for (const char* f : kRunFiles) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / f;
    if (!fs::exists(p, ec)) continue;
    if (std::string(f) == "checkpoints") {  // an empty checkpoints/ is what a run makes first: no run yet
      bool any = false;
      for (auto& e : fs::directory_iterator(p, ec)) any = any || e.path().extension() == ".h5";
      if (!any) continue;
      found.push_back("checkpoints/*.h5");
      continue;
    }
    found.push_back(f);
  }
  return found;
}

RunDirectory::RunDirectory(std::string dir, const std::string& resume_from, ExistingRun existing, bool root,
                           const std::string& origin)
    : dir_(std::move(dir)), root_(root) {
  if (dir_.empty()) throw ValueError("run directory: empty path (--out or run.out); give a directory");
  if (!root_) return;
  const std::string named = "run directory " + dir_ + (origin.empty() ? "" : " (" + origin + ")");
  struct stat st;
  if (::stat(dir_.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw ValueError(named + ": exists and is not a directory");
  const std::vector<std::string> held = run_files(dir_);
  const bool continuing = !resume_from.empty() && belongs_to(resume_from, dir_);
  if (!held.empty() && !continuing) {
    if (existing == ExistingRun::Refuse) {
      std::string list;
      for (auto& f : held) list += (list.empty() ? "" : ", ") + f;
      throw ValueError(named + " holds a run (" + list + "): " +
                       (resume_from.empty() ? "continue it with --resume " + (fs::path(dir_) / "last.h5").string() + ", "
                                            : "--resume " + resume_from + " is not one of its checkpoints; ") +
                       "choose another directory with --out, or replace that run with --overwrite");
    }
    remove_run(dir_);
  }
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "checkpoints", ec);
  if (ec) throw ValueError(named + ": cannot create it: " + ec.message());
}

std::string RunDirectory::path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

Callbacks RunDirectory::callbacks() {
  Callbacks c;
  // Every rank makes the checkpoint (it checks that the ranks hold the same parameters: a
  // collective call); the root rank writes it.
  c.on_checkpoint = [this](Session& s, const std::string& name) {
    const io::Checkpoint checkpoint = s.checkpoint();
    if (root_) io::save_checkpoint(path(name), checkpoint);
  };
  if (!root_) return c;
  c.on_start = [this](Session& s) {
    io::write_file_atomic(path("config.yaml"), config::to_yaml(s.config()));
    io::write_file_atomic(path("metrics.csv"), s.metrics().csv());
  };
  c.on_evaluation = [this](Session& s) { io::write_file_atomic(path("metrics.csv"), s.metrics().csv()); };
  return c;
}

void RunDirectory::finish(Session& s, const RunResult& r) {
  const bool ended = r.stop_reason == "steps" || r.stop_reason == "target" || r.stop_reason == "diverged";
  if (root_ && ended) io::write_file_atomic(path("result.csv"), result_csv(r, s.metrics()));
}

RunResult run_training(const config::Config& cfg, const RunOptions& options, const Callbacks& extra, dist::Comm& comm) {
  const std::string dir = options.out.empty() ? cfg.run.out : options.out;
  RunDirectory run(dir, options.resume, options.existing, comm.is_root(),
                   options.out.empty() ? "run.out of " + (cfg.source.empty() ? std::string("the config") : cfg.source) : "--out");
  Session session(cfg, comm);
  if (!options.resume.empty()) session.resume(io::load_checkpoint(options.resume), options.resume);
  RunResult r = train_loop(session, options.loop, chain(run.callbacks(), extra));
  r.run_dir = dir;
  run.finish(session, r);
  return r;
}

std::string result_csv(const RunResult& r, const MetricsLog& metrics) {
  // The last diagnostics, averaged over attention layers.
  std::vector<std::pair<std::string, double>> diag = {{"entropy", 0}, {"max_weight", 0}, {"grad_q", 0},
                                                      {"grad_k", 0},  {"redundancy", 0}, {"qk_var", 0}};
  std::size_t layers = 0;
  for (auto& c : metrics.columns()) layers += c.size() > 8 && c.compare(c.size() - 8, 8, ".entropy") == 0;
  for (auto& [name, values] : metrics.history()) {
    if (values.empty()) continue;
    for (auto& [key, sum] : diag)
      if (name.size() > key.size() + 1 && name.compare(name.size() - key.size() - 1, key.size() + 1, "." + key) == 0)
        sum += values.back() / double(layers);
  }
  std::string out = "status,steps,final_loss,final_token_acc,final_seq_acc,best_token_acc,best_seq_acc,steps_to_target,"
                    "wall_s,tokens_per_s,train_token_acc";
  for (auto& [key, v] : diag) out += ",attn_" + key;
  out += "\n" + r.stop_reason + ',' + std::to_string(r.step);
  for (double v : {r.last.loss, r.last.token_accuracy, r.last.sequence_accuracy, r.best.token_accuracy,
                   r.best.sequence_accuracy, double(r.steps_to_target), r.wall_seconds, r.tokens_per_s,
                   metrics.last("train_token_acc")})
    out += ',' + csv_number(v);
  for (auto& [key, v] : diag) out += ',' + csv_number(v);
  return out + "\n";
}

}  // namespace qkv::train
