#pragma once
/// @file
/// Learning-rate schedules: lr as a pure function of the step number.

#include <cstdint>
#include <string>

namespace qkv::optim {

struct ScheduleOptions {
  std::string name = "constant";  ///< constant | cosine | step
  std::int64_t warmup_steps = 0;  ///< linear warmup 0 -> base over these steps (every schedule)
  std::int64_t total_steps = 1000;  ///< cosine: the step where lr reaches min_lr
  std::int64_t step_size = 1000;    ///< step: decay every step_size steps
  double min_lr = 0;                ///< cosine: the floor
  double gamma = 0.1;               ///< step: decay factor
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
  /// Throws ValueError naming a bad option (unknown name, negative steps, total_steps <
  /// warmup_steps, step_size < 1, gamma <= 0, min_lr outside [0, base_lr] for cosine...).
  LrSchedule(double base_lr, ScheduleOptions options);
  double lr_at(std::int64_t step) const;
  double base_lr() const { return base_; }
  const ScheduleOptions& options() const { return options_; }

 private:
  double base_;
  ScheduleOptions options_;
};

}  // namespace qkv::optim
