#include "qkv/optim/lr_schedule.hpp"

#include <cmath>

#include "qkv/tensor/tensor.hpp"

namespace qkv::optim {

LrSchedule::LrSchedule(double base_lr, ScheduleOptions options) : base_(base_lr), options_(std::move(options)) {
  const ScheduleOptions& o = options_;
  auto bad = [](const std::string& what) { throw ValueError("LrSchedule: " + what); };
  if (o.name != "constant" && o.name != "cosine" && o.name != "step")
    bad("option name must be constant, cosine or step, got '" + o.name + "'");
  if (!(base_lr >= 0)) bad("base lr must be >= 0, got " + std::to_string(base_lr));
  if (o.warmup_steps < 0) bad("option warmup_steps must be >= 0, got " + std::to_string(o.warmup_steps));
  if (o.name == "cosine") {
    if (o.total_steps < o.warmup_steps)
      bad("option total_steps (" + std::to_string(o.total_steps) + ") must be >= warmup_steps (" +
          std::to_string(o.warmup_steps) + ")");
    if (!(o.min_lr >= 0 && o.min_lr <= base_lr))
      bad("option min_lr must be in [0, base lr = " + std::to_string(base_lr) + "], got " + std::to_string(o.min_lr));
  }
  if (o.name == "step") {
    if (o.step_size < 1) bad("option step_size must be >= 1, got " + std::to_string(o.step_size));
    if (!(o.gamma > 0)) bad("option gamma must be > 0, got " + std::to_string(o.gamma));
  }
}

double LrSchedule::lr_at(std::int64_t step) const {
  if (step < 0) throw ValueError("LrSchedule::lr_at: step must be >= 0, got " + std::to_string(step));
  const ScheduleOptions& o = options_;
  const double warm = step < o.warmup_steps ? double(step) / double(o.warmup_steps) : 1.0;
  if (o.name == "cosine") {
    if (step < o.warmup_steps) return base_ * warm;
    if (step >= o.total_steps) return o.min_lr;
    const double progress = double(step - o.warmup_steps) / double(o.total_steps - o.warmup_steps);
    return o.min_lr + (base_ - o.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  if (o.name == "step") return warm * base_ * std::pow(o.gamma, double(step / o.step_size));
  return warm * base_;
}

}  // namespace qkv::optim
