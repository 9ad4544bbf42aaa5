#pragma once
/// @file
/// Adam (L2 decay added to the gradient) and AdamW (decoupled decay), exactly as torch.optim.Adam /
/// AdamW (amsgrad off). Per parameter p with gradient g, moments m and v, at step t (1-based):
///   AdamW: p <- p * (1 - lr * wd)        Adam: g <- g + wd * p       (when wd != 0)
///   m <- beta1 * m + (1 - beta1) * g
///   v <- beta2 * v + (1 - beta2) * g * g
///   p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
/// Buffers: "exp_avg" (m) and "exp_avg_sq" (v). t is the optimizer's step count (torch counts per
/// parameter; the two agree whenever every parameter gets a gradient at every step).

#include "qkv/optim/optimizer.hpp"

namespace qkv::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

/// AdamW's options: Adam's, with torch.optim.AdamW's default weight decay 1e-2.
struct AdamWOptions : AdamOptions {
  AdamWOptions(double lr_ = 1e-3, double beta1_ = 0.9, double beta2_ = 0.999, double eps_ = 1e-8,
               double weight_decay_ = 1e-2)
      : AdamOptions{lr_, beta1_, beta2_, eps_, weight_decay_} {}
};

template <class T>
class Adam : public Optimizer<T> {
 public:
  /// Each group's lr and weight_decay are used; options.lr and options.weight_decay are not.
  /// Throws ValueError naming a bad option.
  Adam(std::vector<ParamGroup<T>> groups, AdamOptions options = {}) : Adam(std::move(groups), options, "Adam", false) {}
  /// One group of every parameter, with options.lr and options.weight_decay.
  Adam(const std::vector<std::pair<std::string, Variable<T>>>& named, AdamOptions options = {})
      : Adam(one_group(named, options.lr, options.weight_decay), options) {}
  void step() override;
  const AdamOptions& options() const { return options_; }

 protected:
  /// Adam (decoupled = false) or AdamW (true), named `name` in messages and states.
  Adam(std::vector<ParamGroup<T>> groups, AdamOptions options, const char* name, bool decoupled);

 private:
  AdamOptions options_;
  bool decoupled_;
  std::size_t exp_avg_ = 0, exp_avg_sq_ = 0;  // buffer ids
};

/// Adam with decoupled weight decay: the same moments, and p <- p * (1 - lr * wd) before the step.
template <class T>
class AdamW : public Adam<T> {
 public:
  /// Each group's lr and weight_decay are used; options.lr and options.weight_decay are not
  /// (note: ParamGroup's default weight_decay is 0, not AdamW's 1e-2).
  AdamW(std::vector<ParamGroup<T>> groups, AdamWOptions options = {}) : Adam<T>(std::move(groups), options, "AdamW", true) {}
  /// One group of every parameter, with options.lr and options.weight_decay.
  AdamW(const std::vector<std::pair<std::string, Variable<T>>>& named, AdamWOptions options = {})
      : AdamW(one_group(named, options.lr, options.weight_decay), options) {}
};

}  // namespace qkv::optim
