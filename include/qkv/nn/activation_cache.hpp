#pragma once
/// @file
/// Reading activations through hook points: HookScope adds hooks and removes them when it ends;
/// run_with_cache records the values at chosen hook points during one call (TransformerLens's
/// run_with_cache). Nothing here touches a forward that no hook is registered on.

#include <string>
#include <utility>
#include <vector>

#include "qkv/nn/module.hpp"

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

}  // namespace qkv::nn
