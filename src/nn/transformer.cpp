#include "qkv/nn/transformer.hpp"

#include <cmath>

#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/embedding.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/shape.hpp"

namespace qkv::nn {

const NameTable<Positional>& positional_names() {
  static const NameTable<Positional> table{
      {"sinusoidal", Positional::Sinusoidal}, {"learned", Positional::Learned}, {"rope", Positional::Rope}};
  return table;
}

const NameTable<Arch>& arch_names() {
  static const NameTable<Arch> table{
      {"encoder", Arch::Encoder}, {"encoder_decoder", Arch::EncoderDecoder}, {"decoder", Arch::Decoder}};
  return table;
}

void TransformerOptions::validate() const {
  OptionChecker c("TransformerOptions");
  c.nested("", [&] { TransformerLayerOptions::validate(); });
  c.positive(layers, "layers");
  c.positive(max_len, "max_len");
  c.require(positional != Positional::Rope || arch == Arch::Decoder, {"positional", "arch"},
            "rotary positions ({positional} rope) are for the decoder-only model ({arch} decoder)");
  c.require(!attn_only || arch != Arch::EncoderDecoder, {"attn_only", "arch"},
            "{attn_only} is for encoder-only and decoder-only stacks, not {arch} encoder_decoder");
  c.require(!tie_embeddings || arch == Arch::Decoder, {"tie_embeddings", "arch"},
            "{tie_embeddings} shares the decoder-only model's token embedding with its output layer ({arch} decoder)");
  const std::size_t D = attn.head_dim ? attn.head_dim : d_model / std::max<std::size_t>(attn.num_heads, 1);
  c.require(positional != Positional::Rope || D % 2 == 0, {"positional", "attn.head_dim"},
            "rotary positions turn pairs of dimensions: the head width D = " + std::to_string(D) + " must be even");
}

namespace {

template <class T>
std::shared_ptr<PositionalEncoding<T>> make_positional(const TransformerOptions& o, Generator& gen) {
  PositionalOptions p{o.max_len, o.d_model};
  if (o.positional == Positional::Learned) return std::make_shared<LearnedPositionalEncoding<T>>(p, gen);
  if (o.positional == Positional::Rope) return nullptr;
  return std::make_shared<SinusoidalPositionalEncoding<T>>(p);
}

// Pre-LN stacks end in a LayerNorm; post-LN ones and norm none do not.
bool final_norm(const TransformerOptions& o) { return o.norm_first && o.norm == Norm::Layer; }

void check_tokens(const IndexArray& ids, const char* who, const char* what) {
  if (ids.dimension() != 2)
    throw ShapeError(std::string(who) + ": expected " + what + " of shape (B, T), found " + shape_str(ids.shape()));
}

template <class L>
std::shared_ptr<ModuleList<L>> make_blocks(const TransformerOptions& o, Generator& gen) {
  auto list = std::make_shared<ModuleList<L>>();
  for (std::size_t i = 0; i < o.layers; ++i) list->push_back(std::make_shared<L>(o, gen));
  return list;
}

template <class T>
Variable<T> run_encoder(const ModuleList<TransformerEncoderLayer<T>>& blocks, const LayerNorm<T>* norm,
                        Variable<T> h, const KeyPaddingMask& key_padding_mask, bool is_causal) {
  for (auto& block : blocks) h = block->forward(h, key_padding_mask, is_causal);
  return norm ? norm->forward(h) : h;
}

}  // namespace

// ---- EncoderModel ----

template <class T>
EncoderModel<T>::EncoderModel(std::size_t input_vocab, std::size_t num_classes, const TransformerOptions& options,
                              Generator& gen)
    : options_(options) {
  options.validate();
  tok_emb = this->register_module("tok_emb", std::make_shared<Embedding<T>>(input_vocab, options.d_model, gen));
  pos = this->register_module("pos", make_positional<T>(options, gen));
  emb_drop = this->register_module("emb_drop", std::make_shared<Dropout<T>>(options.dropout));
  blocks = this->register_module("blocks", make_blocks<TransformerEncoderLayer<T>>(options, gen));
  if (final_norm(options)) norm = this->register_module("norm", std::make_shared<LayerNorm<T>>(options.d_model));
  head = this->register_module("head", std::make_shared<Linear<T>>(options.d_model, num_classes, true, gen));
}

template <class T>
Variable<T> EncoderModel<T>::hidden(const IndexArray& tokens, const KeyPaddingMask& key_padding_mask) const {
  check_tokens(tokens, "EncoderModel", "tokens");
  Variable<T> h = emb_drop->forward(pos->forward(tok_emb->forward(tokens)));
  return run_encoder(*blocks, norm.get(), h, key_padding_mask, options_.causal);
}

template <class T>
Variable<T> EncoderModel<T>::forward(const IndexArray& tokens, const KeyPaddingMask& key_padding_mask) const {
  return this->hooked(head->forward(hidden(tokens, key_padding_mask)));
}

template <class T>
Variable<T> EncoderModel<T>::forward_rows(const IndexArray& tokens, const IndexArray& rows,
                                          const KeyPaddingMask& key_padding_mask) const {
  check_tokens(tokens, "EncoderModel::forward_rows", "tokens");
  const std::size_t positions = tokens.size();
  if (rows.dimension() != 1)
    throw ShapeError("EncoderModel::forward_rows: expected rows of shape (n), found " + shape_str(rows.shape()));
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows.data()[i] < 0 || std::size_t(rows.data()[i]) >= positions)
      throw ValueError("EncoderModel::forward_rows: row " + std::to_string(rows.data()[i]) + " (rows[" + std::to_string(i) +
                       "]) is outside the " + std::to_string(positions) + " positions of tokens " + shape_str(tokens.shape()));
  // The rows of h viewed as (B T, C): embedding() is that lookup, its backward the scatter-add.
  Variable<T> h = reshape(hidden(tokens, key_padding_mask), {long(positions), long(options_.d_model)});
  return head->forward(embedding(h, rows));
}


// ---- stacks ----

template <class T>
TransformerEncoder<T>::TransformerEncoder(const TransformerOptions& options, Generator& gen) {
  blocks = this->register_module("blocks", make_blocks<TransformerEncoderLayer<T>>(options, gen));
  if (final_norm(options)) norm = this->register_module("norm", std::make_shared<LayerNorm<T>>(options.d_model));
}

template <class T>
Variable<T> TransformerEncoder<T>::forward(const Variable<T>& x, const KeyPaddingMask& key_padding_mask,
                                           bool is_causal) const {
  return this->hooked(run_encoder(*blocks, norm.get(), x, key_padding_mask, is_causal));
}

template <class T>
TransformerDecoder<T>::TransformerDecoder(const TransformerOptions& options, Generator& gen) {
  blocks = this->register_module("blocks", make_blocks<TransformerDecoderLayer<T>>(options, gen));
  if (final_norm(options)) norm = this->register_module("norm", std::make_shared<LayerNorm<T>>(options.d_model));
}

template <class T>
Variable<T> TransformerDecoder<T>::forward(const Variable<T>& x, const Variable<T>& memory,
                                           const KeyPaddingMask& tgt_key_padding_mask,
                                           const KeyPaddingMask& memory_key_padding_mask) const {
  Variable<T> h = x;
  for (auto& block : *blocks) h = block->forward(h, memory, tgt_key_padding_mask, memory_key_padding_mask);
  return this->hooked(norm ? norm->forward(h) : h);
}

// ---- Seq2SeqModel ----

template <class T>
Seq2SeqModel<T>::Seq2SeqModel(std::size_t src_vocab, std::size_t tgt_vocab, const TransformerOptions& options,
                              Generator& gen)
    : options_(options) {
  options.validate();
  src_emb = this->register_module("src_emb", std::make_shared<Embedding<T>>(src_vocab, options.d_model, gen));
  tgt_emb = this->register_module("tgt_emb", std::make_shared<Embedding<T>>(tgt_vocab, options.d_model, gen));
  src_pos = this->register_module("src_pos", make_positional<T>(options, gen));
  tgt_pos = this->register_module("tgt_pos", make_positional<T>(options, gen));
  emb_drop = this->register_module("emb_drop", std::make_shared<Dropout<T>>(options.dropout));
  encoder = this->register_module("encoder", std::make_shared<TransformerEncoder<T>>(options, gen));
  decoder = this->register_module("decoder", std::make_shared<TransformerDecoder<T>>(options, gen));
  head = this->register_module("head", std::make_shared<Linear<T>>(options.d_model, tgt_vocab, true, gen));
}

template <class T>
Variable<T> Seq2SeqModel<T>::encode(const IndexArray& src, const KeyPaddingMask& src_key_padding_mask) const {
  check_tokens(src, "Seq2SeqModel", "src");
  Variable<T> h = emb_drop->forward(src_pos->forward(src_emb->forward(src)));
  return encoder->forward(h, src_key_padding_mask);
}

template <class T>
Variable<T> Seq2SeqModel<T>::decode(const Variable<T>& memory, const IndexArray& tgt_in,
                                    const KeyPaddingMask& src_key_padding_mask,
                                    const KeyPaddingMask& tgt_key_padding_mask) const {
  check_tokens(tgt_in, "Seq2SeqModel", "tgt_in");
  if (memory.ndim() != 3 || memory.dim(0) != tgt_in.shape()[0] || memory.dim(2) != options_.d_model)
    throw ShapeError("Seq2SeqModel: memory of shape " + shape_str(memory.shape()) + " does not fit tgt_in " +
                     shape_str(tgt_in.shape()) + " (expected (B, Ts, " + std::to_string(options_.d_model) + "))");
  Variable<T> h = emb_drop->forward(tgt_pos->forward(tgt_emb->forward(tgt_in)));
  return head->forward(decoder->forward(h, memory, tgt_key_padding_mask, src_key_padding_mask));
}

template <class T>
Variable<T> Seq2SeqModel<T>::forward(const IndexArray& src, const IndexArray& tgt_in,
                                     const KeyPaddingMask& src_key_padding_mask,
                                     const KeyPaddingMask& tgt_key_padding_mask) const {
  return this->hooked(decode(encode(src, src_key_padding_mask), tgt_in, src_key_padding_mask, tgt_key_padding_mask));
}


std::vector<std::pair<std::string, Shape>> parameter_shapes(const TransformerOptions& options,
                                                            std::size_t input_vocab, std::size_t output_vocab) {
  MetaGuard meta;
  Generator gen(0);
  if (options.arch == Arch::EncoderDecoder) return Seq2SeqModel<float>(input_vocab, output_vocab, options, gen).named_parameter_shapes();
  if (options.arch == Arch::Decoder) return DecoderModel<float>(input_vocab, options, gen).named_parameter_shapes();
  return EncoderModel<float>(input_vocab, output_vocab, options, gen).named_parameter_shapes();
}

// ---- DecoderModel ----

namespace {
// The blocks of a decoder-only model: every self-attention rotary when the positions are.
TransformerOptions decoder_layer_options(TransformerOptions o) {
  o.attn.rope = o.positional == Positional::Rope;
  return o;
}
}  // namespace

template <class T>
DecoderModel<T>::DecoderModel(std::size_t vocab, const TransformerOptions& options, Generator& gen) : options_(options) {
  options.validate();
  const std::size_t C = options.d_model;
  EmbeddingOptions e{vocab, C, options.tie_embeddings ? 1.0 / std::sqrt(double(C)) : 1.0};
  tok_emb = this->register_module("tok_emb", std::make_shared<Embedding<T>>(e, gen));
  if (auto p = make_positional<T>(options, gen)) pos = this->register_module("pos", p);
  emb_drop = this->register_module("emb_drop", std::make_shared<Dropout<T>>(options.dropout));
  blocks = this->register_module("blocks", make_blocks<TransformerEncoderLayer<T>>(decoder_layer_options(options), gen));
  if (final_norm(options)) norm = this->register_module("norm", std::make_shared<LayerNorm<T>>(C));
  if (!options.tie_embeddings) head = this->register_module("head", std::make_shared<Linear<T>>(C, vocab, false, gen));
}

template <class T>
Variable<T> DecoderModel<T>::run(const IndexArray& tokens, DecoderCache<T>* cache) const {
  check_tokens(tokens, "DecoderModel", "tokens");
  const std::size_t at = cache ? cache->length() : 0;
  if (cache && cache->layers.size() != blocks->size())
    throw ValueError("DecoderModel: a cache for " + std::to_string(cache->layers.size()) + " layers given to a model of " +
                     std::to_string(blocks->size()) + " (use make_cache())");
  if (at + tokens.shape()[1] > options_.max_len)
    throw ShapeError("DecoderModel: positions up to " + std::to_string(at + tokens.shape()[1]) + " exceed max_len " +
                     std::to_string(options_.max_len));
  Variable<T> h = tok_emb->forward(tokens);
  if (options_.tie_embeddings) h = mul_scalar(h, T(std::sqrt(double(options_.d_model))));
  if (pos) h = pos->forward(h, at);
  h = emb_drop->forward(h);
  for (std::size_t i = 0; i < blocks->size(); ++i)
    h = (*blocks)[i].forward(h, KeyPaddingMask(), true, cache ? &cache->layers[i] : nullptr);
  if (norm) h = norm->forward(h);
  return this->hooked(head ? head->forward(h) : linear(h, tok_emb->weight, Variable<T>()));
}

template <class T>
Variable<T> DecoderModel<T>::forward(const IndexArray& tokens) const {
  return run(tokens, nullptr);
}

template <class T>
Variable<T> DecoderModel<T>::forward(const IndexArray& tokens, DecoderCache<T>& cache) const {
  return run(tokens, &cache);
}

template <class T>
Variable<T> Seq2SeqModel<T>::decode(const Variable<T>& memory, const IndexArray& tgt_tokens, DecodeCache& cache) const {
  check_tokens(tgt_tokens, "Seq2SeqModel", "tgt_tokens");
  Variable<T> h = tgt_pos->forward(tgt_emb->forward(tgt_tokens), cache.length());
  for (std::size_t i = 0; i < decoder->blocks->size(); ++i)
    h = (*decoder->blocks)[i].forward(h, memory, cache.self[i], cache.cross[i]);
  if (decoder->norm) h = decoder->norm->forward(h);
  return head->forward(h);
}

template class DecoderModel<float>;
template class DecoderModel<double>;
template class EncoderModel<float>;
template class EncoderModel<double>;
template class TransformerEncoder<float>;
template class TransformerEncoder<double>;
template class TransformerDecoder<float>;
template class TransformerDecoder<double>;
template class Seq2SeqModel<float>;
template class Seq2SeqModel<double>;

}  // namespace qkv::nn
