#pragma once
/// @file
/// Dropout layer.

#include "qkv/nn/module.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::nn {

struct DropoutOptions {
  double p = 0.0;  ///< drop probability, in [0, 1)
  /// p in [0, 1); throws OptionError.
  void validate() const;
};

/// Inverted dropout (qkv::dropout) while the module is training; the identity in eval mode or
/// with p = 0 (then no random draw is consumed). Same shape in and out. No parameters.
/// Randomness: `generator()` if set, else default_generator() at each call; the mask is a pure
/// function of the generator state, so a reseeded generator reproduces it on any thread count.
template <class T>
class Dropout : public Module<T> {
 public:
  explicit Dropout(const DropoutOptions& options = {});
  explicit Dropout(double p) : Dropout(DropoutOptions{p}) {}

  Variable<T> forward(const Variable<T>& x) const;
  Variable<T> operator()(const Variable<T>& x) const { return forward(x); }
  /// add(x, forward(y)): a residual add after a dropped branch. One pass (qkv::dropout_add) when
  /// training with p > 0 and no hook is on this module; else the two ops. Same bits either way.
  Variable<T> forward_add(const Variable<T>& x, const Variable<T>& y) const;
  /// forward(gelu(h, approx)), in one pass (qkv::gelu_dropout) under the same conditions.
  Variable<T> forward_gelu(const Variable<T>& h, GeluApprox approx = GeluApprox::None) const;

  /// Draw from `gen` (not owned; nullptr = default_generator()).
  void set_generator(Generator* gen) { generator_ = gen; }
  Generator* generator() const { return generator_; }
  const DropoutOptions& options() const { return options_; }

 private:
  DropoutOptions options_;
  Generator* generator_ = nullptr;
};

}  // namespace qkv::nn
