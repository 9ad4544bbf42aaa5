#pragma once
/// @file
/// Float64 gradient checks of every op, layer and model on tiny sizes (eps 1e-6, atol 1e-5,
/// rtol 1e-3): what `qkv gradcheck` prints and tests/app/test_gradchecks.cpp asserts.

#include <functional>
#include <string>
#include <vector>

namespace qkv::app {

struct LayerCheckResult {
  std::string name;
  double worst_error = 0;  ///< largest |analytic - numeric| over every input and parameter
  double worst_ratio = 0;  ///< largest error / (atol + rtol |numeric|); <= 1 passes
  bool ok = false;
};

/// One named check: kind "op", "layer" or "model".
struct GradcheckEntry {
  std::string name, kind;
  std::function<LayerCheckResult()> run;
};

/// Every check, ops first (softmax, log_softmax, cross_entropy with ignore_index and label
/// smoothing, matmul, linear, layer_norm, gelu, dropout with a fixed mask, embedding, rope,
/// split/merge heads, scaled dot-product attention fused and composite with masks and causal),
/// then layers (Linear, Embedding, LayerNorm, FeedForward, MultiHeadAttention self and cross,
/// encoder and decoder layers pre- and post-LN), then models (encoder, encoder-decoder, decoder).
const std::vector<GradcheckEntry>& gradcheck_suite();
/// Whether `name` is selected by `pattern`: everything for "", a glob when it has * or ?, a
/// substring otherwise.
bool gradcheck_selected(const std::string& name, const std::string& pattern);
/// Runs the checks `pattern` selects.
std::vector<LayerCheckResult> run_layer_gradchecks(const std::string& pattern = "");

}  // namespace qkv::app
