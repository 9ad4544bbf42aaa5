#pragma once
/// @file
/// Reading an answer off logits: the one place for the softmax of a row, the most likely classes
/// and their tie rule, and scoring logits against targets. Fill, generation, patching, evaluation,
/// the studio and Python all read their numbers through these.
///
/// For one row z of C logits (float32), in double:
///   lse(z) = m + log sum_c exp(z_c - m),  m = max_c z_c
///   p_c    = exp(z_c - lse(z))                       (softmax)
///   the k most likely classes: by z descending, ties by the lower id
///   cross-entropy of target y: lse(z) - z_y

#include <cstddef>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/model/task_model.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::model {

/// lse(z) of a row of C logits.
double log_sum_exp(const float* z, std::size_t C);
/// p_c = exp(z_c - lse).
double probability(const float* z, Index c, double lse);
/// The first maximum of a row (what argmax_last gives for it).
Index argmax(const float* z, std::size_t C);

/// A class and its probability.
struct ClassProbability {
  Index id = 0;
  double p = 0;
};
/// The min(k, C) most likely classes of a row, most likely first, ties by the lower id, with p_c.
std::vector<ClassProbability> top_k(const float* z, std::size_t C, std::size_t k);
/// The same order without probabilities (k = C: every class ranked).
std::vector<Index> ranked_classes(const float* z, std::size_t C, std::size_t k);

/// The loss and accuracy of rows of logits against their targets: rows whose target is kIgnore
/// (or outside [0, C)) are not scored.
///   loss = (sum over scored rows of lse(z) - z_y) / scored,  accuracy = right / scored
/// (0 when nothing is scored). Sums are in double, in row order.
struct Score {
  double loss_sum = 0;
  std::size_t scored = 0, right = 0;
  double loss() const { return scored ? loss_sum / double(scored) : 0.0; }
  double accuracy() const { return scored ? double(right) / double(scored) : 0.0; }
  Score& operator+=(const Score& o) {
    loss_sum += o.loss_sum, scored += o.scored, right += o.right;
    return *this;
  }
};
/// Score of logits (N, C) (any shape ending in C, N rows), targets and predictions (N).
Score score_rows(const Array<float>& logits, const IndexArray& targets, const IndexArray& predictions);

/// What a model answers for one row, from its logits (1, T, C): every output position's
/// prediction (TaskModel::predict, as evaluation scores it) with its probability and, where the
/// row has one, its target; a masked model's fills of its mask tokens; a decoder's next token.
struct AnswerPosition {
  std::size_t position = 0;
  Index prediction = 0;
  double p = 0;                    ///< p of the prediction
  Index target = data::kIgnore;    ///< kIgnore: the position is not scored
  double p_target = 0;
};
struct Answer {
  std::string kind;  ///< "fill" (masked model), "next" (decoder), "labels" (everything else)
  std::vector<AnswerPosition> positions;
  /// Masked models: at each mask token of the row's inputs, the top_k classes.
  std::vector<std::pair<std::size_t, std::vector<ClassProbability>>> fills;
  /// Decoders: the top_k next tokens after the last position (empty otherwise).
  std::vector<ClassProbability> next;
  Score score;  ///< over the row's scored positions
};
Answer answer(TaskModel& model, const data::Task& task, const data::Batch& row, const Array<float>& logits,
              std::size_t top_k);

/// How an answer names a class: the task's token_label, "[MASK]" for the mask token.
std::string class_label(const data::Task& task, Index id);

}  // namespace qkv::model
