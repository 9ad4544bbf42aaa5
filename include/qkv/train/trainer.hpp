#pragma once
/// @file
/// The trainer: steps, evaluation, metrics, checkpoints, exact resume, NaN and Ctrl-C handling.
///
/// A run directory holds config.yaml (the resolved config), metrics.csv (one row per evaluation),
/// last.h5, best.h5 and checkpoints/step_NNNNNNN.h5. Checkpoints are written atomically and carry
/// everything needed to resume bitwise: parameters, optimizer buffers, step, data position,
/// dropout RNG state, best metric and the metric history.

#include <cstdint>
#include <string>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/dist/comm.hpp"
#include "qkv/train/evaluate.hpp"
#include "qkv/train/model.hpp"

namespace qkv::train {

struct RunOptions {
  std::string resume;    ///< checkpoint to resume from ("" = start fresh)
  std::string out;       ///< run directory; overrides run.out when non-empty
  int threads = 0;       ///< overrides train.threads when > 0
  bool progress = true;  ///< progress on stderr (a bar on a terminal, plain lines otherwise)
  std::int64_t stop_after = 0;  ///< stop (saving last.h5) after this many steps of this invocation; 0 = off
};

struct RunResult {
  int exit_code = 0;          ///< 0 finished, target reached or stopped; 3 diverged; 130 interrupted
  std::string stop_reason;    ///< "steps", "target", "stopped" (stop_after), "diverged", "interrupted"
  std::int64_t step = 0;      ///< steps done
  EvalMetrics last, best;     ///< last and best held-out metrics
  std::int64_t steps_to_target = -1;  ///< first evaluated step reaching target (or 0.99), -1 never
  double wall_seconds = 0;
  std::string run_dir;
};

/// Train as the config says. Rank 0 of `comm` writes files; every rank trains its shard.
RunResult run_training(const config::Config& cfg, const RunOptions& options, dist::Comm& comm);

class MetricsLog;
/// The one-row summary of a finished run that `qkv sweep` gathers into results.csv: status,
/// steps, final and best metrics, steps to target, wall time, tokens/s, the last training
/// accuracy and the last attention diagnostics averaged over layers.
void write_result_csv(const std::string& path, const RunResult& result, const MetricsLog& metrics, double tokens_per_s);

}  // namespace qkv::train
