#pragma once
/// @file
/// Reading the residual stream with the model's own output layer.
///
/// The logit lens (nostalgebraist 2020): the stream after each block, resid_l (B = 1, T, C), read as
/// if it were the last: logits_l = head(norm(resid_l)), the final norm applied afresh to each
/// resid_l (pre-LN; post-LN and norm-none models have no final norm and read resid_l as it is), for
/// "embed" (the stream before block 0, the embeddings) and every block. The last row is the
/// model's own logits.
///
/// Direct logit attribution (Elhage et al. 2021; TransformerLens's apply_ln_to_stack): the final
/// stream at position p is a sum of writes, resid = embed + sum_l (sum_h result_l,h + b_O,l +
/// mlp_l); through a final LayerNorm frozen at the final stream's scale,
///   sigma = sqrt(var(resid[p]) + eps),   n(c) = gamma * (c - mean(c)) / sigma
/// each write c contributes n(c[p]) . (W_U[answer] - W_U[wrong]) to the logit difference, and the
/// contributions of every write plus the norm's bias term beta . (W_U[answer] - W_U[wrong]) plus
/// the output biases' difference add up to logits[p, answer] - logits[p, wrong] exactly (a test
/// checks it). Without a final norm (norm none) n(c) = c; a post-LN model has no linear path from a
/// write to the logits: its result has no DLA (`dla` false).

#include <optional>
#include <string>
#include <vector>

#include "qkv/model/answer.hpp"
#include "qkv/model/input.hpp"

namespace qkv::interp {

/// `qkv lens`, the studio's lens row and Python's qkv.logit_lens.
struct LensRequest {
  model::InputRequest input;
  /// DLA's position p (default: the first mask of the row, else its last position) and tokens
  /// (default: the model's most likely and second most likely class at p).
  std::optional<std::size_t> position;
  std::optional<std::string> answer, wrong;
  bool ids = false;
  std::size_t top_k = 3;  ///< the lens's candidates per layer and position, in [1, 50]
};

struct LensResult {
  std::vector<std::string> tokens;  ///< the row's token labels
  std::vector<std::string> stages;  ///< "embed", "blocks.0", ..., the last block
  /// [stage][position]: the top_k classes of the lens at that stage (most likely first).
  std::vector<std::vector<std::vector<model::ClassProbability>>> top;
  std::size_t position = 0;
  Index answer = 0, wrong = 0;
  /// [stage]: the lens's logit difference at p, logits_l[p, answer] - logits_l[p, wrong], and the
  /// answer's probability.
  std::vector<double> stage_diff, stage_p_answer;
  bool dla = false;  ///< false for a post-LN model
  /// DLA: every write and its contribution to the logit difference at p ("embed", "a0.h1", "a0.b"
  /// (w_o's bias), "m0", "norm.b" (the final norm's bias), "head.b" (the output biases)), and
  /// their sum, equal to the logit difference.
  std::vector<std::pair<std::string, double>> contributions;
  double logit_diff = 0;
  /// [layer][head]: each head's contribution (the same numbers as `contributions`).
  std::vector<std::vector<double>> heads;
};

/// Field errors: "input.*", "position", "answer", "wrong", "top_k", "model" (an encoder-decoder).
LensResult logit_lens(model::LoadedModel& model, const LensRequest& request);

/// The command's text: per stage, the lens's most likely token at every position (p marked) with
/// its probability, the logit difference at p; then the DLA's largest contributions.
std::string format_lens(const LensResult& result, const data::Task& task, std::size_t contributions = 12);

/// {"tokens", "stages", "top": [[[{"id", "token", "p"}] per position] per stage], "position",
/// "answer", "wrong", "answer_token", "wrong_token", "stage_diff", "stage_p_answer", "dla",
/// "contributions": [{"name", "value"}], "heads": [[...] per layer], "logit_diff"}.
std::string to_json(const LensResult& result, const data::Task& task);

}  // namespace qkv::interp
