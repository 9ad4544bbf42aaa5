#pragma once
/// @file
/// Linear layer: y = x W^T + b.

#include "qkv/nn/module.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::nn {

struct LinearOptions {
  std::size_t in_features = 0;
  std::size_t out_features = 0;
  bool bias = true;
  /// Both widths positive; throws OptionError naming the field.
  void validate() const;
};

/// y = x W^T + b (qkv::linear). x (..., in) -> y (..., out).
/// Parameters: "weight" (out, in), "bias" (out) when options.bias.
/// Init (PyTorch nn.Linear): weight and bias U(-1/sqrt(in), 1/sqrt(in)), weight first, from `gen`.
template <class T>
class Linear : public Module<T> {
 public:
  explicit Linear(const LinearOptions& options, Generator& gen = default_generator());
  Linear(std::size_t in_features, std::size_t out_features, bool bias = true,
         Generator& gen = default_generator())
      : Linear(LinearOptions{in_features, out_features, bias}, gen) {}

  Variable<T> forward(const Variable<T>& x) const;
  Variable<T> operator()(const Variable<T>& x) const { return forward(x); }

  const LinearOptions& options() const { return options_; }
  Variable<T> weight;  ///< (out, in)
  Variable<T> bias;    ///< (out); undefined without bias

 private:
  LinearOptions options_;
};

}  // namespace qkv::nn
