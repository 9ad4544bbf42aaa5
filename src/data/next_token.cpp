// The language-model tasks (text, induction) and the label-at-one-position tasks of the
// interpretability literature (mod_add, mqar). docs/tasks.md has each format with an example.
#include "next_token.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "masking.hpp"
#include "qkv/data/grammar.hpp"
#include "row_task.hpp"

namespace qkv::data {
namespace {

// Windows of a tokenized corpus: train windows start at random offsets of the training split
// (one generator per example), validation and test windows tile their splits without overlap.
// Causal: windows of T + 1 tokens, targets the inputs shifted by one. Masked: windows of T tokens,
// corrupted by mask_tokens; the mask token is V, so input_vocab is V + 1 and num_classes V.
class Text final : public RowTask {
 public:
  Text(const TaskOptions& o, const Tokenizer* stored)
      : length_(o.length), masked_(o.objective == Objective::Masked), mask_rate_(o.mask_rate),
        data_(load_text_data(o.path, stored ? stored->kind() : o.tokenizer, o.clean, o.val_fraction, o.test_fraction,
                             masked_ ? o.length : o.length + 1, stored, masked_ ? "task.length" : "task.length + 1")) {
    if (!masked_) return;
    if (auto at = find_in_corpus(data_.corpus, kMaskText))
      throw ValueError("task.path: " + at->file + " holds the text " + kMaskText + " at byte " + std::to_string(at->byte) +
                       (at->cleaned ? " of its text after cleaning" : "") + ", line " + std::to_string(at->line) +
                       ": with task.objective masked, " + kMaskText +
                       " is how a prompt spells the mask token, so the corpus must not contain it");
  }
  std::string name() const override { return "text"; }
  std::size_t input_vocab() const override { return data_.tokenizer.size() + (masked_ ? 1 : 0); }
  std::size_t num_classes() const override { return data_.tokenizer.size(); }
  std::size_t input_length() const override { return length_; }
  bool next_token() const override { return !masked_; }
  bool masked() const override { return masked_; }
  Index mask_token() const override { return masked_ ? Index(data_.tokenizer.size()) : -1; }
  const Tokenizer* tokenizer() const override { return &data_.tokenizer; }
  std::string token_label(Index id) const override {
    return id == mask_token() ? kMaskText : data_.tokenizer.token_label(id);
  }
  std::size_t split_size(Split split) const override {
    const std::size_t n = ids(split).size();
    if (split == Split::Train) return 0;
    if (masked_) return n / length_;
    return n <= length_ ? 0 : (n - 1) / length_;
  }

 protected:
  void fill(Generator&, Index*, Index*) const override {}
  void fill(Split split, std::uint64_t k, Generator& gen, Index* input, Index* target) const override {
    const std::vector<Index>& t = ids(split);
    const std::size_t T = length_, window = masked_ ? T : T + 1;
    std::size_t start = 0;
    if (split == Split::Train)
      start = std::size_t(gen.randint(t.size() - window + 1));  // starts 0 .. n - window
    else
      start = std::size_t(k % std::max<std::size_t>(1, split_size(split))) * T;
    std::copy(t.begin() + long(start), t.begin() + long(start + T), input);
    if (masked_) {
      // Ids drawn as random replacements: the real tokens, not <unk>.
      const Tokenizer& tk = data_.tokenizer;
      mask_tokens(gen, T, mask_rate_, mask_token(), tk.unk() < 0 ? tk.size() : tk.size() - 1, input, target);
    } else {
      std::copy(t.begin() + long(start + 1), t.begin() + long(start + T + 1), target);
    }
  }

 private:
  const std::vector<Index>& ids(Split s) const { return s == Split::Train ? data_.train : s == Split::Val ? data_.val : data_.test; }
  std::size_t length_;
  bool masked_;
  double mask_rate_;
  TextData data_;
};

// A text task without its corpus: the vocabulary, the window length and the objective of a
// checkpoint, for running the model on given text.
class TextVocabulary final : public Task {
 public:
  TextVocabulary(const TaskOptions& o, const Tokenizer& t)
      : length_(o.length), masked_(o.objective == Objective::Masked), tokenizer_(t) {}
  std::string name() const override { return "text"; }
  std::size_t input_vocab() const override { return tokenizer_.size() + (masked_ ? 1 : 0); }
  std::size_t num_classes() const override { return tokenizer_.size(); }
  std::size_t input_length() const override { return length_; }
  bool next_token() const override { return !masked_; }
  bool masked() const override { return masked_; }
  Index mask_token() const override { return masked_ ? Index(tokenizer_.size()) : -1; }
  const Tokenizer* tokenizer() const override { return &tokenizer_; }
  std::string token_label(Index id) const override { return id == mask_token() ? kMaskText : tokenizer_.token_label(id); }
  Batch examples(std::uint64_t, std::uint64_t, std::size_t) const override {
    throw ValueError("task text: no corpus is loaded (only the checkpoint's vocabulary): give the input as text");
  }

 private:
  std::size_t length_;
  bool masked_;
  Tokenizer tokenizer_;
};

// A random sequence s of T + 1 tokens with a repeated part; inputs s[0:T], targets s[1:T+1],
// scored where the target continues a copy (predictable from the earlier occurrence).
//   segment 0: s = p ++ p[0 : T + 1 - P] with p random of P = ceil((T + 1) / 2) tokens; scored
//              t in [P, T): the input s[t] = p[t - P] was seen at t - P, followed by the target.
//   segment S: s random, then s[b : b + S] = s[a : a + S] for a random a and b >= a + S; scored
//              t in [b, b + S - 1).
class Induction final : public RowTask {
 public:
  Induction(std::size_t vocab, std::size_t length, std::size_t segment) : vocab_(vocab), length_(length), segment_(segment) {}
  std::string name() const override { return "induction"; }
  std::size_t input_vocab() const override { return vocab_; }
  std::size_t num_classes() const override { return vocab_; }
  std::size_t input_length() const override { return length_; }
  bool next_token() const override { return true; }

 protected:
  void fill(Generator& gen, Index* input, Index* target) const override {
    const std::size_t T = length_;
    std::vector<Index> s(T + 1);
    std::size_t lo = 0, hi = 0;  // scored positions [lo, hi)
    if (segment_ == 0) {
      const std::size_t P = (T + 2) / 2;
      for (std::size_t i = 0; i < P; ++i) s[i] = Index(gen.randint(vocab_));
      for (std::size_t i = P; i <= T; ++i) s[i] = s[i - P];
      lo = P, hi = T;
    } else {
      const std::size_t S = segment_;
      for (auto& x : s) x = Index(gen.randint(vocab_));
      const std::size_t a = std::size_t(gen.randint(T + 2 - 2 * S));
      const std::size_t b = a + S + std::size_t(gen.randint(T + 2 - S - (a + S)));
      std::copy(s.begin() + long(a), s.begin() + long(a + S), s.begin() + long(b));
      lo = b, hi = b + S - 1;
    }
    for (std::size_t t = 0; t < T; ++t) {
      input[t] = s[t];
      target[t] = t >= lo && t < hi ? s[t + 1] : kIgnore;
    }
  }

 private:
  std::size_t vocab_, length_, segment_;
};

// (a + b) mod p: inputs [a, b, '='] with '=' = p, target [-, -, c]. All p^2 pairs in a fixed
// permutation (independent of the run's seed: hash64(p, 0x6d6f64)), the first
// round(train_fraction p^2) train, the rest is split into validation (first half) and test.
// Training examples cycle through the training pairs in that order, so a batch of all of them is
// full-batch training.
class ModAdd final : public RowTask {
 public:
  ModAdd(std::size_t p, double train_fraction) : p_(p) {
    std::vector<std::uint32_t> pairs(p * p);
    std::iota(pairs.begin(), pairs.end(), 0u);
    Generator gen(hash64(p, 0x6d6f64));
    for (std::size_t i = pairs.size(); i > 1; --i) std::swap(pairs[i - 1], pairs[gen.randint(i)]);
    const std::size_t n_train = std::size_t(std::llround(train_fraction * double(pairs.size())));
    const std::size_t n_val = (pairs.size() - n_train) / 2;
    train_.assign(pairs.begin(), pairs.begin() + long(n_train));
    val_.assign(pairs.begin() + long(n_train), pairs.begin() + long(n_train + n_val));
    test_.assign(pairs.begin() + long(n_train + n_val), pairs.end());
  }
  std::string name() const override { return "mod_add"; }
  std::size_t input_vocab() const override { return p_ + 1; }
  std::size_t num_classes() const override { return p_; }
  std::size_t input_length() const override { return 3; }
  std::size_t split_size(Split s) const override { return set(s).size(); }
  std::string token_label(Index id) const override { return std::size_t(id) == p_ ? "=" : std::to_string(id); }

 protected:
  void fill(Generator&, Index*, Index*) const override {}
  void fill(Split split, std::uint64_t k, Generator&, Index* input, Index* target) const override {
    const auto& s = set(split);
    const std::uint32_t pair = s[std::size_t(k % s.size())];
    const std::size_t a = pair / p_, b = pair % p_;
    input[0] = Index(a), input[1] = Index(b), input[2] = Index(p_);
    target[0] = target[1] = kIgnore;
    target[2] = Index((a + b) % p_);
  }

 private:
  const std::vector<std::uint32_t>& set(Split s) const { return s == Split::Train ? train_ : s == Split::Val ? val_ : test_; }
  std::size_t p_;
  std::vector<std::uint32_t> train_, val_, test_;
};

// Zoology's multiquery_ar (zoology/data/associative_recall.py), per example: n distinct keys from
// [1, V/2) and n distinct values from [V/2, V) as k1 v1 ... kn vn; then T - 2n tokens where key i
// sits at offset 2 g_i, the gaps g_i distinct in [0, (T - 2n) / 2) drawn with probability
// proportional to g^(a - 1) (a = 0.01: mostly near the pairs), every other token random in
// [0, V) (random_non_queries). The label of key i's query position is value i.
class Mqar final : public RowTask {
 public:
  static constexpr double kPowerA = 0.01;
  Mqar(std::size_t vocab, std::size_t length, std::size_t pairs) : vocab_(vocab), length_(length), pairs_(pairs) {
    const std::size_t space = (length - 2 * pairs) / 2;
    weights_.resize(space);
    for (std::size_t g = 0; g < space; ++g) weights_[g] = kPowerA * std::pow(double(g + 1), kPowerA - 1);
  }
  std::string name() const override { return "mqar"; }
  std::size_t input_vocab() const override { return vocab_; }
  std::size_t num_classes() const override { return vocab_; }
  std::size_t input_length() const override { return length_; }

 protected:
  void fill(Generator& gen, Index* input, Index* target) const override {
    const std::size_t n = pairs_, half = vocab_ / 2, context = 2 * n;
    std::vector<Index> keys = distinct(gen, 1, half, n), values = distinct(gen, half, vocab_, n);
    for (std::size_t i = 0; i < n; ++i) {
      input[2 * i] = keys[i], input[2 * i + 1] = values[i];
      target[2 * i] = target[2 * i + 1] = kIgnore;
    }
    for (std::size_t t = context; t < length_; ++t) input[t] = -1, target[t] = kIgnore;
    std::vector<double> w = weights_;  // weighted sampling without replacement of the gaps
    for (std::size_t i = 0; i < n; ++i) {
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      double u = gen.uniform() * total;
      std::size_t g = 0;
      while (g + 1 < w.size() && (u -= w[g]) >= 0) ++g;
      while (w[g] == 0) g = g ? g - 1 : w.size() - 1;  // rounding ran past the last free gap
      w[g] = 0;
      input[context + 2 * g] = keys[i];
      target[context + 2 * g] = values[i];
    }
    for (std::size_t t = context; t < length_; ++t)
      if (input[t] < 0) input[t] = Index(gen.randint(vocab_));
  }

 private:
  // n distinct integers from [lo, hi), in draw order (partial Fisher-Yates).
  static std::vector<Index> distinct(Generator& gen, std::size_t lo, std::size_t hi, std::size_t n) {
    std::vector<Index> pool(hi - lo);
    std::iota(pool.begin(), pool.end(), Index(lo));
    for (std::size_t i = 0; i < n; ++i) std::swap(pool[i], pool[i + gen.randint(pool.size() - i)]);
    pool.resize(n);
    return pool;
  }
  std::size_t vocab_, length_, pairs_;
  std::vector<double> weights_;
};

}  // namespace

std::unique_ptr<Task> make_vocabulary_task(const TaskOptions& o, const Tokenizer& tokenizer) {
  if (o.name == "grammar") return std::make_unique<GrammarTask>(o, &tokenizer);
  return std::make_unique<TextVocabulary>(o, tokenizer);
}

std::unique_ptr<Task> make_next_token_task(const TaskOptions& o, const Tokenizer* tokenizer) {
  if (o.name == "text") return std::make_unique<Text>(o, tokenizer);
  if (o.name == "induction") return std::make_unique<Induction>(o.vocab, o.length, o.segment);
  if (o.name == "mod_add") return std::make_unique<ModAdd>(o.vocab, o.train_fraction);
  if (o.name == "mqar") return std::make_unique<Mqar>(o.vocab, o.length, o.pairs);
  return nullptr;
}

}  // namespace qkv::data
