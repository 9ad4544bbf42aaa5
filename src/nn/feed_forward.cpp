#include "qkv/nn/feed_forward.hpp"

#include "qkv/ops/elementwise.hpp"

namespace qkv::nn {

const char* activation_name(Activation a) { return a == Activation::Gelu ? "gelu" : "relu"; }

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::Gelu;
  if (name == "relu") return Activation::Relu;
  throw ValueError("activation: expected \"gelu\" or \"relu\", found \"" + name + "\"");
}

template <class T>
FeedForward<T>::FeedForward(const FeedForwardOptions& options, Generator& gen) : options_(options) {
  if (options.dim == 0 || options.hidden == 0)
    throw ValueError("FeedForward: dim and hidden must be positive, found " + std::to_string(options.dim) +
                     " and " + std::to_string(options.hidden));
  fc1 = this->register_module("fc1", std::make_shared<Linear<T>>(options.dim, options.hidden, options.bias, gen));
  fc2 = this->register_module("fc2", std::make_shared<Linear<T>>(options.hidden, options.dim, options.bias, gen));
  drop = this->register_module("drop", std::make_shared<Dropout<T>>(options.dropout));
}

template <class T>
Variable<T> FeedForward<T>::forward(const Variable<T>& x) const {
  Variable<T> h = fc1->forward(x);
  h = options_.activation == Activation::Gelu ? gelu(h) : relu(h);
  return this->hooked(drop->forward(fc2->forward(drop->forward(h))));
}

template class FeedForward<float>;
template class FeedForward<double>;

}  // namespace qkv::nn
