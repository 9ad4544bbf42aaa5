#include "qkv/nn/feed_forward.hpp"

#include "qkv/ops/elementwise.hpp"

namespace qkv::nn {

const NameTable<Activation>& activation_names() {
  static const NameTable<Activation> table{{"gelu", Activation::Gelu}, {"relu", Activation::Relu}};
  return table;
}

void FeedForwardOptions::validate() const {
  OptionChecker c("FeedForwardOptions");
  c.positive(dim, "dim");
  c.positive(hidden, "hidden");
  c.in_range(dropout, "dropout", 0, false, 1, true);
}

template <class T>
FeedForward<T>::FeedForward(const FeedForwardOptions& options, Generator& gen) : options_(options) {
  options.validate();
  fc1 = this->register_module("fc1", std::make_shared<Linear<T>>(options.dim, options.hidden, options.bias, gen));
  fc2 = this->register_module("fc2", std::make_shared<Linear<T>>(options.hidden, options.dim, options.bias, gen));
  drop = this->register_module("drop", std::make_shared<Dropout<T>>(options.dropout));
}

template <class T>
Variable<T> FeedForward<T>::hidden(const Variable<T>& x) const {
  const Variable<T> h = fc1->forward(x);
  return fc2->forward(options_.activation == Activation::Gelu ? drop->forward_gelu(h) : drop->forward(relu(h)));
}

template <class T>
Variable<T> FeedForward<T>::forward(const Variable<T>& x) const {
  return this->hooked(drop->forward(hidden(x)));
}

template <class T>
Variable<T> FeedForward<T>::forward_add(const Variable<T>& residual, const Variable<T>& x) const {
  if (this->has_forward_hooks()) return add(residual, forward(x));
  return drop->forward_add(residual, hidden(x));
}

template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace qkv::nn
