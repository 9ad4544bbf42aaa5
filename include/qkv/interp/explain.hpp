#pragma once
/// @file
/// One query of one head, step by step, with the model's numbers: what a textbook computes by
/// hand for scaled dot-product attention,
///
///   s_j = q_i . k_j,   a_j = s_j * scale (scale = 1/sqrt(D) unless the layer sets one),
///   masked keys (causal: j > i) get a_j = -inf,
///   w_j = exp(a_j - max_k a_k) / sum_k exp(a_k - max_k a_k),
///   z_i = sum_j w_j v_j,
///
/// recomputed in double from the q, k and v the layer produced (hook_q, hook_k, hook_v: after the
/// projections, their biases and rotary embeddings), and checked against the weights and the
/// output the layer itself computed (hook_pattern, hook_z).

#include <optional>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/model/input.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

/// Printable labels of row `row` of `ids`: task.token_label, and "<bos>" for the BOS of an
/// encoder-decoder's target side.
std::vector<std::string> token_labels(const data::Task& task, const IndexArray& ids, std::size_t row);

/// The term of one key.
struct KeyTerm {
  std::size_t key = 0;
  double raw = 0;           ///< s_j = q_i . k_j
  double scaled = 0;        ///< a_j = s_j * scale
  bool masked = false;      ///< not attended (causal: j > i); raw and scaled are still shown
  double weight = 0;        ///< w_j, recomputed
  double model_weight = 0;  ///< the weight the layer computed
};

struct QueryExplanation {
  std::string layer;  ///< dotted name
  std::size_t layer_index = 0, head = 0, query = 0;
  model::AttentionKind kind = model::AttentionKind::Self;
  std::vector<std::string> query_tokens, key_tokens;
  std::vector<double> q;               ///< q_i (D)
  std::vector<std::vector<double>> k;  ///< k_j (Tk x D)
  std::vector<std::vector<double>> v;  ///< v_j (Tk x Dv)
  double scale = 0;
  std::vector<KeyTerm> keys;           ///< in key order
  std::vector<double> output;          ///< z_i = sum_j w_j v_j, recomputed (Dv)
  std::vector<double> model_output;    ///< the layer's z_i (hook_z)
  double weight_error = 0, output_error = 0;  ///< max |recomputed - the layer's|
  /// Compiled models only (model::LoadedModel::compiled; empty otherwise): the head in its
  /// program's words, one line each: the operation it computes; what the query and the heaviest
  /// key hold in the S-ops the head reads at q and at k ("agent = 1", with the program's comment
  /// on that S-op); the largest terms q_d k_d of q . k_j, named by what dimension d means
  /// ("key rank:1": the key's rank is 1).
  std::vector<std::string> program_words;
};

/// Explain query `query` of head `head` of attention layer `layer` (index in model order) on
/// `example` (one row; seq2seq: source and target), in eval mode without recording. ValueError
/// naming the valid range for a layer, head or query out of range.
QueryExplanation explain_query(model::TaskModel& model, const data::Task& task, const data::Batch& example,
                               std::size_t layer, std::size_t head, std::size_t query);

/// The walk-through as plain text: `dims` leading dimensions of the vectors are printed.
std::string format_explanation(const QueryExplanation& e, std::size_t dims = 8);
/// The same as one JSON object (every number, every dimension), for tools.
std::string explanation_json(const QueryExplanation& e);

/// Many heads explaining the same query (every head of every layer, say): one line per head,
/// "layer.head", then its `top` heaviest keys (position, token, weight).
std::string format_query_survey(const std::vector<QueryExplanation>& heads, std::size_t top = 3);
/// A JSON array of explanation_json objects.
std::string explanations_json(const std::vector<QueryExplanation>& heads);

/// `qkv explain`, the studio and Python's qkv.explain: one query of one head (`layer` and
/// `head`), of every head of `layer`, or of every head of every layer.
struct ExplainRequest {
  model::InputRequest input;
  std::optional<std::size_t> layer, head;
  std::size_t query = 0;
};
/// Field errors: "input.*", "layer", "head" (without a layer, or out of range), "query".
std::vector<QueryExplanation> explain(model::LoadedModel& model, const ExplainRequest& request);

}  // namespace qkv::interp
