#include "qkv/nn/embedding.hpp"

#include <cmath>

#include "qkv/nn/init.hpp"
#include "qkv/ops/embedding.hpp"

namespace qkv::nn {

void EmbeddingOptions::validate() const {
  OptionChecker c("EmbeddingOptions");
  c.positive(num_embeddings, "num_embeddings");
  c.positive(embedding_dim, "embedding_dim");
  c.in_range(init_std, "init_std", 0, false, INFINITY, true);
}

template <class T>
Embedding<T>::Embedding(const EmbeddingOptions& options, Generator& gen) : options_(options) {
  options.validate();
  const Shape shape{options.num_embeddings, options.embedding_dim};
  weight = this->register_parameter("weight", shape, [&] { return init::normal<T>(shape, 0.0, options.init_std, gen); });
}

template <class T>
Variable<T> Embedding<T>::forward(const IndexArray& ids) const {
  return this->hooked(embedding(weight, ids));
}

template class Embedding<float>;
template class Embedding<double>;

}  // namespace qkv::nn
