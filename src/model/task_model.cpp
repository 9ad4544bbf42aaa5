#include "qkv/model/task_model.hpp"

#include "qkv/autograd/tape.hpp"
#include "qkv/ops/attention.hpp"

namespace qkv::model {

IndexArray argmax_last(const Array<float>& logits) {
  const std::size_t V = logits.shape().back(), rows = logits.size() / V;
  Shape s(logits.shape().begin(), logits.shape().end() - 1);
  IndexArray out = IndexArray::from_shape(s);
  const float* p = logits.data();
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = p + r * V;
    out.data()[r] = Index(std::max_element(row, row + V) - row);
  }
  return out;
}

const char* attention_kind_name(AttentionKind kind) {
  return kind == AttentionKind::Self ? "self" : kind == AttentionKind::Causal ? "causal" : "cross";
}

namespace {

class EncoderTaskModel : public TaskModel {
 public:
  EncoderTaskModel(const config::Config& cfg, const data::Task& task, Generator& gen) : pad_(task.pad_token()) {
    nn::TransformerOptions o = cfg.model;
    o.max_len = std::max(o.max_len, task.input_length());
    model_ = std::make_unique<nn::EncoderModel<float>>(task.input_vocab(), task.num_classes(), o, gen);
  }
  nn::Module<float>& module() override { return *model_; }
  // A task with padding (the grammar's rows end in it): no query attends a pad key, as BERT's
  // attention mask, so a sentence reads the same whatever padding follows it.
  Variable<float> logits(const data::Batch& b) override { return model_->forward(b.inputs, padding(b)); }
  // The scored positions alone when some are not (a masked LM), unless the model's output or its
  // output layer is hooked: hooks see the whole (B, T, classes) logits.
  ScoredLogits scored_logits(const data::Batch& b) override {
    const Index* t = b.targets.data();
    std::size_t n = 0;
    for (std::size_t i = 0; i < b.targets.size(); ++i) n += t[i] != data::kIgnore;
    const bool hooked = model_->has_forward_hooks() || model_->head->has_forward_hooks();
    if (n == 0 || n == b.targets.size() || b.targets.shape() != b.inputs.shape() || hooked)
      return TaskModel::scored_logits(b);
    IndexArray rows = IndexArray::from_shape({n}), targets = IndexArray::from_shape({n});
    for (std::size_t i = 0, j = 0; i < b.targets.size(); ++i)
      if (t[i] != data::kIgnore) rows.data()[j] = Index(i), targets.data()[j++] = t[i];
    return {model_->forward_rows(b.inputs, rows, padding(b)), std::move(targets)};
  }
  IndexArray predict(const data::Batch&, const Array<float>& logits) override { return argmax_last(logits); }

 private:
  // A task with padding: the keys to ignore (none when the batch holds no pad).
  KeyPaddingMask padding(const data::Batch& b) const {
    if (pad_ < 0) return {};
    Mask pad = Mask::from_shape(b.inputs.shape());
    bool any = false;
    for (std::size_t i = 0; i < b.inputs.size(); ++i) any |= (pad.data()[i] = b.inputs.data()[i] == pad_);
    return any ? KeyPaddingMask::ignore_where(std::move(pad)) : KeyPaddingMask{};
  }
  Index pad_;
  std::unique_ptr<nn::EncoderModel<float>> model_;
};

class Seq2SeqTaskModel : public TaskModel {
 public:
  Seq2SeqTaskModel(const config::Config& cfg, const data::Task& task, Generator& gen) : bos_(task.bos()) {
    nn::TransformerOptions o = cfg.model;
    o.max_len = std::max({o.max_len, task.input_length(), task.target_length()});
    model_ = std::make_unique<nn::Seq2SeqModel<float>>(task.input_vocab(), task.target_vocab(), o, gen);
  }
  nn::Module<float>& module() override { return *model_; }
  Variable<float> logits(const data::Batch& b) override {
    return model_->forward(b.inputs, b.decoder_inputs);
  }
  IndexArray predict(const data::Batch& b, const Array<float>& logits) override {
    // A task without BOS gives the decoder its inputs (seq2seq_recall's queries): nothing to generate.
    if (bos_ < 0) return argmax_last(logits);
    // Greedy decoding with the KV cache: feed BOS, take the argmax, feed it, repeat; each step
    // costs one position of the decoder (the memory's keys and values are projected once).
    NoGradGuard no_grad;
    const std::size_t B = b.targets.shape()[0], T = b.targets.shape()[1];
    const Variable<float> memory = model_->encode(b.inputs);
    auto cache = model_->make_cache();
    IndexArray out = IndexArray::from_shape({B, T});
    IndexArray next = IndexArray::from_shape({B, 1});
    std::fill(next.begin(), next.end(), bos_);
    for (std::size_t t = 0; t < T; ++t) {
      const Array<float> logits = model_->decode(memory, next, cache).value();  // (B, 1, V)
      const IndexArray best = argmax_last(logits);
      for (std::size_t i = 0; i < B; ++i) out(i, t) = next(i, 0) = best(i, 0);
    }
    return out;
  }
  std::pair<const IndexArray*, const IndexArray*> attention_tokens(const nn::MultiHeadAttention<float>& layer,
                                                                   const data::Batch& b) const override {
    // Layers of the decoder stack read the target; its cross-attention's keys are the source.
    for (auto& block : *model_->decoder->blocks) {
      if (&layer == block->self_attn.get()) return {&b.decoder_inputs, &b.decoder_inputs};
      if (&layer == block->cross_attn.get()) return {&b.decoder_inputs, &b.inputs};
    }
    return {&b.inputs, &b.inputs};
  }
  AttentionKind attention_kind(const nn::MultiHeadAttention<float>& layer) const override {
    for (auto& block : *model_->decoder->blocks) {
      if (&layer == block->self_attn.get()) return AttentionKind::Causal;
      if (&layer == block->cross_attn.get()) return AttentionKind::Cross;
    }
    return AttentionKind::Self;
  }

 private:
  Index bos_;
  std::unique_ptr<nn::Seq2SeqModel<float>> model_;
};

// A decoder-only model: next-token logits at every position; its context is the task's length.
class DecoderTaskModel : public TaskModel {
 public:
  DecoderTaskModel(const config::Config& cfg, const data::Task& task, Generator& gen) {
    nn::TransformerOptions o = cfg.model;
    o.max_len = task.input_length();
    model_ = std::make_unique<nn::DecoderModel<float>>(task.input_vocab(), o, gen);
  }
  nn::Module<float>& module() override { return *model_; }
  Variable<float> logits(const data::Batch& b) override { return model_->forward(b.inputs); }
  IndexArray predict(const data::Batch&, const Array<float>& logits) override { return argmax_last(logits); }
  const nn::DecoderModel<float>* decoder() const override { return model_.get(); }
  AttentionKind attention_kind(const nn::MultiHeadAttention<float>&) const override { return AttentionKind::Causal; }

 private:
  std::unique_ptr<nn::DecoderModel<float>> model_;
};

}  // namespace

std::unique_ptr<TaskModel> make_model(const config::Config& cfg, const data::Task& task, Generator& gen) {
  const std::string arch = nn::arch_names().name(cfg.model.arch);
  if (task.seq2seq()) {
    if (cfg.model.arch != nn::Arch::EncoderDecoder)
      throw ValueError("model.arch: task '" + task.name() + "' is sequence-to-sequence and needs arch encoder_decoder, found '" + arch + "'");
    return std::make_unique<Seq2SeqTaskModel>(cfg, task, gen);
  }
  if (task.next_token() && cfg.model.arch != nn::Arch::Decoder)
    throw ValueError("model.arch: task '" + task.name() + "' predicts the next token and needs arch decoder (causal: an " +
                     arch + " would read the answer), found '" + arch + "'");
  if (task.masked() && cfg.model.arch != nn::Arch::Encoder)
    throw ValueError("model.arch: task '" + task.name() + "' predicts masked tokens from both sides and needs arch encoder (a " +
                     arch + " reads one side only), found '" + arch + "'");
  if (cfg.model.arch == nn::Arch::Decoder) return std::make_unique<DecoderTaskModel>(cfg, task, gen);
  if (cfg.model.arch != nn::Arch::Encoder)
    throw ValueError("model.arch: task '" + task.name() + "' labels positions and needs arch encoder or decoder, found '" + arch + "'");
  return std::make_unique<EncoderTaskModel>(cfg, task, gen);
}

}  // namespace qkv::model
