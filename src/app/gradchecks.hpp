#pragma once
/// @file
/// Float64 gradient checks of every layer and model on tiny sizes: what `qkv gradcheck` prints and
/// tests/train/test_layer_checks.cpp asserts.

#include <string>
#include <vector>

namespace qkv::app {

struct LayerCheckResult {
  std::string name;
  double worst_error = 0;  ///< largest |analytic - numeric| over every input and parameter
  double worst_ratio = 0;  ///< largest error / (atol + rtol |numeric|); <= 1 passes
  bool ok = false;
};

/// Linear, Embedding, LayerNorm, FeedForward, attention (fused and composite, masks, causal,
/// cross lengths), MultiHeadAttention (self and cross), encoder and decoder layers (pre- and
/// post-LN) and both models, each checked with qkv::gradcheck over its inputs and parameters.
std::vector<LayerCheckResult> run_layer_gradchecks();

}  // namespace qkv::app
