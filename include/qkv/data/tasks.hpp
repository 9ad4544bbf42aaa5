#pragma once
/// @file
/// Toy sequence tasks that exercise attention, and the Dataset a run draws from.
///
/// Per-position labelling (encoder only; inputs and targets (B, T), T = length, tokens in [0, V)):
///   copy     target[t] = input[t]
///   reverse  target[t] = input[T-1-t]
///   sort     target = input sorted ascending
///   recall   multi-query associative recall: `pairs` distinct keys from [0, V), each followed by its
///            value from [V, 2V): k1 v1 ... kn vn, then `queries` keys drawn (with replacement)
///            from the listed ones. target = value - V at each query position, kIgnore elsewhere.
///            input_vocab 2V, num_classes V, T = 2*pairs + queries (the `length` option is ignored).
/// Sequence to sequence (encoder-decoder, teacher forcing): source (B, L) in [0, V), target (B, L)
///   the source reversed / sorted, decoder_inputs = BOS then target[:-1]; decoder vocab V + 1,
///   BOS = V:  seq2seq_reverse, seq2seq_sort.
///   seq2seq_recall  recall's examples split in two: source k1 v1 ... kn vn (B, 2 pairs), decoder
///              inputs the query keys (B, queries), given rather than generated (no BOS: bos() is
///              -1), targets their values - V; the decoder reads the pairs by cross-attention only.
/// Next-token prediction (decoder-only: inputs s[0:T], targets s[1:T+1]; docs/tasks.md):
///   text       windows of a UTF-8 corpus (task.path), byte or char tokens; train / validation /
///              test are contiguous parts of it (data/text.hpp)
///   induction  a random prefix then its repetition (or a random segment copied to a later
///              offset); scored only where the next token is predictable from an earlier occurrence
/// Masked language modelling (an encoder: objective masked; docs/tasks.md):
///   text       windows of T tokens; round(mask_rate T) positions chosen, 80% of them replaced by
///              the mask token V, 10% by a random token, 10% kept; scored at the chosen positions
/// Sentences with known roles (data/grammar.hpp), objective causal or masked:
///   grammar    everyday sentences of a built-in lexicon and grammar (zh or en), packed into rows
///              of T tokens and padded; batches carry the gold words and relations of every token
/// A rasp program's outputs (data/program_task.hpp; what `qkv compile` writes):
///   program    BOS, then 1..max_len random tokens of its vocabulary, then padding; targets the
///              reference interpreter's output at each token
/// Either encoder or decoder (a label at one position, read from earlier ones):
///   mod_add    "a b =" labelled (a + b) mod p at '=', p = vocab; a fixed share of all p^2 pairs
///              trains, the rest is split into validation and test (the grokking setup)
///   mqar       multi-query associative recall in Zoology's format (Arora et al. 2023): key-value
///              pairs (keys from [1, V/2), values from [V/2, V)), then queries of earlier keys at
///              power-law-spaced positions among random tokens, each labelled with its value
///
/// Example k of stream `seed` is drawn from Generator(hash64(seed, k)) alone, so any process can
/// generate any slice, and a batch never depends on how it is split across ranks or threads.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/data/text.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::data {

/// Target id of positions that are not scored (as torch's ignore_index).
inline constexpr Index kIgnore = -100;
/// How text spells the mask token (BERT's spelling): its token_label, what a prompt writes, and so
/// what a corpus read with objective masked must not contain.
inline constexpr const char* kMaskText = "[MASK]";

struct Batch {
  IndexArray inputs;          ///< (B, T) encoder tokens (seq2seq: the source)
  IndexArray targets;         ///< (B, T) class ids, kIgnore where not scored (seq2seq: (B, Tt))
  IndexArray decoder_inputs;  ///< seq2seq only: (B, Tt) = BOS then targets[:-1]; shape (0,) otherwise
  /// Tasks with gold relations (Task::relation_names() not empty): (B, T) the index of the word
  /// token t belongs to, counted from 0 within its row; -1 for padding. Shape (0,) otherwise.
  IndexArray words = IndexArray::from_shape({0});
  /// (B, R, T): for relation r (relation_names()[r]) at token t, the word index (as in `words`) of
  /// t's gold partner, -1 when t has none. Shape (0,) for tasks without relations.
  IndexArray relations = IndexArray::from_shape({0});
  std::size_t size() const { return inputs.dimension() ? inputs.shape()[0] : 0; }
};

/// What the targets of a language task are. Causal: the next token (a decoder). Masked: the
/// original tokens of a few chosen positions whose inputs were masked (BERT's masked LM, Devlin
/// et al. 2019; a bidirectional encoder).
enum class Objective { Causal, Masked };
/// The names configs use: "causal", "masked".
const NameTable<Objective>& objective_names();
const char* name(Objective objective);

/// The language of the grammar task: Chinese (a token per character) or English (a token per word).
enum class Language { Zh, En };
/// The names configs use: "zh", "en".
const NameTable<Language>& language_names();
const char* name(Language language);

/// The task names, in documentation order: what make_task accepts and configs list.
const std::vector<std::string>& task_names();

/// The config's `task` section: which task and its sizes, and the data a run draws from it.
struct TaskOptions {
  std::string name = "sort";    ///< one of task_names()
  std::size_t vocab = 16;       ///< V >= 2 (mod_add: the modulus p)
  std::size_t length = 32;      ///< T >= 1 (not recall)
  std::size_t pairs = 8;        ///< recall, mqar: key-value pairs per sequence
  std::size_t queries = 0;      ///< recall: queries per sequence; 0 = pairs
  std::size_t eval_size = 512;  ///< held-out examples (Dataset)
  std::size_t train_size = 0;   ///< 0: a fresh sample every step; else a fixed training set (Dataset)
  std::string path;             ///< text: a UTF-8 file, a directory or a glob
  TokenizerKind tokenizer = TokenizerKind::Char;  ///< text: byte (256 ids) or char (code points)
  TextClean clean = TextClean::Auto;              ///< text: strip ANSI escapes and fortune '%' lines
  double val_fraction = 0.05;   ///< text: the part of the corpus after training, for validation; grammar: of the sentences
  double test_fraction = 0.05;  ///< text: the last part of the corpus, for the reported test metrics; grammar: likewise
  double train_fraction = 0.3;  ///< mod_add: share of the p^2 pairs that train
  std::size_t segment = 0;      ///< induction: repeated segment length; 0 = the second half repeats the first
  Objective objective = Objective::Causal;  ///< text, grammar: next-token (causal) or masked targets
  double mask_rate = 0.15;      ///< masked: the share of positions chosen, in (0, 1)
  Language language = Language::Zh;  ///< grammar: the language of the sentences
  std::string grammar = "v1";   ///< grammar: v1 (built in), v2 (share/grammar/v2.yaml, compiled in) or a grammar file's path
  /// program: the rasp program's text (docs/compile.md); empty: the file `path` holds it
  std::string program;
  /// name in task_names(), sizes positive, vocab >= 2, recall keys distinct (pairs <= vocab),
  /// each task's own constraints; throws OptionError.
  void validate() const;
};

/// Which part of a task's data examples come from. Tasks with real data (text, mod_add) hold
/// out disjoint validation and test data; the other synthetic tasks draw every split from the
/// same distribution, through different random streams.
enum class Split { Train, Val, Test };

class Task {
 public:
  virtual ~Task();
  virtual std::string name() const = 0;
  /// Input token ids are < this.
  virtual std::size_t input_vocab() const = 0;
  /// Target class ids are < this (or kIgnore).
  virtual std::size_t num_classes() const = 0;
  /// Length T of inputs (the encoder / source sequence).
  virtual std::size_t input_length() const = 0;
  /// Length of targets (T, or Tt for seq2seq).
  virtual std::size_t target_length() const { return input_length(); }
  /// True when batches carry decoder_inputs (encoder-decoder tasks).
  virtual bool seq2seq() const { return false; }
  /// seq2seq: decoder vocabulary including BOS; 0 otherwise.
  virtual std::size_t target_vocab() const { return 0; }
  /// seq2seq: the BOS token id; -1 otherwise, and for seq2seq_recall, whose decoder inputs are
  /// given rather than generated (its predictions are the teacher-forced argmax).
  virtual Index bos() const { return -1; }
  /// Examples first..first+count-1 of stream `seed`: example k uses Generator(hash64(seed, k)).
  virtual Batch examples(std::uint64_t seed, std::uint64_t first, std::size_t count) const = 0;
  /// Examples of `split`; by default examples(seed, first, count) (the streams tell the splits apart).
  virtual Batch examples(Split split, std::uint64_t seed, std::uint64_t first, std::size_t count) const {
    (void)split;
    return examples(seed, first, count);
  }
  /// How many distinct examples a held-out split has (0: unbounded, every example fresh).
  virtual std::size_t split_size(Split split) const {
    (void)split;
    return 0;
  }
  /// True when the targets are the inputs' next tokens (text, induction): only a causal model may
  /// learn them (a bidirectional encoder would read the answer).
  virtual bool next_token() const { return false; }
  /// True when the targets are input tokens that were masked out (objective masked): the model
  /// must read both sides of a position, so it must be bidirectional (a decoder would be wrong).
  virtual bool masked() const { return false; }
  /// The id of the mask token (objective masked: V, the tokenizer's size; never a target); -1 otherwise.
  virtual Index mask_token() const { return -1; }
  /// The id of the padding token rows end in (grammar: never a target); -1 for tasks without one.
  virtual Index pad_token() const { return -1; }
  /// The names of the gold relations batches carry (Batch::relations, in this order); empty for
  /// tasks without.
  virtual const std::vector<std::string>& relation_names() const;
  /// The tokenizer of a text task (ids <-> characters); nullptr for the others.
  virtual const Tokenizer* tokenizer() const { return nullptr; }
  /// A printable label of input token `id` (the character of a text task, the id otherwise).
  virtual std::string token_label(Index id) const { return std::to_string(id); }
  /// The row (1, T') a model reads for `text` (what the instruments and `qkv fill` run on): the
  /// tokenizer's ids of the text, each occurrence of `mask_text` becoming mask_token() when the
  /// task has one; at most input_length() tokens; targets the next tokens within the row for
  /// next-token tasks, else kIgnore. The grammar analyses the text into its words and relations
  /// and pads the row as its examples are. ValueError naming `what` for a task without a
  /// tokenizer (token ids only: ids_row), characters outside the vocabulary, empty or too long text.
  virtual Batch text_row(const std::string& text, const std::string& what, const std::string& mask_text = kMaskText) const;
};

/// One row (1, n) of token ids for `task`: n >= 1, at most task.input_length() (ValueError naming
/// `what`), decoder_inputs of shape (0,), targets as Task::text_row gives them.
Batch ids_row(const Task& task, const std::vector<Index>& ids, const std::string& what);
/// The tokenizer's ids of `text`, each occurrence of `mask_text` (when not empty and `mask` >= 0)
/// becoming `mask`. ValueError naming `what` for characters outside the vocabulary.
std::vector<Index> encode_with_masks(const Tokenizer& tokenizer, const std::string& text, Index mask,
                                     const std::string& mask_text, const std::string& what);

/// The task named by options.name. Throws OptionError naming the bad option, ValueError for a
/// corpus that cannot be used (naming the file). A text task built with `tokenizer` uses that
/// vocabulary (a checkpoint's) instead of building one from the training split.
std::unique_ptr<Task> make_task(const TaskOptions& options, const Tokenizer* tokenizer = nullptr);

/// A task that holds only a vocabulary and the window length task.length, no corpus: for running a
/// checkpoint's model on given text. Text: its examples() throws ValueError; its objective is
/// task.objective's, so input_vocab() and mask_token() agree with the checkpoint's. Grammar: the
/// grammar task itself (it needs no corpus), checked to have `tokenizer`'s vocabulary.
std::unique_ptr<Task> make_vocabulary_task(const TaskOptions& options, const Tokenizer& tokenizer);

/// The data of a run: a fixed held-out set (the first eval_size examples of stream
/// hash64(seed, 1)) and the training stream hash64(seed, 0). With train_size > 0 the training set
/// is that stream's first train_size examples, cycled in order (for overfitting experiments).
/// State: the next training example counter (position), saved by the trainer for exact resume.
class Dataset {
 public:
  Dataset(std::shared_ptr<const Task> task, std::uint64_t seed, std::size_t eval_size, std::size_t train_size = 0);

  /// The next `batch` training examples; advances the position by `batch`.
  Batch next_train(std::size_t batch);
  /// Rows [rank*b, (rank+1)*b) of the next global batch, b = global_batch / world (which must
  /// divide); advances the position by global_batch, so every rank stays in step.
  Batch next_train_shard(std::size_t global_batch, std::size_t rank, std::size_t world);
  /// Training examples [first, first + count) of the (cycled) training stream; no state change.
  Batch train_examples(std::uint64_t first, std::size_t count) const;

  /// The held-out set: the first eval_size examples of the validation split (fewer when the split
  /// holds fewer). It decides early stopping and is what metrics.csv calls eval_*.
  const Batch& eval_set() const { return eval_; }
  /// The test set (made on first use): the first eval_size examples of the test split, from its
  /// own stream hash64(seed, 2); for numbers that are reported, never for decisions.
  const Batch& test_set() const;
  std::uint64_t position() const { return position_; }
  void set_position(std::uint64_t position) { position_ = position; }
  const Task& task() const { return *task_; }
  std::uint64_t train_stream() const { return train_stream_; }
  std::uint64_t eval_stream() const { return eval_stream_; }
  std::size_t train_size() const { return train_size_; }

 private:
  std::shared_ptr<const Task> task_;
  std::uint64_t train_stream_, eval_stream_;
  std::size_t train_size_;
  Batch eval_;
  std::uint64_t seed_;
  std::size_t eval_size_;
  mutable std::unique_ptr<Batch> test_;
  std::uint64_t position_ = 0;
};

/// Rows of `a` then rows of `b` (same task, same widths), every array of the batch.
Batch concat(const Batch& a, const Batch& b);
/// Rows [lo, hi) of every array of `b` that has rows (arrays of shape (0,) stay as they are);
/// ShapeError for rows past the batch.
Batch rows(const Batch& b, std::size_t lo, std::size_t hi);

}  // namespace qkv::data
