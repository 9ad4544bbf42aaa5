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
#include "qkv/train/model.hpp"

namespace qkv::train {

/// Held-out metrics: mean cross-entropy over scored positions, token accuracy, and the fraction
/// of examples whose scored positions are all right.
struct EvalMetrics {
  double loss = 0, token_accuracy = 0, sequence_accuracy = 0;
};
/// Evaluate in eval mode without recording, `batch_size` examples at a time.
EvalMetrics evaluate(TaskModel& model, const data::Batch& eval_set, std::size_t batch_size);

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

/// Ask a running training loop to checkpoint and stop (what SIGINT does).
void request_stop();

}  // namespace qkv::train
