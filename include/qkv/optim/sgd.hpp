#pragma once
/// @file
/// Stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay, exactly as
/// torch.optim.SGD. Per parameter p with gradient g, momentum buffer b:
///   g <- g + wd * p                                   (when wd != 0)
///   b <- g on the first step, else b <- momentum * b + (1 - dampening) * g   (when momentum != 0)
///   d <- nesterov ? g + momentum * b : b              (d = g without momentum)
///   p <- p - lr * d
/// Buffer: "momentum_buffer" (only when momentum != 0).

#include "qkv/optim/optimizer.hpp"

namespace qkv::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  ///< needs momentum > 0 and dampening == 0 (as torch)
};

template <class T>
class SGD : public Optimizer<T> {
 public:
  /// Each group's lr and weight_decay are used; options.lr and options.weight_decay are not.
  /// Throws ValueError naming a bad option.
  SGD(std::vector<ParamGroup<T>> groups, SGDOptions options = {});
  /// One group of every parameter, with options.lr and options.weight_decay.
  SGD(const std::vector<std::pair<std::string, Variable<T>>>& named, SGDOptions options = {});
  void step() override;
  const SGDOptions& options() const { return options_; }

 private:
  SGDOptions options_;
  std::size_t momentum_ = 0;  // buffer id
};

}  // namespace qkv::optim
