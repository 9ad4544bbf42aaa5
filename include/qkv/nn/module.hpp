#pragma once
/// @file
/// Module: the base of every layer. Parameters and sub-modules are registered by name (names hold
/// no dots); named_parameters() walks them in registration order and joins names with dots
/// ("blocks.0.attn.w_q.weight"): those dotted names are the checkpoint's dataset paths.

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/autograd/variable.hpp"

namespace qkv::nn {

/// (dotted name, tensor) pairs in registration order.
template <class T>
using StateDict = std::vector<std::pair<std::string, Array<T>>>;

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
  const std::vector<std::pair<std::string, std::shared_ptr<Module<T>>>>& named_children() const {
    return children_;
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

 protected:
  /// Register a parameter (a leaf that requires grad) under `name`.
  Variable<T> register_parameter(const std::string& name, Array<T> value) {
    check_name(name);
    Variable<T> p(std::move(value), true);
    params_.emplace_back(name, p);
    return p;
  }
  /// Register a child module under `name`.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_name(name);
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void check_name(const std::string& name) const {
    if (name.empty() || name.find('.') != std::string::npos)
      throw ValueError("Module: name '" + name + "' must be non-empty and contain no '.'");
    for (auto& [n, p] : params_)
      if (n == name) throw ValueError("Module: name '" + name + "' is registered twice");
    for (auto& [n, c] : children_)
      if (n == name) throw ValueError("Module: name '" + name + "' is registered twice");
  }
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Variable<T>>>& out) const {
    for (auto& [name, p] : params_) out.emplace_back(prefix + name, p);
    for (auto& [name, child] : children_) child->collect(prefix + name + ".", out);
  }

  std::vector<std::pair<std::string, Variable<T>>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module<T>>>> children_;
  bool training_ = true;
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
void Module<T>::load_state_dict(const StateDict<T>& state) {
  // The lambdas capture `key` by init-capture: capturing a structured binding itself is C++20
  // (clang 14 rejects it in C++17 mode, which breaks the clang/fuzz build).
  auto params = named_parameters();
  std::string problems;
  for (auto& [name, p] : params) {
    auto it = std::find_if(state.begin(), state.end(), [&key = name](auto& kv) { return kv.first == key; });
    if (it == state.end())
      problems += "\n  missing: " + name + " " + shape_str(p.shape());
    else if (it->second.shape() != p.shape())
      problems += "\n  shape of " + name + ": expected " + shape_str(p.shape()) + ", found " +
                  shape_str(it->second.shape());
  }
  for (auto& [name, value] : state) {
    bool known = std::any_of(params.begin(), params.end(), [&key = name](auto& kv) { return kv.first == key; });
    if (!known) problems += "\n  unexpected: " + name + " " + shape_str(value.shape());
  }
  if (!problems.empty()) throw ValueError("load_state_dict: the state does not fit this model:" + problems);
  for (auto& [name, p] : params) {
    auto it = std::find_if(state.begin(), state.end(), [&key = name](auto& kv) { return kv.first == key; });
    std::copy(it->second.begin(), it->second.end(), p.value().begin());
  }
}

}  // namespace qkv::nn
