#pragma once
/// @file
/// Position-wise feed-forward block of a transformer layer.

#include "qkv/nn/dropout.hpp"
#include "qkv/nn/linear.hpp"
#include "qkv/tensor/names.hpp"
#include "qkv/tensor/options.hpp"

namespace qkv::nn {

/// Non-linearity of the feed-forward block. GELU is the exact erf form (PyTorch's default).
enum class Activation { Gelu, Relu };

/// The names configs use: "gelu", "relu".
const NameTable<Activation>& activation_names();

struct FeedForwardOptions {
  std::size_t dim = 0;       ///< C (input and output width)
  std::size_t hidden = 256;  ///< inner width (d_ff)
  Activation activation = Activation::Gelu;
  double dropout = 0.0;      ///< after the activation and on the output, as in PyTorch's layers
  bool bias = true;
  /// dim and hidden positive, dropout in [0, 1); throws OptionError.
  void validate() const;
};

/// y = dropout(fc2(dropout(act(fc1(x))))): PyTorch's TransformerEncoderLayer._ff_block
/// (linear1, activation, dropout, linear2, dropout2). x (..., C) -> (..., C).
/// Parameters: "fc1.weight" (hidden, C), "fc1.bias" (hidden), "fc2.weight" (C, hidden),
/// "fc2.bias" (C). Init: nn.Linear defaults (see Linear), fc1 then fc2, from `gen`.
/// Dropout draws from default_generator() (see Dropout) and only in training mode. In training,
/// GELU and the hidden dropout run as one op (gelu_dropout) unless a hook is on `drop`.
template <class T>
class FeedForward : public Module<T> {
 public:
  explicit FeedForward(const FeedForwardOptions& options, Generator& gen = default_generator());

  Variable<T> forward(const Variable<T>& x) const;
  Variable<T> operator()(const Variable<T>& x) const { return forward(x); }
  /// add(residual, forward(x)), the output dropout fused into the add (Dropout::forward_add)
  /// when no hook is on this module. Same bits as the unfused form.
  Variable<T> forward_add(const Variable<T>& residual, const Variable<T>& x) const;

  const FeedForwardOptions& options() const { return options_; }
  std::shared_ptr<Linear<T>> fc1, fc2;
  std::shared_ptr<Dropout<T>> drop;

 private:
  Variable<T> hidden(const Variable<T>& x) const;  // fc2(dropout(act(fc1(x))))
  FeedForwardOptions options_;
};

}  // namespace qkv::nn
