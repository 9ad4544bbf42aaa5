#include "qkv/nn/linear.hpp"

#include <cmath>

#include "qkv/nn/init.hpp"
#include "qkv/ops/matmul.hpp"

namespace qkv::nn {

void LinearOptions::validate() const {
  OptionChecker c("LinearOptions");
  c.positive(in_features, "in_features");
  c.positive(out_features, "out_features");
}

template <class T>
Linear<T>::Linear(const LinearOptions& options, Generator& gen) : options_(options) {
  options.validate();
  const Shape w_shape{options.out_features, options.in_features}, b_shape{options.out_features};
  weight = this->register_parameter("weight", w_shape, [&] { return init::linear_default<T>(w_shape, gen); });
  if (options.bias) {
    const double b = 1.0 / std::sqrt(double(options.in_features));
    bias = this->register_parameter("bias", b_shape, [&] { return init::uniform<T>(b_shape, -b, b, gen); },
                                    ParamRole::Bias);
  }
}

template <class T>
Variable<T> Linear<T>::forward(const Variable<T>& x) const {
  return this->hooked(linear(x, weight, bias));
}

template class Linear<float>;
template class Linear<double>;

}  // namespace qkv::nn
