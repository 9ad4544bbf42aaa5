#include "qkv/nn/layer_norm.hpp"

#include <cmath>

#include "qkv/ops/norm.hpp"

namespace qkv::nn {

void LayerNormOptions::validate() const {
  OptionChecker c("LayerNormOptions");
  c.positive(dim, "dim");
  c.in_range(eps, "eps", 0, true, INFINITY, true);
}

template <class T>
LayerNorm<T>::LayerNorm(const LayerNormOptions& options) : options_(options) {
  options.validate();
  if (options.elementwise_affine) {
    const Shape shape{options.dim};
    weight = this->register_parameter("weight", shape, [&] { return full<T>(shape, T(1)); }, ParamRole::Norm);
    bias = this->register_parameter("bias", shape, [&] { return zeros<T>(shape); }, ParamRole::Norm);
  }
}

template <class T>
Variable<T> LayerNorm<T>::forward(const Variable<T>& x) const {
  if (x.ndim() == 0 || x.dim(-1) != options_.dim)
    throw ShapeError("LayerNorm: expected input (..., " + std::to_string(options_.dim) + "), found " +
                     shape_str(x.shape()));
  return this->hooked(layer_norm(x, weight, bias, options_.eps));
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace qkv::nn
