#include "qkv/nn/dropout.hpp"

#include "qkv/ops/dropout.hpp"

namespace qkv::nn {

void DropoutOptions::validate() const { OptionChecker("DropoutOptions").in_range(p, "p", 0, false, 1, true); }

template <class T>
Dropout<T>::Dropout(const DropoutOptions& options) : options_(options) {
  options.validate();
}

template <class T>
Variable<T> Dropout<T>::forward(const Variable<T>& x) const {
  if (!this->is_training() || options_.p == 0.0) return this->hooked(x);
  return this->hooked(dropout(x, options_.p, true, generator_ ? *generator_ : default_generator()));
}

template <class T>
Variable<T> Dropout<T>::forward_add(const Variable<T>& x, const Variable<T>& y) const {
  if (this->has_forward_hooks() || !this->is_training() || options_.p == 0.0) return add(x, forward(y));
  return dropout_add(x, y, options_.p, true, generator_ ? *generator_ : default_generator());
}

template <class T>
Variable<T> Dropout<T>::forward_gelu(const Variable<T>& h, GeluApprox approx) const {
  if (this->has_forward_hooks() || !this->is_training() || options_.p == 0.0) return forward(gelu(h, approx));
  return gelu_dropout(h, approx, options_.p, true, generator_ ? *generator_ : default_generator());
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace qkv::nn
