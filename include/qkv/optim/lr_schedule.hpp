#pragma once
/// @file
/// Learning-rate schedules: lr as a pure function of the step number.

#include <cstdint>
#include <string>

#include "qkv/tensor/names.hpp"
#include "qkv/tensor/options.hpp"

namespace qkv::optim {

enum class Schedule { Constant, Cosine, Step };
/// The names configs use: "constant", "cosine", "step".
const NameTable<Schedule>& schedule_names();

/// The config's `schedule` section (total_steps comes from train.steps there).
struct ScheduleOptions {
  Schedule name = Schedule::Cosine;
  std::int64_t warmup_steps = 100;  ///< linear warmup 0 -> base over these steps (every schedule)
  std::int64_t total_steps = 1000;  ///< cosine: the step where lr reaches min_lr
  std::int64_t step_size = 1000;    ///< step: decay every step_size steps
  double min_lr = 0;                ///< cosine: the floor
  double gamma = 0.5;               ///< step: decay factor
  /// For a schedule from `base_lr`: warmup_steps in [0, total_steps], step_size >= 1, gamma in
  /// (0, 1], min_lr in [0, base_lr], base_lr >= 0 (fields "base_lr" and "total_steps" name the
  /// arguments); throws OptionError.
  void validate(double base_lr) const;
};

/// lr at step s (s = number of optimizer steps already taken, from 0), with W = warmup_steps:
///   s < W: base * s / W (so step 0 has lr 0, as the usual linear warmup)
///   constant: base
///   cosine:   min_lr + (base - min_lr) * (1 + cos(pi * (s - W) / (total_steps - W))) / 2 for
///             s < total_steps, min_lr from total_steps on
///   step:     base * gamma^floor(s / step_size)
/// Stateless: its state is the step number, which the trainer saves.
class LrSchedule {
 public:
  /// Throws OptionError naming a bad option (ScheduleOptions::validate).
  LrSchedule(double base_lr, ScheduleOptions options);
  double lr_at(std::int64_t step) const;
  double base_lr() const { return base_; }
  const ScheduleOptions& options() const { return options_; }

 private:
  double base_;
  ScheduleOptions options_;
};

}  // namespace qkv::optim
