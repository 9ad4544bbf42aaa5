#pragma once
/// @file
/// The training loop: a function of llm.c's shape. Step, evaluate every train.eval_every steps,
/// ask for checkpoints, stop at train.steps, at train.target_accuracy, when a step diverges or
/// when the caller asks. What a program does around it (progress, files, snapshots, signals)
/// plugs in as callbacks; the loop itself prints nothing and touches no file.

#include <cstdint>
#include <functional>
#include <string>

#include "qkv/model/evaluate.hpp"
#include "qkv/train/session.hpp"

namespace qkv::train {

/// How a loop ended.
struct RunResult {
  /// "steps" (train.steps done), "target" (train.target_accuracy reached), "stopped"
  /// (LoopOptions::stop_after), "interrupted" (Callbacks::stop_requested), "diverged".
  std::string stop_reason;
  std::int64_t step = 0;                 ///< steps done
  model::EvalMetrics last, best;         ///< last and best held-out metrics
  std::int64_t steps_to_target = -1;     ///< first evaluated step reaching the target (or 0.99), -1 never
  double wall_seconds = 0;
  double tokens_per_s = 0;               ///< training throughput of the last window
  /// "diverged": what was not finite, at which step ("training diverged at step 12: loss is nan
  /// (loss nan, lr 0.1)"); the step was not taken.
  std::string message;
  std::string run_dir;                   ///< set by run_training
};

struct LoopOptions {
  std::int64_t stop_after = 0;  ///< stop after this many steps of this call ("stopped"); 0: off
};

/// What happens around the loop; every callback is optional.
struct Callbacks {
  /// Polled before every step, on every rank; true on any rank stops them all ("interrupted").
  std::function<bool()> stop_requested;
  /// Before the first step (after any resume).
  std::function<void(Session&)> on_start;
  /// After every step taken. `tokens_per_s` is the throughput since the last log step; `log`
  /// is true every train.log_every steps and at evaluations.
  std::function<void(Session&, const StepResult&, double tokens_per_s, bool log)> on_step;
  /// After every evaluation (its metrics row is the last of session.metrics()).
  std::function<void(Session&)> on_evaluation;
  /// A checkpoint is due under this name: "best.h5" (a new best evaluation), "last.h5" (every
  /// train.checkpoint_every steps and at the end), "checkpoints/step_0000500.h5".
  std::function<void(Session&, const std::string& name)> on_checkpoint;
  /// The loop is over and the final "last.h5" is next (not after a divergence).
  std::function<void(Session&, const RunResult&)> on_end;
};

/// Train `session` to its config's end (see the file comment); returns how it ended.
RunResult train_loop(Session& session, const LoopOptions& options, const Callbacks& callbacks);

/// `a` then `b`, for every callback both define (stop_requested: either).
Callbacks chain(Callbacks a, Callbacks b);

}  // namespace qkv::train
