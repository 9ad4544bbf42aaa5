#pragma once
/// @file
/// Following a run as it trains (the studio's `qkv serve --run DIR`): its metrics.csv and its
/// snapshots.h5, read again whenever the trainer has replaced them (the trainer writes both
/// atomically, so a read sees a whole file). Safe to call from several threads.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "qkv/interp/snapshots.hpp"

namespace qkv::runs {

/// The run-wide columns of metrics.csv (the per-layer diagnostics, "<layer>.<name>", left out)
/// and its rows (NaN where a cell is empty or not a number).
struct RunMetrics {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> rows;
};

class RunFollower {
 public:
  explicit RunFollower(std::string dir);
  const std::string& dir() const { return dir_; }
  /// metrics.csv, or nullptr with `note` saying why (no file yet, unreadable, too large).
  std::shared_ptr<const RunMetrics> metrics(std::string& note) const;
  /// The snapshots, read again when the file's modification time or size changed; when a read
  /// fails, the last good snapshots (or nullptr) with `note` holding the error. `version` changes
  /// whenever the file does.
  std::shared_ptr<const interp::Snapshots> snapshots(std::string& note, std::int64_t* version = nullptr);

 private:
  std::string dir_;
  std::mutex mutex_;
  std::shared_ptr<const interp::Snapshots> snapshots_;
  std::int64_t stamp_ = -1;
  std::string error_;
};

/// {"dir", "metrics": {"columns", "rows"} or null, "metrics_note", "snapshots": {"version",
/// "steps", "examples", "score_names", "layers": [{"name", "kind", "heads"}]} or null,
/// "snapshots_note"}: what the studio's /api/run answers.
std::string run_json(RunFollower& run);

/// Snapshot `index` (of S) of held-out example `example` (of N): {"index", "step", "steps",
/// "example", "layers": [{"name", "kind", "query_tokens", "key_tokens", "weights": [base64
/// float32 per head], "scores": [{score: value} per head]}], "note"}: the studio's /api/snapshot.
std::string snapshot_json(const interp::Snapshots& snapshots, std::size_t index, std::size_t example, const std::string& note);

}  // namespace qkv::runs
