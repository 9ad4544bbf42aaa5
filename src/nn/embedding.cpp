#include "qkv/nn/embedding.hpp"

#include "qkv/nn/init.hpp"
#include "qkv/ops/embedding.hpp"

namespace qkv::nn {

template <class T>
Embedding<T>::Embedding(const EmbeddingOptions& options, Generator& gen) : options_(options) {
  if (options.num_embeddings == 0 || options.embedding_dim == 0)
    throw ValueError("Embedding: num_embeddings and embedding_dim must be positive, found " +
                     std::to_string(options.num_embeddings) + " and " + std::to_string(options.embedding_dim));
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
