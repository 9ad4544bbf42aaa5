#pragma once
/// @file
/// Attribution patching: the effect of patching an activation from a clean run into a corrupted
/// one (activation patching, patching.hpp), estimated from gradients instead of one forward pass per
/// patch. On a clean and a corrupted input of the same length and a metric m of the logits (the
/// logit difference m = logits[p, answer] - logits[p, wrong] of patching.hpp, or a function given),
/// with a = an activation and g = dm/da:
///
///   attribution (Nanda 2023, "attribution patching"; Syed et al. 2023) per head h and position t,
///   at the head's output z (hook_z):
///       s(h, t) = (z_clean[h, t] - z_corrupt[h, t]) . g_corrupt[h, t]         (denoise, the default)
///   EAP, edge attribution patching (Syed et al. 2023), per edge u -> v of the residual stream:
///       s(u -> v) = sum_t (a_u,clean[t] - a_u,corrupt[t]) . g_v,corrupt[t]
///     u writes a_u into the stream (the input: the embeddings, blocks.0.hook_resid_pre; a head:
///     its result, hook_head_result; an MLP: hook_mlp_out), v reads it (a head's query, key or
///     value input: hook_q_input, hook_k_input, hook_v_input; an MLP: hook_mlp_in; the logits: the
///     last block's hook_resid_post), g_v = dm/d(v's input)
///   EAP-IG (Hanna et al. 2024, "EAP-IG-inputs"): as EAP, with g the mean of the gradients at
///     `steps` inputs interpolated between the corrupted and the clean embeddings,
///       e_k = e_corrupt + (k / steps) (e_clean - e_corrupt),   k = 0 .. steps - 1
///     (integrated gradients with the corrupted input as the baseline); the node scores s(h, t)
///     too. Its sum over every edge out of the input is the integral's Riemann sum of
///     m(clean) - m(corrupt).
///
/// Every score is reported divided by m_clean - m_corrupt, the share of the difference the patch
/// would restore: the units of activation patching's `restored`, which it estimates. Direction
/// "noise" (Syed et al.'s and Hanna et al.'s orientation) swaps the runs: gradients at the clean
/// run, differences a_corrupt - a_clean, the path from clean to corrupted, divided by
/// m_corrupt - m_clean (the share of the damage a patch of the corrupted value would do).
///
/// Cost (forward + backward passes): attribution and EAP 2 forward (clean, corrupted) + 1
/// backward; EAP-IG 1 + steps forward and steps backward; activation patching 2 + L H forward.
/// Encoder and decoder-only models (the layers of an encoder-decoder's decoder have no split
/// inputs: a field error "model").

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/interp/patching.hpp"
#include "qkv/model/input.hpp"

namespace qkv::interp {

enum class AttributionMethod { Attribution, Eap, EapIg };
/// "attribution", "eap", "eap-ig".
const NameTable<AttributionMethod>& attribution_method_names();

/// `qkv attribute`, the studio's attribution view and Python's qkv.attribute.
struct AttributeRequest {
  model::InputRequest clean, corrupt;
  /// The metric's position and tokens, as PatchRequest's (the same defaults: the first mask of the
  /// clean row, else of the corrupted one, else the last position; each run's most likely token).
  std::optional<std::size_t> position;
  std::optional<std::string> answer, wrong;
  bool ids = false;
  /// A metric of the logits (1, T, classes) instead of the logit difference, and its gradient
  /// dm/dlogits (same shape); without a gradient, central differences of the metric (double,
  /// step 1e-3 scaled by the logit) give it.
  std::function<double(const Array<float>& logits)> metric;
  std::function<Array<float>(const Array<float>& logits)> metric_gradient;
  AttributionMethod method = AttributionMethod::EapIg;
  std::size_t steps = 5;          ///< EAP-IG's interpolation steps, in [1, 1000] (Hanna et al. use 5)
  bool noise = false;             ///< the direction: false denoise (the default), true noise
};

/// One edge of the residual stream: a writer and a reader ("input", "a0.h1", "m0" -> "a1.h2<q>",
/// "m1", "logits"; EAP-IG's names) and its score (a share, see the file comment).
struct EdgeScore {
  std::string from, to;
  double score = 0;
};

struct AttributionResult {
  AttributionMethod method = AttributionMethod::EapIg;
  bool noise = false;
  std::size_t steps = 0;
  std::size_t position = 0;
  Index answer = 0, wrong = 0;
  bool custom_metric = false;
  double clean_metric = 0, corrupt_metric = 0;
  std::vector<std::string> layers;            ///< attention layers' dotted names
  std::vector<std::string> tokens;            ///< the corrupted row's token labels (the positions)
  std::vector<std::vector<double>> heads;     ///< [layer][head]: sum over t of s(h, t), as a share
  std::vector<std::vector<std::vector<double>>> head_positions;  ///< [layer][head][t], as a share
  std::vector<EdgeScore> edges;               ///< EAP and EAP-IG: every edge, model order
  std::size_t forward_passes = 0, backward_passes = 0;
};

/// Field errors: "clean.*", "corrupt.*", patching's ("corrupt", "position", "answer", "wrong"),
/// "steps", "model" (an encoder-decoder), "metric" (not finite, or m_clean == m_corrupt).
AttributionResult attribute(model::LoadedModel& model, const AttributeRequest& request);

/// The command's text: the metric, each head's score (layers x heads), the `edges` edges of largest
/// |score| (EAP, EAP-IG), and the passes it cost beside activation patching's 2 + L H forward passes.
std::string format_attribution(const AttributionResult& result, const data::Task& task, std::size_t edges = 12);

/// {"method", "direction", "steps", "position", "answer", "wrong", "answer_token", "wrong_token",
/// "metric", "clean", "corrupt", "layers", "tokens", "heads": [[share per head] per layer],
/// "head_positions": [[[share per position] per head] per layer], "edges": [{"from", "to",
/// "score"}], "forward_passes", "backward_passes"}.
std::string to_json(const AttributionResult& result, const data::Task& task);

}  // namespace qkv::interp
