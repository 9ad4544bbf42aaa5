#pragma once
/// @file
/// Whole models: an encoder-only classifier/tagger and an encoder-decoder (seq2seq) transformer.
///
/// Embedding stage (both models): h = dropout(pos(tok_emb(tokens))). Token embeddings are N(0, 1)
/// (like nn.Embedding) and are NOT scaled by sqrt(d_model): the 2017 paper scales because its
/// embedding is shared with the output layer and so starts small; with N(0, 1) entries the tokens
/// already have the same per-element scale as the sinusoids (|PE| <= 1), and scaling by
/// sqrt(d_model) would drown the positions.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/nn/embedding.hpp"
#include "qkv/nn/positional.hpp"
#include "qkv/nn/transformer_layer.hpp"

namespace qkv::nn {

/// How positions enter: added to the token embeddings (sinusoidal, learned), or as rotations of
/// q and k inside every self-attention (rope: qkv::rope; decoder only).
enum class Positional { Sinusoidal, Learned, Rope };
/// The names configs use: "sinusoidal", "learned", "rope".
const NameTable<Positional>& positional_names();

/// Which model a TransformerOptions describes (what model::make_model builds).
enum class Arch { Encoder, EncoderDecoder, Decoder };
/// The names configs use: "encoder", "encoder_decoder", "decoder".
const NameTable<Arch>& arch_names();

/// A whole model's options: the options of every layer (inherited: d_model, attn, ff, dropout,
/// norm_first, norm, layer_norm_eps) plus the stack. The final LayerNorm ("norm") exists for
/// pre-LN with norm layer only. The config's `model` section maps onto this.
struct TransformerOptions : TransformerLayerOptions {
  Arch arch = Arch::Encoder;
  std::size_t layers = 2;      ///< encoder layers (and decoder layers for Seq2SeqModel)
  Positional positional = Positional::Sinusoidal;
  std::size_t max_len = 1024;  ///< longest sequence the positional encoding accepts
  bool causal = false;         ///< EncoderModel only: position t sees positions <= t
  /// DecoderModel: the output layer is the token embedding (Press & Wolf 2017); the embedding is
  /// then initialised N(0, 1/C) and scaled by sqrt(C) on input (Vaswani et al. 2017, 3.4).
  bool tie_embeddings = false;
  /// The layer's rules plus layers and max_len positive, rope only for the decoder, attn_only
  /// only for encoder-only stacks; throws OptionError.
  void validate() const;
};

/// The keys and values every self-attention layer of a DecoderModel has seen.
template <class T>
struct DecoderCache {
  std::vector<KVCache<T>> layers;
  std::size_t length() const { return layers.empty() ? 0 : layers.front().length; }
  void clear() {
    for (auto& l : layers) l.clear();
  }
};

/// Decoder-only language model (GPT): tokens (B, T) -> logits (B, T, V); position t sees
/// tokens <= t only.
///   h = dropout(pos(e(tokens)))      e = tok_emb, times sqrt(C) when tied; no pos with rope
///   h = blocks[i](h, causal)          pre-LN or post-LN; attn_only: attention blocks only
///   h = norm(h)                       pre-LN only
///   logits = h head^T                 head = tok_emb.weight when tied (no bias)
/// Parameters, in order: "tok_emb.weight" (V, C), ["pos.weight" (max_len, C) if learned],
/// "blocks.<i>.attn.*", ["blocks.<i>.ff.*"], "blocks.<i>.norm1.*", ["blocks.<i>.norm2.*"],
/// ["norm.*" if pre-LN], ["head.weight" (V, C) unless tied]. Init draws from `gen` in that order:
/// tok_emb N(0, 1) (N(0, 1/C) when tied), head as nn.Linear.
template <class T>
class DecoderModel : public Module<T> {
 public:
  DecoderModel(std::size_t vocab, const TransformerOptions& options = {}, Generator& gen = default_generator());

  /// tokens (B, T), T <= max_len -> logits (B, T, V).
  Variable<T> forward(const IndexArray& tokens) const;
  /// Decoding (under NoGradGuard): tokens (B, Tn) at positions cache.length() ... -> logits
  /// (B, Tn, V), equal to the last Tn positions of forward() on the whole sequence (to rounding);
  /// their keys and values join the cache. cache.length() + Tn <= max_len.
  Variable<T> forward(const IndexArray& tokens, DecoderCache<T>& cache) const;
  /// An empty cache for this model (it grows as positions are added).
  DecoderCache<T> make_cache() const { return DecoderCache<T>{std::vector<KVCache<T>>(blocks->size())}; }

  const TransformerOptions& options() const { return options_; }
  std::shared_ptr<Embedding<T>> tok_emb;
  std::shared_ptr<PositionalEncoding<T>> pos;  ///< null with rope
  std::shared_ptr<Dropout<T>> emb_drop;
  std::shared_ptr<ModuleList<TransformerEncoderLayer<T>>> blocks;
  std::shared_ptr<LayerNorm<T>> norm;  ///< null for post-LN
  std::shared_ptr<Linear<T>> head;     ///< null when tied

 private:
  Variable<T> run(const IndexArray& tokens, DecoderCache<T>* cache) const;
  TransformerOptions options_;
};

/// (dotted name, shape) of every parameter of the model `options` describes (its arch) for
/// vocabularies of `input_vocab` tokens in and `output_vocab` classes out, read from the model
/// itself built under MetaGuard: nothing is allocated or drawn.
std::vector<std::pair<std::string, Shape>> parameter_shapes(const TransformerOptions& options,
                                                            std::size_t input_vocab, std::size_t output_vocab);

/// Encoder-only model: tokens (B, T) -> logits (B, T, num_classes).
///   h = dropout(pos(tok_emb(tokens))); h = blocks[i](h) for each layer; h = norm(h) (pre-LN only);
///   logits = head(h)
/// Parameters, in order: "tok_emb.weight" (V, C), ["pos.weight" (max_len, C) if learned],
/// "blocks.<i>.attn.w_q.weight" ... "blocks.<i>.norm2.bias", ["norm.weight", "norm.bias" if
/// pre-LN], "head.weight" (num_classes, C), "head.bias". Init draws from `gen` in that order.
template <class T>
class EncoderModel : public Module<T> {
 public:
  EncoderModel(std::size_t input_vocab, std::size_t num_classes, const TransformerOptions& options = {},
               Generator& gen = default_generator());

  /// tokens (B, T) of ids in [0, input_vocab); key_padding_mask (B, T): the keys to ignore
  /// (KeyPaddingMask::ignore_where(pad), pad true = padding). Returns logits (B, T, num_classes).
  Variable<T> forward(const IndexArray& tokens, const KeyPaddingMask& key_padding_mask = {}) const;
  /// The logits of the flat positions `rows` (n) alone, b T + t for token (b, t): (n, num_classes),
  /// row i equal to forward(tokens, key_padding_mask) viewed as (B T, num_classes) at rows[i]. The
  /// output layer runs on those rows only (a masked LM's loss scores about 15% of the positions).
  /// No hook runs on this output: forward() is the hooked one. A row outside [0, B T) throws.
  Variable<T> forward_rows(const IndexArray& tokens, const IndexArray& rows,
                           const KeyPaddingMask& key_padding_mask = {}) const;

  const TransformerOptions& options() const { return options_; }
  std::shared_ptr<Embedding<T>> tok_emb;
  std::shared_ptr<PositionalEncoding<T>> pos;
  std::shared_ptr<Dropout<T>> emb_drop;
  std::shared_ptr<ModuleList<TransformerEncoderLayer<T>>> blocks;
  std::shared_ptr<LayerNorm<T>> norm;  ///< null for post-LN
  std::shared_ptr<Linear<T>> head;

 private:
  /// The last layer's output (B, T, C), after the final norm of pre-LN.
  Variable<T> hidden(const IndexArray& tokens, const KeyPaddingMask& key_padding_mask) const;
  TransformerOptions options_;
};

/// A stack of encoder layers plus the final LayerNorm of pre-LN: children "blocks", "norm".
template <class T>
class TransformerEncoder : public Module<T> {
 public:
  TransformerEncoder(const TransformerOptions& options, Generator& gen = default_generator());
  /// x (B, T, C) -> (B, T, C).
  Variable<T> forward(const Variable<T>& x, const KeyPaddingMask& key_padding_mask = {},
                      bool is_causal = false) const;
  std::shared_ptr<ModuleList<TransformerEncoderLayer<T>>> blocks;
  std::shared_ptr<LayerNorm<T>> norm;  ///< null for post-LN
};

/// A stack of decoder layers plus the final LayerNorm of pre-LN: children "blocks", "norm".
template <class T>
class TransformerDecoder : public Module<T> {
 public:
  TransformerDecoder(const TransformerOptions& options, Generator& gen = default_generator());
  /// x (B, Tt, C), memory (B, Ts, C) -> (B, Tt, C).
  Variable<T> forward(const Variable<T>& x, const Variable<T>& memory,
                      const KeyPaddingMask& tgt_key_padding_mask = {},
                      const KeyPaddingMask& memory_key_padding_mask = {}) const;
  std::shared_ptr<ModuleList<TransformerDecoderLayer<T>>> blocks;
  std::shared_ptr<LayerNorm<T>> norm;  ///< null for post-LN
};

/// Encoder-decoder model: src (B, Ts), tgt_in (B, Tt) -> logits (B, Tt, tgt_vocab). The decoder's
/// self-attention is causal, so logits[:, t] depends on tgt_in[:, :t+1] and all of src.
///   memory = encoder(dropout(src_pos(src_emb(src))))
///   logits = head(decoder(dropout(tgt_pos(tgt_emb(tgt_in))), memory))
/// Parameters, in order: "src_emb.weight", "tgt_emb.weight", ["src_pos.weight", "tgt_pos.weight"
/// if learned], "encoder.blocks.<i>.attn.*" ..., ["encoder.norm.*"], "decoder.blocks.<i>.self_attn.*",
/// "decoder.blocks.<i>.cross_attn.*" ..., ["decoder.norm.*"], "head.weight", "head.bias".
template <class T>
class Seq2SeqModel : public Module<T> {
 public:
  Seq2SeqModel(std::size_t src_vocab, std::size_t tgt_vocab, const TransformerOptions& options = {},
               Generator& gen = default_generator());

  /// Teacher-forced logits (B, Tt, tgt_vocab). Padding masks: true = padding (PyTorch polarity).
  Variable<T> forward(const IndexArray& src, const IndexArray& tgt_in,
                      const KeyPaddingMask& src_key_padding_mask = {},
                      const KeyPaddingMask& tgt_key_padding_mask = {}) const;
  /// src (B, Ts) -> memory (B, Ts, C).
  Variable<T> encode(const IndexArray& src, const KeyPaddingMask& src_key_padding_mask = {}) const;
  /// memory (B, Ts, C), tgt_in (B, Tt) -> logits (B, Tt, tgt_vocab). For greedy decoding: encode
  /// once, then decode the growing prefix and take the argmax of the last position.
  Variable<T> decode(const Variable<T>& memory, const IndexArray& tgt_in,
                     const KeyPaddingMask& src_key_padding_mask = {},
                     const KeyPaddingMask& tgt_key_padding_mask = {}) const;
  /// Decoding (under NoGradGuard): memory (B, Ts, C) and the next target tokens (B, Tn) at
  /// positions cache.length() ... -> logits (B, Tn, tgt_vocab), what decode() gives for them on
  /// the whole prefix (to rounding). The cache holds, per decoder layer, the self-attention keys
  /// and values so far and the memory's projected keys and values (computed on the first call).
  struct DecodeCache {
    std::vector<KVCache<T>> self, cross;
    std::size_t length() const { return self.empty() ? 0 : self.front().length; }
  };
  DecodeCache make_cache() const {
    return {std::vector<KVCache<T>>(decoder->blocks->size()), std::vector<KVCache<T>>(decoder->blocks->size())};
  }
  Variable<T> decode(const Variable<T>& memory, const IndexArray& tgt_tokens, DecodeCache& cache) const;

  const TransformerOptions& options() const { return options_; }
  std::shared_ptr<Embedding<T>> src_emb, tgt_emb;
  std::shared_ptr<PositionalEncoding<T>> src_pos, tgt_pos;
  std::shared_ptr<Dropout<T>> emb_drop;
  std::shared_ptr<TransformerEncoder<T>> encoder;
  std::shared_ptr<TransformerDecoder<T>> decoder;
  std::shared_ptr<Linear<T>> head;

 private:
  TransformerOptions options_;
};

}  // namespace qkv::nn
