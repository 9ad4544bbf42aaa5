#pragma once
/// @file
/// The model a run trains, whatever its architecture: the trainer sees logits and predictions.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/nn/multi_head_attention.hpp"
#include "qkv/nn/transformer.hpp"

namespace qkv::model {

/// What an attention layer attends over: one sequence both ways (self), one sequence with query i
/// reading keys j <= i only (causal), or a target's queries reading a source's keys (cross).
enum class AttentionKind { Self, Causal, Cross };
/// "self", "causal", "cross".
const char* attention_kind_name(AttentionKind kind);

/// The logits a training step scores and their targets: (n, classes) and (n), or (B, T, classes)
/// and (B, T) with kIgnore where nothing is scored.
struct ScoredLogits {
  Variable<float> logits;
  IndexArray targets;
};

class TaskModel {
 public:
  virtual ~TaskModel() = default;
  virtual nn::Module<float>& module() = 0;
  /// module().parameters(), gathered once (a training step asks for them without allocating).
  const std::vector<Variable<float>>& parameters() {
    if (params_.empty()) params_ = module().parameters();
    return params_;
  }
  /// Logits (B, T, classes) for the batch's targets (teacher forcing for seq2seq).
  virtual Variable<float> logits(const data::Batch& batch) = 0;
  /// What the loss of a training step reads: by default logits(batch) and the batch's targets. The
  /// encoder of a task that leaves positions unscored (a masked LM) returns the scored positions
  /// alone, so that its output layer runs on those only; the loss and the gradients are those of
  /// the default to rounding.
  virtual ScoredLogits scored_logits(const data::Batch& batch) { return {logits(batch), batch.targets}; }
  /// Predicted class at every target position (B, T) given the batch's teacher-forced logits:
  /// their argmax for the encoder; greedy decoding (one token at a time, fed back; the logits are
  /// not used) for the encoder-decoder.
  virtual IndexArray predict(const data::Batch& batch, const Array<float>& logits) = 0;
  /// The decoder-only language model inside, for generation (nullptr for the other archs).
  virtual const nn::DecoderModel<float>* decoder() const { return nullptr; }
  /// The tokens an attention layer of this model reads in `batch`: its queries (Tq) and keys (Tk)
  /// (encoder layers and self-attention: one sequence; cross-attention: target queries, source keys).
  virtual std::pair<const IndexArray*, const IndexArray*> attention_tokens(const nn::MultiHeadAttention<float>& layer,
                                                                           const data::Batch& batch) const {
    return {&batch.inputs, &batch.inputs};
  }
  /// What `layer` attends over (encoder layers: Self).
  virtual AttentionKind attention_kind(const nn::MultiHeadAttention<float>& layer) const {
    (void)layer;
    return AttentionKind::Self;
  }

 private:
  std::vector<Variable<float>> params_;
};

/// Every attention layer of the model with its dotted name ("blocks.0.attn"), in model order.
inline std::vector<std::pair<std::string, nn::MultiHeadAttention<float>*>> attention_layers(TaskModel& model) {
  return model.module().modules_of_type<nn::MultiHeadAttention<float>>();
}

/// The model a config describes, for the task's vocabulary; initialised from `gen`.
std::unique_ptr<TaskModel> make_model(const config::Config& cfg, const data::Task& task, Generator& gen);

/// Row-wise argmax over the last axis: (B, T, V) -> (B, T).
IndexArray argmax_last(const Array<float>& logits);

}  // namespace qkv::model
