#pragma once
/// @file
/// Layer normalisation over the last dimension.

#include "qkv/nn/module.hpp"
#include "qkv/tensor/options.hpp"

namespace qkv::nn {

struct LayerNormOptions {
  std::size_t dim = 0;             ///< C, the normalised (last) dimension
  double eps = 1e-5;
  bool elementwise_affine = true;  ///< learn a scale and a shift
  /// dim positive, eps > 0; throws OptionError.
  void validate() const;
};

/// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (qkv::layer_norm,
/// biased variance, like torch.nn.LayerNorm). x (..., C) -> (..., C).
/// Parameters (when elementwise_affine): "weight" (C) initialised to ones, "bias" (C) to zeros.
template <class T>
class LayerNorm : public Module<T> {
 public:
  explicit LayerNorm(const LayerNormOptions& options);
  explicit LayerNorm(std::size_t dim) : LayerNorm(LayerNormOptions{dim}) {}

  Variable<T> forward(const Variable<T>& x) const;
  Variable<T> operator()(const Variable<T>& x) const { return forward(x); }

  const LayerNormOptions& options() const { return options_; }
  Variable<T> weight;  ///< (C); undefined without elementwise_affine
  Variable<T> bias;    ///< (C); undefined without elementwise_affine

 private:
  LayerNormOptions options_;
};

}  // namespace qkv::nn
