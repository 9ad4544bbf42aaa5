#pragma once
/// @file
/// What a run trains and everything --resume restores, in one object a program drives step by
/// step: the task and its data, the model, the optimizer and its schedule, the metric history and
/// the training state. It reads no environment, installs no handler and prints nothing.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/dist/data_parallel.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/model/task_model.hpp"
#include "qkv/optim/lr_schedule.hpp"
#include "qkv/optim/optimizer.hpp"
#include "qkv/train/metrics_log.hpp"
#include "qkv/train/train_state.hpp"
#include "qkv/train/train_step.hpp"

namespace qkv::train {

/// The ranks of a data-parallel run no longer hold the same parameters (a checkpoint is due and
/// their checksums differ): different builds, libraries or CPUs across nodes, or a memory error.
struct RanksOutOfSync : Error {
  using Error::Error;
};

/// What train.precision gives on this CPU: the products' precision, and for the user a note when
/// it is not what the config asks ("train.precision: bf16: this CPU has no AMX-BF16 ...; training in
/// float32"), else "". bf16 is used where kernels::bf16_support().fast.
struct PrecisionChoice {
  kernels::Precision precision = kernels::Precision::Float32;
  std::string note;
};
PrecisionChoice choose_precision(const config::Config& cfg);

class Session {
 public:
  /// Build the run `cfg` describes, seeded from cfg.seed: task, data (held-out set at once),
  /// model, optimizer, schedule. Every rank of `comm` trains its shard of each global batch
  /// (train.batch_size must be divisible by the ranks times train.accumulate: ValueError). The
  /// caller sets the thread count. The dropout generator is the process's default_generator().
  Session(const config::Config& cfg, dist::Comm& comm);
  ~Session();

  /// Continue exactly where checkpoint `c` (read from `path`) stopped: parameters, optimizer
  /// buffers, step, data position, dropout generator, best and last metrics, metric history.
  /// ValueError naming each differing key when it was trained with another seed, model or task;
  /// IoError for a training state that no run could have saved.
  void resume(const io::Checkpoint& c, const std::string& path);

  /// One optimizer step on the next global batch, at the schedule's learning rate. `diagnose`:
  /// also read the gradient norms reaching W_q and W_k (the next evaluate() logs them). When the
  /// loss or the gradient norm is not finite, no update is made and the result says which.
  StepResult step(bool diagnose = false);

  /// Evaluate the held-out set, append a metrics row (step, lr, training loss and accuracy since
  /// the last evaluation, gradient norm, held-out metrics, `tokens_per_s`, `elapsed_s`, and the
  /// attention diagnostics of every layer), update the best; returns whether it is a new best.
  bool evaluate(double tokens_per_s, double elapsed_s);

  /// Everything needed to resume bitwise. Checks first that every rank holds the same
  /// parameters (a collective call: every rank must make it); RanksOutOfSync otherwise.
  io::Checkpoint checkpoint();

  const config::Config& config() const { return cfg_; }
  const TrainState& state() const { return state_; }
  TrainState& state() { return state_; }
  model::TaskModel& model() { return *model_; }
  const data::Task& task() const { return *task_; }
  std::shared_ptr<data::Task> task_ptr() const { return task_; }
  data::Dataset& data() { return *data_; }
  const MetricsLog& metrics() const { return metrics_; }
  dist::DataParallel& dp() { return dp_; }
  optim::Optimizer<float>& optimizer() { return *optimizer_; }
  /// The learning rate of the last step taken (the schedule's value at the step before).
  double lr() const;
  /// Training tokens in one global batch (what tokens/s counts).
  std::size_t tokens_per_batch() const;
  /// The precision the products of a step take (choose_precision), and what the user should know
  /// about it ("" when the run trains as its config asks).
  const PrecisionChoice& precision() const { return precision_; }
  /// Run the products of the following steps in `precision`, whatever choose_precision decided:
  /// for measuring bf16 where it does not pay (bench_train --force-bf16). Trains to other bits.
  void set_precision(kernels::Precision precision);

 private:
  config::Config cfg_;
  dist::DataParallel dp_;
  std::shared_ptr<data::Task> task_;
  std::unique_ptr<data::Dataset> data_;
  data::Batch probe_;  // a slice of the fixed training set, when there is one
  std::unique_ptr<model::TaskModel> model_;
  std::unique_ptr<optim::Optimizer<float>> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  MetricsLog metrics_;
  TrainState state_;
  PrecisionChoice precision_;
  StepOptions step_options_, diagnose_options_;
  std::vector<std::pair<double, double>> qk_norms_;
  double last_grad_norm_ = 0;
};

}  // namespace qkv::train
