#pragma once
/// @file
/// Module: the base of every layer. Parameters and sub-modules are registered by name (names hold
/// no dots); named_parameters() walks them in registration order and joins names with dots
/// ("blocks.0.attn.w_q.weight"): those dotted names are the checkpoint's dataset paths.
///
/// Forward hooks (as torch.nn.Module.register_forward_hook): a module runs each of its hooks on
/// its output at the end of forward(); a hook returns its argument to observe it, or another
/// Variable of the same shape to replace it (patching, ablation). HookPoint is a module whose
/// forward is the identity: layers put one at every activation people study, so that instruments
/// reach "blocks.0.attn.hook_pattern" by name without flags inside the layers (TransformerLens's
/// hook points). With no hook registered a forward costs one branch per module.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/autograd/variable.hpp"
#include "qkv/tensor/names.hpp"
#include "qkv/tensor/state_dict.hpp"

namespace qkv::nn {

using qkv::StateDict;

/// What a parameter is, said by the module that registers it. Optimizers group by it (weight
/// decay applies to Weight parameters, not to biases and normalisation gains, unless asked).
enum class ParamRole { Weight, Bias, Norm };

/// While a MetaGuard lives (on this thread), modules record their parameters' names and shapes
/// without allocating or initialising them, and draw nothing from their generators: a model
/// built this way reports named_parameter_shapes() (to size a run before building it) and
/// cannot run forward. Like PyTorch's meta device.
class MetaGuard {
 public:
  MetaGuard() : previous_(flag()) { flag() = true; }
  ~MetaGuard() { flag() = previous_; }
  MetaGuard(const MetaGuard&) = delete;
  MetaGuard& operator=(const MetaGuard&) = delete;
  static bool active() { return flag(); }

 private:
  static bool& flag() {
    thread_local bool on = false;
    return on;
  }
  bool previous_;
};

/// While a DifferentiableHooks guard lives (on this thread), every hooked point lies on the path
/// the output is computed through, so the gradient of the output at a hook point is the whole of
/// it: layers whose hook points are otherwise observed from the side (hook_attn_scores,
/// hook_head_result, the split inputs hook_q_input, ...: computed for the hook, and the layer's
/// usual path used when the hook returns its argument unchanged, so that observing changes no
/// bit) take the hooked path, and a hooked hook_pattern is computed by the composite attention.
/// Values agree to rounding. nn::run_with_grads sets it.
class DifferentiableHooks {
 public:
  DifferentiableHooks() : previous_(flag()) { flag() = true; }
  ~DifferentiableHooks() { flag() = previous_; }
  DifferentiableHooks(const DifferentiableHooks&) = delete;
  DifferentiableHooks& operator=(const DifferentiableHooks&) = delete;
  static bool active() { return flag(); }

 private:
  static bool& flag() {
    thread_local bool on = false;
    return on;
  }
  bool previous_;
};

/// A forward hook: receives the module's output and returns it (to observe) or a replacement.
template <class T>
using ForwardHook = std::function<Variable<T>(const Variable<T>& output)>;

/// Identifies a registered hook (Module::remove_forward_hook).
struct HookHandle {
  const void* module = nullptr;
  std::uint64_t id = 0;
};

template <class T>
class Module {
 public:
  using value_type = T;

  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  /// Every parameter of this module and its children, in registration order.
  std::vector<Variable<T>> parameters() const {
    std::vector<Variable<T>> out;
    for (auto& [name, p] : named_parameters()) out.push_back(p);
    return out;
  }
  /// Same, with dotted names.
  std::vector<std::pair<std::string, Variable<T>>> named_parameters() const {
    std::vector<std::pair<std::string, Variable<T>>> out;
    collect("", out);
    return out;
  }
  /// (dotted name, shape) of every parameter, in named_parameters() order; also for a module
  /// built under MetaGuard, whose parameters hold no values.
  std::vector<std::pair<std::string, Shape>> named_parameter_shapes() const {
    std::vector<std::pair<std::string, Shape>> out;
    for (auto& [name, m] : named_modules())
      for (auto& p : m->params_) out.emplace_back(name.empty() ? p.name : name + "." + p.name, p.shape);
    return out;
  }
  /// The role of every parameter, in named_parameters() order.
  std::vector<ParamRole> parameter_roles() const {
    std::vector<ParamRole> out;
    for (auto& [name, m] : named_modules())
      for (auto& p : m->params_) out.push_back(p.role);
    return out;
  }
  const std::vector<std::pair<std::string, std::shared_ptr<Module<T>>>>& named_children() const {
    return children_;
  }
  /// This module ("") and every descendant, depth first in registration order, with dotted
  /// names ("blocks", "blocks.0", "blocks.0.attn", ...), as torch's named_modules().
  std::vector<std::pair<std::string, Module<T>*>> named_modules() const {
    std::vector<std::pair<std::string, Module<T>*>> out;
    walk("", out);
    return out;
  }
  /// The modules of type M (dynamic_cast) among named_modules(), in that order.
  template <class M>
  std::vector<std::pair<std::string, M*>> modules_of_type() const {
    std::vector<std::pair<std::string, M*>> out;
    for (auto& [name, m] : named_modules())
      if (auto* typed = dynamic_cast<M*>(m)) out.emplace_back(name, typed);
    return out;
  }
  /// The descendant at a dotted path ("" is this module). Throws ValueError naming the path
  /// and, when one is close, the path meant.
  Module<T>& submodule(const std::string& path) const;
  /// f(module) for every descendant, children before their parent (torch's apply()).
  void apply(const std::function<void(Module<T>&)>& f) {
    for (auto& [name, child] : children_) child->apply(f);
    f(*this);
  }
  /// Total number of parameter elements.
  std::size_t num_parameters() const {
    std::size_t n = 0;
    for (auto& p : parameters()) n += p.size();
    return n;
  }

  /// Training mode (dropout active) for this module and every child.
  void train(bool on = true) {
    training_ = on;
    for (auto& [name, child] : children_) child->train(on);
  }
  /// Evaluation mode: train(false).
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Forget every parameter's gradient.
  void zero_grad() {
    for (auto& p : parameters()) p.zero_grad();
  }

  /// Copies of every parameter, by dotted name.
  StateDict<T> state_dict() const {
    StateDict<T> out;
    for (auto& [name, p] : named_parameters()) out.emplace_back(name, p.value());
    return out;
  }
  /// Load values by dotted name. Every parameter must be present with its exact shape, and no
  /// extra name may appear; otherwise throws ValueError listing what differs (nothing is changed).
  void load_state_dict(const StateDict<T>& state);

  /// Run `hook` on this module's output at the end of every forward, after the hooks added
  /// before it. Hooks are not state: not saved, not copied.
  HookHandle add_forward_hook(ForwardHook<T> hook) {
    hooks_.push_back({++next_hook_id_, std::move(hook)});
    return {this, hooks_.back().id};
  }
  /// Add `hook` to the descendant at `path` (e.g. "blocks.0.attn.hook_pattern"); see submodule().
  HookHandle add_forward_hook(const std::string& path, ForwardHook<T> hook) {
    return submodule(path).add_forward_hook(std::move(hook));
  }
  /// Remove a hook of this module or of a descendant; unknown handles are ignored.
  void remove_forward_hook(const HookHandle& handle) {
    for (auto& [name, m] : named_modules())
      if (m == handle.module)
        m->hooks_.erase(std::remove_if(m->hooks_.begin(), m->hooks_.end(), [&](auto& h) { return h.id == handle.id; }),
                        m->hooks_.end());
  }
  /// Remove every hook of this module and its descendants.
  void clear_forward_hooks() {
    apply([](Module<T>& m) { m.hooks_.clear(); });
  }
  bool has_forward_hooks() const { return !hooks_.empty(); }

 protected:
  /// Register a parameter (a leaf that requires grad) under `name`.
  Variable<T> register_parameter(const std::string& name, Array<T> value, ParamRole role = ParamRole::Weight) {
    check_name(name);
    const Shape shape = value.shape();
    Variable<T> p(std::move(value), true);
    params_.push_back({name, p, role, shape});
    return p;
  }
  /// Register a parameter of `shape` whose value is `init()`; under MetaGuard, init is not called
  /// and the parameter holds no value.
  template <class Init>
  Variable<T> register_parameter(const std::string& name, const Shape& shape, Init&& init,
                                 ParamRole role = ParamRole::Weight) {
    if (!MetaGuard::active()) return register_parameter(name, init(), role);
    check_name(name);
    Variable<T> p(Array<T>(), true);
    params_.push_back({name, p, role, shape});
    return p;
  }
  /// Register a child module under `name`.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_name(name);
    children_.emplace_back(name, module);
    return module;
  }
  /// What forward() returns: `output` passed through this module's hooks (itself when none).
  Variable<T> hooked(const Variable<T>& output) const {
    if (hooks_.empty()) return output;
    Variable<T> y = output;
    for (auto& h : hooks_) y = h.fn(y);
    return y;
  }

 private:
  struct Param {
    std::string name;
    Variable<T> value;
    ParamRole role;
    Shape shape;
  };
  struct Hook {
    std::uint64_t id;
    ForwardHook<T> fn;
  };
  void check_name(const std::string& name) const {
    if (name.empty() || name.find('.') != std::string::npos)
      throw ValueError("Module: name '" + name + "' must be non-empty and contain no '.'");
    for (auto& p : params_)
      if (p.name == name) throw ValueError("Module: name '" + name + "' is registered twice");
    for (auto& [n, c] : children_)
      if (n == name) throw ValueError("Module: name '" + name + "' is registered twice");
  }
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Variable<T>>>& out) const {
    for (auto& p : params_) out.emplace_back(prefix + p.name, p.value);
    for (auto& [name, child] : children_) child->collect(prefix + name + ".", out);
  }
  void walk(const std::string& name, std::vector<std::pair<std::string, Module<T>*>>& out) const {
    out.emplace_back(name, const_cast<Module<T>*>(this));
    for (auto& [child_name, child] : children_) child->walk(name.empty() ? child_name : name + "." + child_name, out);
  }

  std::vector<Param> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module<T>>>> children_;
  std::vector<Hook> hooks_;
  std::uint64_t next_hook_id_ = 0;
  bool training_ = true;
};

/// Evaluation mode for a scope (like torch's `model.eval()` ... `model.train(was)`): the module's
/// previous mode comes back when the guard ends, also when an exception passes.
template <class T>
class EvalGuard {
 public:
  explicit EvalGuard(Module<T>& m) : m_(m), was_training_(m.is_training()) { m.eval(); }
  ~EvalGuard() { m_.train(was_training_); }
  EvalGuard(const EvalGuard&) = delete;
  EvalGuard& operator=(const EvalGuard&) = delete;

 private:
  Module<T>& m_;
  bool was_training_;
};

/// A named point in a layer's forward where a hook can read or replace the value flowing by:
/// forward(x) = x passed through the hooks (x itself when none). No parameters.
template <class T>
class HookPoint : public Module<T> {
 public:
  Variable<T> forward(const Variable<T>& x) const { return this->hooked(x); }
  Variable<T> operator()(const Variable<T>& x) const { return forward(x); }
};

/// An indexed list of modules: children named "0", "1", ...
template <class M>
class ModuleList : public Module<typename M::value_type> {
 public:
  void push_back(std::shared_ptr<M> m) {
    items_.push_back(this->register_module(std::to_string(items_.size()), std::move(m)));
  }
  std::size_t size() const { return items_.size(); }
  M& operator[](std::size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

template <class T>
Module<T>& Module<T>::submodule(const std::string& path) const {
  std::vector<std::string> names;
  for (auto& [name, m] : named_modules()) {
    if (name == path) return *m;
    names.push_back(name);
  }
  throw ValueError("no module named '" + path + "'" + did_you_mean(path, names));
}

template <class T>
void Module<T>::load_state_dict(const StateDict<T>& state) {
  const auto params = named_parameters();
  const std::string problems = state_dict_diff(params, state);
  if (!problems.empty()) throw ValueError("load_state_dict: the state does not fit this model:" + problems);
  for (auto& [name, p] : params) {
    auto it = std::find_if(state.begin(), state.end(), [&key = name](auto& kv) { return kv.first == key; });
    std::copy(it->second.begin(), it->second.end(), p.value().begin());
  }
}

}  // namespace qkv::nn
