#include <cmath>

#include "qkv/optim/adam.hpp"
#include "qkv/optim/optimizer.hpp"
#include "qkv/optim/sgd.hpp"

namespace qkv::optim {

const NameTable<OptimizerKind>& optimizer_names() {
  static const NameTable<OptimizerKind> table{
      {"sgd", OptimizerKind::SGD}, {"adam", OptimizerKind::Adam}, {"adamw", OptimizerKind::AdamW}};
  return table;
}

void OptimizerOptions::validate() const {
  OptionChecker c("OptimizerOptions");
  c.in_range(lr, "lr", 0, true, INFINITY, false);
  c.in_range(weight_decay, "weight_decay", 0, false, INFINITY, false);
  c.in_range(beta1, "beta1", 0, false, 1, true);
  c.in_range(beta2, "beta2", 0, false, 1, true);
  c.in_range(eps, "eps", 0, true, INFINITY, false);
  c.in_range(momentum, "momentum", 0, false, 1, true);
  c.in_range(dampening, "dampening", 0, false, 1, false);
  c.require(!nesterov || (momentum > 0 && dampening == 0), {"nesterov", "momentum", "dampening"},
            "nesterov needs momentum > 0 and dampening 0, found momentum " + number_text(momentum) + " and dampening " +
                number_text(dampening));
  c.in_range(clip_grad_norm, "clip_grad_norm", 0, false, INFINITY, false);
  c.in_range(qk_gain, "qk_gain", 0, true, INFINITY, false);
}

namespace {

// Whether `name` is an attention W_q or W_k parameter ("blocks.0.attn.w_q.weight").
bool is_query_or_key(const std::string& name) {
  for (const char* part : {"w_q.", "w_k."}) {
    const std::size_t at = name.rfind(part);
    if (at != std::string::npos && (at == 0 || name[at - 1] == '.') && name.find('.', at + 4) == std::string::npos)
      return true;
  }
  return false;
}

// Each group's W_q and W_k parameters moved to a group of their own with `gain` (empty groups dropped).
template <class T>
std::vector<ParamGroup<T>> with_qk_gain(std::vector<ParamGroup<T>> groups, double gain) {
  if (gain == 1.0) return groups;
  std::vector<ParamGroup<T>> out;
  for (ParamGroup<T>& g : groups) {
    ParamGroup<T> rest{{}, g.lr, g.weight_decay, g.gain}, qk{{}, g.lr, g.weight_decay, g.gain * gain};
    for (auto& named : g.params) (is_query_or_key(named.first) ? qk : rest).params.push_back(std::move(named));
    for (ParamGroup<T>* part : {&rest, &qk})
      if (!part->params.empty()) out.push_back(std::move(*part));
  }
  return out;
}

}  // namespace

template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(const nn::Module<T>& module, const OptimizerOptions& o) {
  o.validate();
  std::vector<ParamGroup<T>> groups =
      with_qk_gain(o.decay_bias_and_norm ? one_group(module.named_parameters(), o.lr, o.weight_decay)
                                         : param_groups_decay_weights_only(module, o.lr, o.weight_decay),
                   o.qk_gain);
  switch (o.name) {
    case OptimizerKind::SGD:
      return std::make_unique<SGD<T>>(std::move(groups), SGDOptions{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov});
    case OptimizerKind::Adam:
      return std::make_unique<Adam<T>>(std::move(groups), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
    case OptimizerKind::AdamW:
      break;
  }
  return std::make_unique<AdamW<T>>(std::move(groups), AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
}

template std::unique_ptr<Optimizer<float>> make_optimizer(const nn::Module<float>&, const OptimizerOptions&);
template std::unique_ptr<Optimizer<double>> make_optimizer(const nn::Module<double>&, const OptimizerOptions&);

}  // namespace qkv::optim
