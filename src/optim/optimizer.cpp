#include "qkv/optim/optimizer.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

namespace qkv::optim {

template <class T>
std::vector<ParamGroup<T>> param_groups_decay_weights_only(const nn::Module<T>& module, double lr, double weight_decay) {
  ParamGroup<T> decay{{}, lr, weight_decay};
  ParamGroup<T> no_decay{{}, lr, 0.0};
  const auto named = module.named_parameters();
  const auto roles = module.parameter_roles();
  for (std::size_t i = 0; i < named.size(); ++i)
    (roles[i] == nn::ParamRole::Weight ? decay : no_decay).params.push_back(named[i]);
  return {std::move(decay), std::move(no_decay)};
}

template <class T>
Optimizer<T>::Optimizer(std::vector<ParamGroup<T>> groups, std::string name)
    : groups_(std::move(groups)), name_(std::move(name)) {
  if (groups_.empty()) throw ValueError(name_ + ": expected at least one parameter group, got none");
  std::set<std::string> names;
  std::set<const void*> ids;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    const ParamGroup<T>& g = groups_[i];
    const std::string where = name_ + ": parameter group " + std::to_string(i);
    if (!(g.lr >= 0)) throw ValueError(where + ": lr must be >= 0, got " + std::to_string(g.lr));
    if (!(g.weight_decay >= 0))
      throw ValueError(where + ": weight_decay must be >= 0, got " + std::to_string(g.weight_decay));
    if (!(g.gain > 0) || !std::isfinite(g.gain))
      throw ValueError(where + ": gain must be a positive number, got " + std::to_string(g.gain));
    for (const auto& [pname, p] : g.params) {
      if (!p.defined()) throw ValueError(where + ": parameter '" + pname + "' is undefined");
      if (!names.insert(pname).second)
        throw ValueError(where + ": parameter name '" + pname + "' appears more than once");
      if (!ids.insert(p.id()).second)
        throw ValueError(where + ": parameter '" + pname + "' is already in the optimizer under another name");
      if (g.gain != 1.0) gain_by_id_[p.id()] = g.gain;
    }
  }
}

template <class T>
Optimizer<T>::~Optimizer() = default;

template <class T>
std::size_t Optimizer<T>::add_buffer(const std::string& name) {
  std::vector<Array<T>> per_param;
  for (const ParamGroup<T>& g : groups_)
    for (const auto& [pname, p] : g.params) per_param.push_back(zeros<T>(p.shape()));
  buffer_names_.push_back(name);
  buffers_.push_back(std::move(per_param));
  return buffers_.size() - 1;
}

template <class T>
void Optimizer<T>::zero_grad() {
  for (const ParamGroup<T>& g : groups_)
    for (const auto& [name, p] : g.params) p.zero_grad();
}

template <class T>
void Optimizer<T>::set_lr(double lr) {
  if (!(lr >= 0)) throw ValueError(name_ + ".set_lr: lr must be >= 0, got " + std::to_string(lr));
  for (ParamGroup<T>& g : groups_) g.lr = lr;
}

template <class T>
std::vector<double> Optimizer<T>::gains_of(const std::vector<Variable<T>>& params) const {
  std::vector<double> out;
  gains_of(params, out);
  return out;
}

template <class T>
void Optimizer<T>::gains_of(const std::vector<Variable<T>>& params, std::vector<double>& out) const {
  out.clear();
  if (gain_by_id_.empty()) return;
  for (const Variable<T>& p : params) {
    const auto it = gain_by_id_.find(p.id());
    out.push_back(it == gain_by_id_.end() ? 1.0 : it->second);
  }
}

template <class T>
double Optimizer<T>::lr() const {
  return groups_.front().lr;
}

template <class T>
OptimizerState<T> Optimizer<T>::state_dict() const {
  OptimizerState<T> s;
  s.step = step_;
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    std::size_t index = 0;
    for (const ParamGroup<T>& g : groups_)
      for (const auto& [name, p] : g.params) s.tensors.emplace_back(buffer_names_[b] + "/" + name, buffers_[b][index++]);
  }
  return s;
}

template <class T>
void Optimizer<T>::load_state_dict(const OptimizerState<T>& state) {
  // What the buffers hold now (names and shapes); check everything before touching anything.
  const StateDict<T> expected = state_dict().tensors;
  std::string problems;
  if (state.step < 0) problems += "\n  step: expected >= 0, found " + std::to_string(state.step);
  problems += state_dict_diff(expected, state.tensors);
  if (!problems.empty())
    throw ValueError(name_ + ".load_state_dict: the state does not fit this optimizer:" + problems);
  std::size_t i = 0;
  for (std::size_t b = 0; b < buffers_.size(); ++b)
    for (Array<T>& buffer : buffers_[b]) {
      const std::string& name = expected[i++].first;
      auto it = std::find_if(state.tensors.begin(), state.tensors.end(), [&](auto& kv) { return kv.first == name; });
      std::copy(it->second.begin(), it->second.end(), buffer.begin());
    }
  step_ = state.step;
}

template struct ParamGroup<float>;
template struct ParamGroup<double>;
template class Optimizer<float>;
template class Optimizer<double>;
template std::vector<ParamGroup<float>> param_groups_decay_weights_only(const nn::Module<float>&, double, double);
template std::vector<ParamGroup<double>> param_groups_decay_weights_only(const nn::Module<double>&, double, double);

}  // namespace qkv::optim
