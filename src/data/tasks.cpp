#include "qkv/data/tasks.hpp"

#include "next_token.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/data/program_task.hpp"
#include "row_task.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "qkv/tensor/parallel.hpp"
#include "qkv/tensor/names.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::data {

Task::~Task() = default;

const std::vector<std::string>& Task::relation_names() const {
  static const std::vector<std::string> none;
  return none;
}

const NameTable<Objective>& objective_names() {
  static const NameTable<Objective> table{{"causal", Objective::Causal}, {"masked", Objective::Masked}};
  return table;
}
const char* name(Objective objective) { return objective_names().name(objective); }
const NameTable<Language>& language_names() {
  static const NameTable<Language> table{{"zh", Language::Zh}, {"en", Language::En}};
  return table;
}
const char* name(Language language) { return language_names().name(language); }

namespace {

void random_tokens(Generator& gen, std::size_t vocab, std::size_t n, Index* out) {
  for (std::size_t t = 0; t < n; ++t) out[t] = Index(gen.randint(vocab));
}

enum class Kind { Copy, Reverse, Sort };

// target = f(input) for f in {identity, reversal, sorting}, of the same length.
void transform(Kind kind, const Index* input, std::size_t n, Index* target) {
  std::copy(input, input + n, target);
  if (kind == Kind::Reverse) std::reverse(target, target + n);
  if (kind == Kind::Sort) std::sort(target, target + n);
}

class Labelling : public RowTask {
 public:
  Labelling(std::string name, Kind kind, std::size_t vocab, std::size_t length)
      : name_(std::move(name)), kind_(kind), vocab_(vocab), length_(length) {}
  std::string name() const override { return name_; }
  std::size_t input_vocab() const override { return vocab_; }
  std::size_t num_classes() const override { return vocab_; }
  std::size_t input_length() const override { return length_; }

 protected:
  void fill(Generator& gen, Index* input, Index* target) const override {
    random_tokens(gen, vocab_, length_, input);
    transform(kind_, input, length_, target);
  }

 private:
  std::string name_;
  Kind kind_;
  std::size_t vocab_, length_;
};

// The same pairs (input, f(input)) as a sequence-to-sequence task: the decoder reads BOS then the
// target, so its vocabulary has one more token.
class Seq2Seq final : public Labelling {
 public:
  using Labelling::Labelling;
  bool seq2seq() const override { return true; }
  std::size_t target_vocab() const override { return input_vocab() + 1; }
  Index bos() const override { return Index(input_vocab()); }
};

// One associative-recall example: `pairs` distinct keys from [0, V) (the first entries of a partial
// Fisher-Yates shuffle), each with a value from [V, 2V), written k1 v1 ... kn vn to `source`; then
// `queries` keys drawn with replacement from the listed ones to `query`, their values - V to `answer`.
void draw_recall(Generator& gen, std::size_t V, std::size_t pairs, std::size_t queries, Index* source, Index* query,
                 Index* answer) {
  std::vector<Index> keys(V);
  std::iota(keys.begin(), keys.end(), Index(0));
  for (std::size_t i = 0; i < pairs; ++i) {
    std::swap(keys[i], keys[i + gen.randint(V - i)]);
    source[2 * i] = keys[i];
    source[2 * i + 1] = Index(V + gen.randint(V));
  }
  for (std::size_t q = 0; q < queries; ++q) {
    const std::size_t i = gen.randint(pairs);
    query[q] = keys[i];
    answer[q] = source[2 * i + 1] - Index(V);
  }
}

// The sizes both recall layouts share: keys in [0, V), values in [V, 2V), V classes.
class RecallBase : public RowTask {
 public:
  RecallBase(std::size_t vocab, std::size_t pairs, std::size_t queries) : vocab_(vocab), pairs_(pairs), queries_(queries) {}
  std::size_t input_vocab() const override { return 2 * vocab_; }
  std::size_t num_classes() const override { return vocab_; }

 protected:
  std::size_t vocab_, pairs_, queries_;
};

// Recall in one sequence: the pairs then the queries, scored at the queries.
class Recall final : public RecallBase {
 public:
  using RecallBase::RecallBase;
  std::string name() const override { return "recall"; }
  std::size_t input_length() const override { return 2 * pairs_ + queries_; }

 protected:
  void fill(Generator& gen, Index* input, Index* target) const override {
    std::fill(target, target + 2 * pairs_, kIgnore);
    draw_recall(gen, vocab_, pairs_, queries_, input, input + 2 * pairs_, target + 2 * pairs_);
  }
};

// The same content split for an encoder-decoder: the pairs are the source, the queries the
// decoder's inputs (given, not generated: bos() is -1), their values its targets. The decoder
// reads the pairs through cross-attention only.
class Seq2SeqRecall final : public RecallBase {
 public:
  using RecallBase::RecallBase;
  std::string name() const override { return "seq2seq_recall"; }
  std::size_t input_length() const override { return 2 * pairs_; }
  std::size_t target_length() const override { return queries_; }
  bool seq2seq() const override { return true; }
  std::size_t target_vocab() const override { return vocab_; }

 protected:
  void fill(Generator&, Index*, Index*) const override {}
  void fill(Split, std::uint64_t, Generator& gen, Index* input, Index* target, Index* decoder) const override {
    draw_recall(gen, vocab_, pairs_, queries_, input, decoder, target);
  }
};

}  // namespace

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"copy",      "reverse", "sort",    "recall", "seq2seq_reverse",
                                                 "seq2seq_sort", "seq2seq_recall", "text", "induction", "mod_add",
                                                 "mqar",      "grammar",
                                                 "program"};
  return names;
}

void TaskOptions::validate() const {
  OptionChecker c("TaskOptions");
  const auto& names = task_names();
  c.require(std::find(names.begin(), names.end(), name) != names.end(), {"name"},
            "expected one of " + join_names(names) + ", found '" + name + "'" + did_you_mean(name, names));
  c.positive(vocab, "vocab");
  c.require(vocab >= 2, {"vocab"}, "expected at least 2 tokens, found " + std::to_string(vocab));
  const bool recall = name == "recall" || name == "seq2seq_recall";
  if (!recall) c.positive(length, "length");  // recall lays out its own length
  c.positive(pairs, "pairs");
  c.positive(eval_size, "eval_size");
  c.require(!recall || pairs <= vocab, {"pairs", "vocab"},
            "recall needs distinct keys: {pairs} (" + std::to_string(pairs) + ") must not exceed {vocab} (" +
                std::to_string(vocab) + ")");
  const auto n = [](std::size_t v) { return std::to_string(v); };
  if (name == "text") {
    c.require(!path.empty(), {"path"}, "the text task needs a corpus: a UTF-8 file, a directory or a glob");
    c.in_range(val_fraction, "val_fraction", 0, false, 1, true);
    c.in_range(test_fraction, "test_fraction", 0, false, 1, true);
    c.require(val_fraction + test_fraction < 1, {"val_fraction", "test_fraction"},
              "{val_fraction} + {test_fraction} must be below 1, leaving text to train on");
  }
  c.require(objective == Objective::Causal || name == "text" || name == "grammar", {"objective"},
            "the masked objective is for the text and grammar tasks, found task '" + name + "'");
  c.in_range(mask_rate, "mask_rate", 0, true, 1, true);
  if (name == "text")
    c.require(tokenizer != TokenizerKind::Word, {"tokenizer"},
              "the text task reads a corpus as byte or char tokens, found word (the English grammar's vocabulary)");
  if (name == "grammar") {
    // Sentences are split by a hash into buckets of 1/1000; a split needs at least one bucket.
    c.in_range(val_fraction, "val_fraction", 0.001, false, 1, true);
    c.in_range(test_fraction, "test_fraction", 0.001, false, 1, true);
    c.require(val_fraction + test_fraction <= 0.999, {"val_fraction", "test_fraction"},
              "{val_fraction} + {test_fraction} must be at most 0.999, leaving sentences to train on");
    std::size_t longest = 0;
    try {
      longest = load_grammar(grammar, language)->max_tokens();
    } catch (const ValueError& e) {  // an unknown name, or a grammar file with a problem
      c.require(false, {"grammar"}, e.what());
    }
    c.require(length >= longest, {"length"},
              std::string("a row holds whole sentences, and the longest sentence of the ") + data::name(language) +
                  " grammar " + (grammar == "v1" ? "" : grammar + " ") + "has at most " + n(longest) +
                  " tokens: expected {length} >= " + n(longest) + ", found " + n(length));
  }
  if (name == "program")
    c.require(!program.empty() || !path.empty(), {"program", "path"},
              "the program task needs a rasp program: its text in {program}, or a file in {path}");
  if (name == "induction") {
    c.require(length >= 2, {"length"}, "induction needs at least 2 tokens, found " + n(length));
    c.require(segment == 0 || (segment >= 2 && 2 * segment <= length + 1), {"segment", "length"},
              "a repeated {segment} needs 2 <= segment and two copies in {length} + 1 tokens, found " + n(segment) +
                  " and " + n(length));
  }
  if (name == "mod_add") {
    c.in_range(train_fraction, "train_fraction", 0, true, 1, true);
    c.require(vocab * vocab >= 3 && std::llround(train_fraction * double(vocab * vocab)) >= 1 &&
                  double(vocab * vocab) - std::llround(train_fraction * double(vocab * vocab)) >= 2,
              {"train_fraction", "vocab"}, "{train_fraction} leaves no training pair or fewer than two held-out pairs");
  }
  if (name == "mqar") {
    c.require(vocab >= 4 && pairs <= vocab / 2 - 1, {"pairs", "vocab"},
              "mqar draws {pairs} distinct keys from [1, vocab/2) and values from [vocab/2, vocab): " + n(pairs) +
                  " pairs need {vocab} >= " + n(2 * pairs + 2) + ", found " + n(vocab));
    c.require(length >= 4 * pairs, {"length", "pairs"},
              "mqar lays out the pairs (2 per pair) and a query region of 2 tokens per pair: {length} >= 4 * " + n(pairs) +
                  ", found " + n(length));
  }
}

std::unique_ptr<Task> make_task(const TaskOptions& o, const Tokenizer* tokenizer) {
  o.validate();
  if (auto t = make_next_token_task(o, tokenizer)) return t;
  if (o.name == "grammar") return std::make_unique<GrammarTask>(o, tokenizer);
  if (o.name == "program")
    return make_program_task(std::make_shared<const rasp::Program>(
        o.program.empty() ? rasp::load_program(o.path) : rasp::parse_program(o.program, "task.program")));
  const std::string& n = o.name;
  const std::size_t queries = o.queries ? o.queries : o.pairs;
  if (n == "recall") return std::make_unique<Recall>(o.vocab, o.pairs, queries);
  if (n == "seq2seq_recall") return std::make_unique<Seq2SeqRecall>(o.vocab, o.pairs, queries);
  if (n == "copy") return std::make_unique<Labelling>(n, Kind::Copy, o.vocab, o.length);
  if (n == "reverse") return std::make_unique<Labelling>(n, Kind::Reverse, o.vocab, o.length);
  if (n == "sort") return std::make_unique<Labelling>(n, Kind::Sort, o.vocab, o.length);
  if (n == "seq2seq_reverse") return std::make_unique<Seq2Seq>(n, Kind::Reverse, o.vocab, o.length);
  return std::make_unique<Seq2Seq>(n, Kind::Sort, o.vocab, o.length);
}

Batch Task::text_row(const std::string& text, const std::string& what, const std::string& mask_text) const {
  const Tokenizer* t = tokenizer();
  if (!t)
    throw ValueError(what + ": the model was trained on task " + name() +
                     ", which has token ids, not characters: give token ids (e.g. 3 1 2) instead of text");
  return ids_row(*this, encode_with_masks(*t, text, mask_token(), mask_text, what), what);
}

std::vector<Index> encode_with_masks(const Tokenizer& tokenizer, const std::string& text, Index mask,
                                     const std::string& mask_text, const std::string& what) {
  std::vector<Index> ids;
  std::size_t from = 0;
  while (true) {
    const std::size_t at = mask >= 0 && !mask_text.empty() ? text.find(mask_text, from) : std::string::npos;
    const std::vector<Index> piece = tokenizer.encode(std::string_view(text).substr(from, at - from), false, what);
    ids.insert(ids.end(), piece.begin(), piece.end());
    if (at == std::string::npos) break;
    ids.push_back(mask);
    from = at + mask_text.size();
  }
  return ids;
}

Batch ids_row(const Task& task, const std::vector<Index>& ids, const std::string& what) {
  if (task.seq2seq())
    throw ValueError(what + ": task " + task.name() +
                     " is sequence-to-sequence (a source and a target): choose a held-out example instead");
  const std::size_t T = task.input_length();
  if (ids.empty()) throw ValueError(what + ": empty; give at least one token");
  if (ids.size() > T)
    throw ValueError(what + ": " + std::to_string(ids.size()) + " tokens, more than the model's context of " +
                     std::to_string(T) + " (task.length)");
  Batch b;
  b.inputs = IndexArray::from_shape({1, ids.size()});
  b.targets = IndexArray::from_shape({1, ids.size()});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    b.inputs(0, i) = ids[i];
    b.targets(0, i) = task.next_token() && i + 1 < ids.size() ? ids[i + 1] : kIgnore;
  }
  b.decoder_inputs = IndexArray::from_shape({0});
  return b;
}

Batch concat(const Batch& a, const Batch& b) {
  if (a.size() == 0) return b;
  if (b.size() == 0) return a;
  auto rows = [](const IndexArray& x, const IndexArray& y) {
    if (x.size() == 0 && y.size() == 0) return x;
    const auto& sx = x.shape();
    const auto& sy = y.shape();
    if (x.dimension() < 2 || x.dimension() != y.dimension() || !std::equal(sx.begin() + 1, sx.end(), sy.begin() + 1))
      throw ShapeError("data::concat: batches of shapes " + shape_str(sx) + " and " + shape_str(sy) + " do not stack");
    std::vector<std::size_t> shape(sx.begin(), sx.end());
    shape[0] += sy[0];
    IndexArray out = IndexArray::from_shape(shape);
    std::copy(y.begin(), y.end(), std::copy(x.begin(), x.end(), out.begin()));
    return out;
  };
  Batch out{rows(a.inputs, b.inputs), rows(a.targets, b.targets), rows(a.decoder_inputs, b.decoder_inputs)};
  out.words = rows(a.words, b.words);
  out.relations = rows(a.relations, b.relations);
  return out;
}

Batch rows(const Batch& b, std::size_t lo, std::size_t hi) {
  auto take = [&](const IndexArray& a) {
    if (a.dimension() < 2) return a;  // an array the task does not have
    if (lo > hi || hi > a.shape()[0])
      throw ShapeError("data::rows: rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of a batch of shape " +
                       shape_str(a.shape()));
    std::vector<std::size_t> shape(a.shape().begin(), a.shape().end());
    const std::size_t row = std::accumulate(shape.begin() + 1, shape.end(), std::size_t(1), std::multiplies<>());
    shape[0] = hi - lo;
    IndexArray out = IndexArray::from_shape(shape);
    std::copy(a.data() + lo * row, a.data() + hi * row, out.data());
    return out;
  };
  Batch out{take(b.inputs), take(b.targets), take(b.decoder_inputs)};
  out.words = take(b.words);
  out.relations = take(b.relations);
  return out;
}

namespace {
// eval_size examples, or all a split has when it has fewer.
std::size_t held_out_count(const Task& t, Split s, std::size_t eval_size) {
  const std::size_t n = t.split_size(s);
  return n ? std::min(n, eval_size) : eval_size;
}
}  // namespace

Dataset::Dataset(std::shared_ptr<const Task> task, std::uint64_t seed, std::size_t eval_size, std::size_t train_size)
    : task_(std::move(task)), train_stream_(hash64(seed, 0)), eval_stream_(hash64(seed, 1)), train_size_(train_size),
      seed_(seed), eval_size_(eval_size) {
  if (!task_) throw ValueError("Dataset: no task given");
  eval_ = task_->examples(Split::Val, eval_stream_, 0, held_out_count(*task_, Split::Val, eval_size));
}

const Batch& Dataset::test_set() const {
  if (!test_)
    test_ = std::make_unique<Batch>(
        task_->examples(Split::Test, hash64(seed_, 2), 0, held_out_count(*task_, Split::Test, eval_size_)));
  return *test_;
}

Batch Dataset::train_examples(std::uint64_t first, std::size_t count) const {
  if (train_size_ == 0) return task_->examples(Split::Train, train_stream_, first, count);
  // A fixed set cycled in order: split [first, first + count) where it wraps around.
  Batch out = task_->examples(Split::Train, train_stream_, 0, 0);
  while (count > 0) {
    const std::uint64_t start = first % train_size_;
    const std::size_t n = std::min<std::uint64_t>(count, train_size_ - start);
    out = concat(out, task_->examples(Split::Train, train_stream_, start, n));
    first += n;
    count -= n;
  }
  return out;
}

Batch Dataset::next_train(std::size_t batch) {
  Batch b = train_examples(position_, batch);
  position_ += batch;
  return b;
}

Batch Dataset::next_train_shard(std::size_t global_batch, std::size_t rank, std::size_t world) {
  if (world == 0 || rank >= world)
    throw ValueError("Dataset::next_train_shard: rank " + std::to_string(rank) + " is not in [0, world = " +
                     std::to_string(world) + ")");
  if (global_batch % world != 0)
    throw ValueError("Dataset::next_train_shard: global batch " + std::to_string(global_batch) +
                     " is not divisible by world size " + std::to_string(world));
  const std::size_t b = global_batch / world;
  Batch shard = train_examples(position_ + rank * b, b);
  position_ += global_batch;
  return shard;
}

}  // namespace qkv::data
