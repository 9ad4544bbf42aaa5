#pragma once
/// @file
/// Reading activations through hook points: HookScope adds hooks and removes them when it ends;
/// run_with_cache records the values at chosen hook points during one call (TransformerLens's
/// run_with_cache). Nothing here touches a forward that no hook is registered on.

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "qkv/nn/module.hpp"
#include "qkv/ops/elementwise.hpp"

namespace qkv::nn {

/// Hooks added through a scope are removed when it is destroyed (also when an exception passes).
template <class T>
class HookScope {
 public:
  explicit HookScope(Module<T>& model) : model_(model) {}
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
  ~HookScope() {
    for (auto& h : handles_) model_.remove_forward_hook(h);
  }
  /// Add `hook` at the dotted path (a hook point or any module); see Module::submodule().
  void add(const std::string& path, ForwardHook<T> hook) { handles_.push_back(model_.add_forward_hook(path, std::move(hook))); }
  /// Add `make(name)` at every hook point whose dotted name matches one of `patterns` (glob_match);
  /// returns the names, in model order. Throws ValueError naming the patterns when none matches.
  template <class Make>
  std::vector<std::string> add_matching(const std::vector<std::string>& patterns, Make&& make) {
    std::vector<std::string> names;
    for (auto& [name, point] : model_.template modules_of_type<HookPoint<T>>()) {
      bool match = false;
      for (auto& p : patterns) match = match || glob_match(p, name);
      if (!match) continue;
      handles_.push_back(point->add_forward_hook(make(name)));
      names.push_back(name);
    }
    if (names.empty()) throw ValueError("no hook point matches " + join_names(patterns));
    return names;
  }

 private:
  Module<T>& model_;
  std::vector<HookHandle> handles_;
};

/// Values recorded at hook points, by dotted name, in the order they were produced.
template <class T>
class ActivationCache {
 public:
  /// The value recorded at `name`; throws ValueError naming the recorded points when absent.
  const Array<T>& operator[](const std::string& name) const {
    for (auto& [n, v] : entries_)
      if (n == name) return v;
    std::vector<std::string> names;
    for (auto& [n, v] : entries_) names.push_back(n);
    throw ValueError("activation cache: nothing recorded at '" + name + "'" + did_you_mean(name, names) +
                     " (recorded: " + join_names(names) + ")");
  }
  bool contains(const std::string& name) const {
    for (auto& [n, v] : entries_)
      if (n == name) return true;
    return false;
  }
  /// Record (a copy of) `value` at `name`, replacing an earlier value of that name.
  void set(const std::string& name, const Array<T>& value) {
    for (auto& [n, v] : entries_)
      if (n == name) {
        v = value;
        return;
      }
    entries_.emplace_back(name, value);
  }
  const std::vector<std::pair<std::string, Array<T>>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Array<T>>> entries_;
};

/// Run fn() with a recording hook on every hook point matching `patterns` ("*.hook_pattern",
/// "blocks.0.attn.hook_*", ...); returns what they saw (the last value of each, copied). The
/// hooks only read, so fn() computes what it computes without them (bitwise), except that a
/// hook_pattern point makes the fused attention compute its weights.
template <class T, class F>
ActivationCache<T> run_with_cache(Module<T>& model, F&& fn, const std::vector<std::string>& patterns = {"*"}) {
  ActivationCache<T> cache;
  HookScope<T> scope(model);
  scope.add_matching(patterns, [&cache](const std::string& name) -> ForwardHook<T> {
    return [&cache, name](const Variable<T>& x) {
      cache.set(name, x.value());
      return x;
    };
  });
  fn();
  return cache;
}

/// Values and gradients recorded at hook points: `values` and, for the same names, `grads`, the
/// gradient of the metric at each (zero where the metric does not depend on it).
template <class T>
struct GradCache {
  ActivationCache<T> values, grads;
};

/// While alive, the parameters of `model` require no gradient (put back when it ends): gradients
/// at activations then cost no parameter gradients.
template <class T>
class FrozenParameters {
 public:
  explicit FrozenParameters(Module<T>& model) : params_(model.parameters()) {
    for (auto& p : params_) was_.push_back(p.requires_grad()), p.set_requires_grad(false);
  }
  ~FrozenParameters() {
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i].set_requires_grad(was_[i]);
  }
  FrozenParameters(const FrozenParameters&) = delete;
  FrozenParameters& operator=(const FrozenParameters&) = delete;

 private:
  std::vector<Variable<T>> params_;
  std::vector<bool> was_;
};

/// Gradients with respect to activations (TransformerLens's run_with_cache(incl_bwd=True)): run
/// `metric_of()`, which runs the model and returns a one-element metric m, with a hook on every
/// hook point matching `patterns`, then m.backward(). Returns each point's value and dm/dvalue.
/// The parameters require no gradient meanwhile (FrozenParameters), so one backward pass computes
/// exactly these; DifferentiableHooks makes every hooked point lie on the path m is computed
/// through. Each hook returns a node of its own (the value times 1, or a fresh leaf where nothing
/// before it requires a gradient), so a gradient is that point's alone even where several points
/// read one value (the split inputs). Recording must be on (not under NoGradGuard); eval mode is
/// the caller's. Throws ValueError when m is not one element or not finite.
template <class T, class F>
GradCache<T> run_with_grads(Module<T>& model, F&& metric_of, const std::vector<std::string>& patterns = {"*"}) {
  if (!autograd::grad_enabled()) throw Error("run_with_grads: recording is off (a NoGradGuard is alive): gradients need the tape");
  GradCache<T> out;
  std::vector<std::pair<std::string, Variable<T>>> taken;
  {
    FrozenParameters<T> frozen(model);
    DifferentiableHooks differentiable;
    HookScope<T> scope(model);
    scope.add_matching(patterns, [&taken](const std::string& name) -> ForwardHook<T> {
      return [&taken, name](const Variable<T>& x) {
        Variable<T> own = x.requires_grad() ? mul_scalar(x, T(1)) : Variable<T>(x.value(), true);
        own.retain_grad();
        taken.emplace_back(name, own);
        return own;
      };
    });
    const Variable<T> m = metric_of();
    if (m.size() != 1) throw ValueError("run_with_grads: the metric has shape " + shape_str(m.shape()) + "; expected one number");
    if (!std::isfinite(double(m.item()))) throw ValueError("run_with_grads: the metric is not finite (" + std::to_string(double(m.item())) + ")");
    if (m.requires_grad()) m.backward();
  }
  for (auto& [name, v] : taken) {
    out.values.set(name, v.value());
    out.grads.set(name, v.has_grad() ? v.grad() : zeros<T>(v.shape()));
  }
  return out;
}

}  // namespace qkv::nn
