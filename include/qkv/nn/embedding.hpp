#pragma once
/// @file
/// Token embedding table.

#include "qkv/nn/module.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::nn {

struct EmbeddingOptions {
  std::size_t num_embeddings = 0;  ///< V
  std::size_t embedding_dim = 0;   ///< C
  double init_std = 1.0;           ///< weight ~ N(0, init_std^2); 1 as in PyTorch's nn.Embedding
  /// V and C positive, init_std >= 0; throws OptionError naming the field.
  void validate() const;
};

/// out[..., :] = weight[ids[...], :] (qkv::embedding). ids (any shape) -> (ids.shape..., C).
/// Parameter: "weight" (V, C). Init: N(0, init_std^2) from `gen` (PyTorch: N(0, 1)).
/// Ids outside [0, V) throw ValueError.
template <class T>
class Embedding : public Module<T> {
 public:
  explicit Embedding(const EmbeddingOptions& options, Generator& gen = default_generator());
  Embedding(std::size_t num_embeddings, std::size_t embedding_dim, Generator& gen = default_generator())
      : Embedding(EmbeddingOptions{num_embeddings, embedding_dim}, gen) {}

  Variable<T> forward(const IndexArray& ids) const;
  Variable<T> operator()(const IndexArray& ids) const { return forward(ids); }

  const EmbeddingOptions& options() const { return options_; }
  Variable<T> weight;  ///< (V, C)

 private:
  EmbeddingOptions options_;
};

}  // namespace qkv::nn
