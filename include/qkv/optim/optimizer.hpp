#pragma once
/// @file
/// Optimizer: the base of SGD, Adam and AdamW. Parameters come in groups, each with its own lr
/// and weight decay; per-parameter buffers (momentum, Adam moments) live here, by name, so that
/// state_dict()/load_state_dict() are written once for every optimizer.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qkv/autograd/variable.hpp"
#include "qkv/nn/module.hpp"
#include "qkv/tensor/names.hpp"
#include "qkv/tensor/options.hpp"

namespace qkv::optim {

/// Parameters that share an lr and a weight decay.
///
/// `gain` makes an exact reparameterisation: each parameter W of the group is read as gain * theta
/// and updated so that theta follows the trajectory it would follow as a parameter of its own with
/// this group's lr and weight decay (W's gradient is that of theta over gain). So SGD steps W with
/// lr * gain^2 and L2 decay weight_decay / gain^2; Adam with lr * gain, eps / gain and L2 decay
/// weight_decay / gain^2; AdamW with lr * gain, eps / gain and the decoupled shrink 1 - lr *
/// weight_decay; gradient clipping counts W's gradient times gain (optim::clip_grad_norm). With
/// model.qk_init_gain = gain = d_k^(-1/4) on W_q and W_k, an unscaled attention trains as the
/// scaled one (up to rounding).
template <class T>
struct ParamGroup {
  std::vector<std::pair<std::string, Variable<T>>> params;  ///< dotted names from named_parameters()
  double lr = 1e-3;
  double weight_decay = 0.0;
  double gain = 1.0;  ///< > 0; see above
};

/// Every parameter in one group (what the optimizers' single-group constructors use).
template <class T>
std::vector<ParamGroup<T>> one_group(const std::vector<std::pair<std::string, Variable<T>>>& named, double lr,
                                     double weight_decay) {
  return {ParamGroup<T>{named, lr, weight_decay}};
}

/// The parameters of `module` in two groups, {decay, no-decay}, both with `lr`: the decay group
/// (weight_decay) holds the parameters their module registered as ParamRole::Weight (linear
/// weights, embeddings, learned positions), the no-decay group (0) the biases and normalisation
/// gains and shifts. Decided by the role the owning module gave, not by names. Order within each
/// group follows named_parameters(). Either group may be empty.
template <class T>
std::vector<ParamGroup<T>> param_groups_decay_weights_only(const nn::Module<T>& module, double lr, double weight_decay);

/// What an optimizer saves: its step count and its buffers, named "<buffer>/<param dotted name>"
/// (e.g. "exp_avg/blocks.0.attn.w_q.weight"), in group then parameter order.
template <class T>
struct OptimizerState {
  std::int64_t step = 0;
  StateDict<T> tensors;
};

template <class T>
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient (parameters without one are skipped and
  /// their buffers left unchanged, like torch). Counts one step.
  virtual void step() = 0;
  /// Forget the gradient of every parameter.
  void zero_grad();
  /// Set the lr of every group (schedules call this before each step).
  void set_lr(double lr);
  /// The lr of group 0.
  double lr() const;
  /// The gain of each of `params` (ParamGroup::gain; 1 for one in no group), or empty when every
  /// group's gain is 1 (then nothing is allocated).
  std::vector<double> gains_of(const std::vector<Variable<T>>& params) const;
  /// The same into `out` (cleared first; reusing its capacity, so a training step allocates nothing).
  void gains_of(const std::vector<Variable<T>>& params, std::vector<double>& out) const;
  /// Number of step() calls so far (restored by load_state_dict).
  std::int64_t steps() const { return step_; }
  const std::vector<ParamGroup<T>>& groups() const { return groups_; }
  /// Optimizer name for messages ("SGD", "Adam", "AdamW").
  const std::string& name() const { return name_; }

  /// Copies of the step count and every buffer.
  virtual OptimizerState<T> state_dict() const;
  /// Restore a state_dict() of an optimizer of the same kind over the same parameter names and
  /// shapes. Throws ValueError naming every missing, unexpected or misshaped buffer (and a
  /// negative step); nothing is changed then.
  virtual void load_state_dict(const OptimizerState<T>& state);

 protected:
  /// Checks the groups: at least one, lr >= 0, weight_decay >= 0, gain > 0, no name or parameter twice.
  Optimizer(std::vector<ParamGroup<T>> groups, std::string name);
  /// Register a buffer named `name`: one zero tensor shaped like each parameter. Returns its id.
  std::size_t add_buffer(const std::string& name);
  /// Buffer `id` of parameter `index` (parameters counted over groups, in order).
  Array<T>& buffer(std::size_t id, std::size_t index) { return buffers_[id][index]; }

  /// Call f(group, index, param) for every parameter that has a gradient; `index` counts every
  /// parameter over groups, in order (the buffer index).
  template <class F>
  void for_each_with_grad(F&& f) {
    std::size_t index = 0;
    for (const ParamGroup<T>& g : groups_)
      for (const auto& [name, p] : g.params) {
        if (p.has_grad()) f(g, index, p);
        ++index;
      }
  }

  std::int64_t step_ = 0;

 private:
  std::vector<ParamGroup<T>> groups_;
  std::unordered_map<const void*, double> gain_by_id_;  // the parameters whose group's gain is not 1
  std::string name_;
  std::vector<std::string> buffer_names_;
  std::vector<std::vector<Array<T>>> buffers_;  // [buffer id][parameter index]
};

enum class OptimizerKind { SGD, Adam, AdamW };
/// The names configs use: "sgd", "adam", "adamw".
const NameTable<OptimizerKind>& optimizer_names();

/// The config's `optimizer` section: which optimizer and all its settings (each kind reads
/// the ones it has: SGD momentum, dampening, nesterov; Adam/AdamW beta1, beta2, eps), the
/// weight-decay grouping, and gradient clipping (applied by the training step).
struct OptimizerOptions {
  OptimizerKind name = OptimizerKind::AdamW;
  double lr = 1e-3;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  bool decay_bias_and_norm = false;  ///< decay biases and norm gains too (else param_groups_decay_weights_only)
  double clip_grad_norm = 1.0;       ///< global gradient-norm clip; 0: off
  /// The ParamGroup::gain of every attention W_q and W_k (weights and biases: parameters named
  /// "...w_q.*" and "...w_k.*"), in groups of their own; 1: none.
  double qk_gain = 1.0;
  /// lr > 0, weight_decay >= 0, betas in [0, 1), eps > 0, momentum in [0, 1), dampening in
  /// [0, 1], nesterov only with momentum > 0 and dampening 0, clip_grad_norm >= 0, qk_gain > 0;
  /// throws OptionError.
  void validate() const;
};

/// The optimizer `options` describes over the parameters of `module`, grouped for weight decay
/// as options.decay_bias_and_norm says.
template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(const nn::Module<T>& module, const OptimizerOptions& options);

}  // namespace qkv::optim
