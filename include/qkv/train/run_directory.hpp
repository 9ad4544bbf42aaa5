#pragma once
/// @file
/// A run directory: the files of one run, written by rank 0 only, each one atomically.
///
///     config.yaml                the resolved config
///     metrics.csv                one row per evaluation (rewritten whole after each one)
///     best.h5, last.h5           checkpoints (io/checkpoint.hpp)
///     checkpoints/step_NNNNNNN.h5
///     result.csv                 a one-row summary, once the run has ended (not when it was stopped)
///
/// A directory that already holds a run is never written into by accident: a new run there is
/// refused unless the caller says to overwrite it (then the old run's files are removed first),
/// and a resumed run may write only into the directory of the checkpoint it resumes.

#include <string>
#include <vector>

#include "qkv/dist/comm.hpp"
#include "qkv/train/loop.hpp"

namespace qkv::train {

/// What to do with a run directory that already holds a run.
enum class ExistingRun {
  Refuse,    ///< ValueError naming the directory, what it holds and the ways out
  Overwrite  ///< remove that run's files first (config.yaml, metrics.csv, result.csv, *.h5, checkpoints/)
};

/// The files of a run directory that mark a run (those present in `dir`; empty: no run there).
std::vector<std::string> run_files(const std::string& dir);

class RunDirectory {
 public:
  /// Prepare `dir` for a run: check it (a run there, and `resume_from` not one of its
  /// checkpoints, is refused unless `existing` is Overwrite), then create it and checkpoints/.
  /// ValueError for an empty path, a path that is a file, or a directory that cannot be created
  /// (naming the reason). Only the root rank (`root`) touches the filesystem.
  /// `origin` says where `dir` came from, for messages ("--out", "run.out of run.yaml").
  RunDirectory(std::string dir, const std::string& resume_from, ExistingRun existing, bool root,
               const std::string& origin = "");

  const std::string& dir() const { return dir_; }
  /// dir/name.
  std::string path(const std::string& name) const;
  /// The callbacks that write the files: config.yaml and metrics.csv at the start, metrics.csv
  /// after each evaluation, checkpoints when due. (result.csv: finish().)
  Callbacks callbacks();
  /// Write result.csv for a run that ended ("steps", "target" or "diverged"; not one that was
  /// stopped or interrupted, which `qkv sweep` resumes): what `qkv sweep` gathers.
  void finish(Session& session, const RunResult& result);

 private:
  std::string dir_;
  bool root_;
};

/// Where and how a run goes (run_training).
struct RunOptions {
  std::string resume;     ///< checkpoint to resume from ("" = start fresh)
  std::string out;        ///< run directory; overrides run.out when non-empty
  ExistingRun existing = ExistingRun::Refuse;
  LoopOptions loop;
};

/// Train as `cfg` says, in its run directory: a Session (resumed from options.resume), a
/// RunDirectory, and train_loop with `extra` after the directory's own callbacks. What `qkv
/// train` and `qkv.train` from Python run.
RunResult run_training(const config::Config& cfg, const RunOptions& options, const Callbacks& extra, dist::Comm& comm);

/// The one-row summary `qkv sweep` gathers into results.csv: status, steps, final and best
/// metrics, steps to target, wall time, tokens/s, the last training accuracy and the last
/// attention diagnostics averaged over layers. CSV text with a header.
std::string result_csv(const RunResult& result, const MetricsLog& metrics);

}  // namespace qkv::train
