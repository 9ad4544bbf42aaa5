#pragma once
// The residual stream of an encoder or a decoder-only model, as the causal instruments read it:
// its blocks, the final norm (pre-LN), the output layer, and the hook points' names.

#include <string>
#include <vector>

#include "qkv/model/load.hpp"
#include "qkv/nn/transformer.hpp"

namespace qkv::interp {

struct ResidualStack {
  const nn::ModuleList<nn::TransformerEncoderLayer<float>>* blocks = nullptr;
  const nn::LayerNorm<float>* norm = nullptr;  // the final norm (pre-LN with norms); null otherwise
  const nn::Linear<float>* head = nullptr;     // the output layer; null when tied to...
  const nn::Embedding<float>* tied = nullptr;  // ...the token embedding (a tied decoder)
  bool norm_first = true;
  std::size_t layers() const { return blocks->size(); }
  std::size_t heads(std::size_t l) const { return (*blocks)[l].attn->num_heads(); }
  bool mlp(std::size_t l) const { return (*blocks)[l].ff != nullptr; }
  /// "blocks.<l>.<point>".
  static std::string at(std::size_t l, const std::string& point) { return "blocks." + std::to_string(l) + "." + point; }
};

/// The stack of `model`; field error "model" for an encoder-decoder (its decoder's layers have no
/// split inputs and no residual hook points).
ResidualStack residual_stack(model::TaskModel& model, const std::string& what);

}  // namespace qkv::interp
