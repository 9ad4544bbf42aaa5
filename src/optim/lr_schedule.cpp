#include "qkv/optim/lr_schedule.hpp"

#include <cmath>
#include <string>

#include "qkv/tensor/tensor.hpp"

namespace qkv::optim {

const NameTable<Schedule>& schedule_names() {
  static const NameTable<Schedule> table{{"constant", Schedule::Constant}, {"cosine", Schedule::Cosine}, {"step", Schedule::Step}};
  return table;
}

void ScheduleOptions::validate(double base_lr) const {
  OptionChecker c("ScheduleOptions");
  c.in_range(base_lr, "base_lr", 0, false, INFINITY, false);
  c.require(warmup_steps >= 0, {"warmup_steps"}, "expected a non-negative integer, found " + std::to_string(warmup_steps));
  c.require(warmup_steps <= total_steps, {"warmup_steps", "total_steps"},
            "{warmup_steps} (" + std::to_string(warmup_steps) + ") must not exceed {total_steps} (" +
                std::to_string(total_steps) + ")");
  c.require(step_size >= 1, {"step_size"}, "expected a positive integer, found " + std::to_string(step_size));
  c.in_range(min_lr, "min_lr", 0, false, INFINITY, false);
  c.require(min_lr <= base_lr, {"min_lr", "base_lr"},
            "{min_lr} (" + number_text(min_lr) + ") must not exceed {base_lr} (" + number_text(base_lr) + ")");
  c.in_range(gamma, "gamma", 0, true, 1, false);
}

LrSchedule::LrSchedule(double base_lr, ScheduleOptions options) : base_(base_lr), options_(std::move(options)) {
  options_.validate(base_lr);
}

double LrSchedule::lr_at(std::int64_t step) const {
  if (step < 0) throw ValueError("LrSchedule::lr_at: step must be >= 0, got " + std::to_string(step));
  const ScheduleOptions& o = options_;
  const double warm = step < o.warmup_steps ? double(step) / double(o.warmup_steps) : 1.0;
  if (o.name == Schedule::Cosine) {
    if (step < o.warmup_steps) return base_ * warm;
    if (step >= o.total_steps) return o.min_lr;
    const double progress = double(step - o.warmup_steps) / double(o.total_steps - o.warmup_steps);
    return o.min_lr + (base_ - o.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  if (o.name == Schedule::Step) return warm * base_ * std::pow(o.gamma, double(step / o.step_size));
  return warm * base_;
}

}  // namespace qkv::optim
