#pragma once
/// @file
/// The grammar task: everyday sentences generated from a lexicon and a grammar, in Chinese (a
/// token per character) or English (a token per word), each token labelled with its word and its
/// gold partners (who does what to whom). docs/tasks.md describes the grammars, their relations
/// and how to extend them. task.grammar chooses the grammar (load_grammar): v1 (the default, below,
/// written in C++), v2 (share/grammar/v2.yaml: sentences where role and position disagree: 把, 被,
/// topics first, relative clauses, two objects) or a grammar file of the user's.
///
/// In v1 a sentence is drawn as a frame (construction, subject, verb, object, their modifiers, time and
/// adverbs), checked against the lexicon's restrictions (吃 takes food, subjects are animate), and
/// realised in the task's language:
///   present  他常常吃苹果。           he often eats apples .
///   control  我爱吃苹果。             i love to eat apples .
///   past     他打碎了花瓶。           he broke the vase .
///   把       他把花瓶打碎了。         he broke the vase .
///   被       花瓶被他打碎了。         the vase was broken by him .
/// Roles are semantic: in 花瓶被他打碎了 the subject (doer) of 打 is 他 and its object is 花瓶.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::data {

/// The relations batches carry, in Batch::relations order: verb->subject, verb->object,
/// subject->verb, object->verb, modifier->head, verb->result.
const std::vector<std::string>& grammar_relation_names();

/// A sentence of the grammar, word by word, with its tokens and gold relations.
struct GrammarSentence {
  std::string text;                          ///< zh: the characters ("我爱吃苹果。"); en: the words joined by spaces ("i love to eat apples .")
  std::vector<std::string> words;            ///< W words, the final "。" / "." included
  std::vector<std::vector<Index>> partners;  ///< (R, W): the partner word of word w under relation r, -1 for none
  std::vector<Index> tokens;                 ///< (n) ids of grammar_tokenizer(language): one per character (zh) or word (en)
  std::vector<Index> token_words;            ///< (n) the word each token belongs to
  std::string construction;                  ///< the construction that writes it (grammar files: "ba", ...; v1: "")
};

/// The learners' sentences: 我爱吃苹果。猫喜欢追逐老鼠。他打碎了花瓶。 and their English twins
/// "i love to eat apples .", "the cat likes to chase mice .", "he broke the vase .". They are
/// sentences of the grammar, always in the test split: no model trains on them.
const std::vector<std::string>& learner_sentences(Language language);

/// A sentence drawn from the grammar with `gen` (any split): every sentence of the language has a
/// positive probability.
GrammarSentence random_sentence(Language language, Generator& gen);

/// The analysis of one sentence given as text. Chinese: whitespace is ignored; English: ASCII is
/// lowercased and words are separated by spaces. The final "。" / "." may be left out (the
/// analysis has it). Throws ValueError naming the sentence and the first word that is not in the
/// lexicon ("'我爱吃披萨': '披' starts no word of the zh lexicon"), or, when every word is, the
/// first word the grammar does not allow there, or the restriction it breaks ("吃 (eat) does not
/// take 花瓶 (vase) as its object").
GrammarSentence analyse_sentence(Language language, const std::string& text);

/// The split of a sentence, a function of its text alone: learner_sentences -> Test; otherwise
/// bucket b = hash(text) mod 1000 -> Test when b < 1000 test_fraction, Val when below
/// 1000 (test_fraction + val_fraction), else Train.
Split grammar_split(Language language, const std::string& text, double val_fraction, double test_fraction);

/// The vocabulary of a language (fixed by the lexicon, not by data): zh a Char tokenizer of every
/// character of the lexicon, en a Word tokenizer of every word form. Id V-1 is <unk> (unused).
const Tokenizer& grammar_tokenizer(Language language);

/// No sentence of the language has more tokens than this (a bound from the lexicon's longest words).
std::size_t grammar_max_tokens(Language language);

/// A grammar of the task, in one language: its vocabulary, its relations, its learners'
/// sentences, and how it draws and reads sentences. "v1" is the grammar above, written in C++;
/// "v2" (share/grammar/v2.yaml, compiled in) and a user's grammar file are read by one engine
/// from data (docs/tasks.md, "Grammar v2").
class Grammar {
 public:
  virtual ~Grammar();
  /// "v1", "v2", or the path of the grammar file.
  virtual const std::string& name() const = 0;
  virtual Language language() const = 0;
  /// The relations of Batch::relations, in order (v1: grammar_relation_names()).
  virtual const std::vector<std::string>& relation_names() const = 0;
  /// Sentences of the grammar that are always in the test split (never trained on).
  virtual const std::vector<std::string>& learner_sentences() const = 0;
  /// The names of its constructions (grammar files; v1: none, its constructions are C++).
  virtual std::vector<std::string> constructions() const { return {}; }
  /// A sentence drawn with `gen`: every sentence of the grammar has a positive probability.
  virtual GrammarSentence random_sentence(Generator& gen) const = 0;
  /// The analysis of a typed sentence; throws ValueError as analyse_sentence() does.
  virtual GrammarSentence analyse(const std::string& text) const = 0;
  /// The vocabulary: zh a Char tokenizer of the lexicon's characters, en a Word tokenizer of its
  /// word forms; id V-1 is <unk> (unused).
  virtual const Tokenizer& tokenizer() const = 0;
  /// No sentence has more tokens than this (a bound from the lexicon's longest words).
  virtual std::size_t max_tokens() const = 0;
  /// The split of a sentence, as grammar_split() with this grammar's learners' sentences.
  Split split(const std::string& text, double val_fraction, double test_fraction) const;
};

/// The grammar task.grammar names: "v1" (the default, built in), "v2" (share/grammar/v2.yaml,
/// compiled into qkv: no file is read), or the path of a grammar file (".yaml" or ".yml",
/// relative to the current directory). Built-in grammars are made once and shared. Throws
/// ValueError for another name, a file that cannot be read, or a file with a problem: the message
/// names the file, the line and the key, and what was expected ("my.yaml:12: nouns.猫.classes:
/// unknown class 'beest' ...; did you mean 'beast'?").
std::shared_ptr<const Grammar> load_grammar(const std::string& grammar, Language language);
/// A grammar from the text of a grammar file; `file` names it in messages.
std::shared_ptr<const Grammar> parse_grammar(const std::string& text, const std::string& file, Language language);
/// The names of the built-in grammars: v1, v2.
const std::vector<std::string>& builtin_grammars();
/// The text of a built-in grammar file ("v2": share/grammar/v2.yaml as compiled in); throws
/// ValueError for another name (v1 is C++, not a file).
const std::string& builtin_grammar_text(const std::string& name);

/// The grammar task (TaskOptions: grammar, language, length, objective, mask_rate, val_fraction,
/// test_fraction). Rows of T = length tokens hold whole sentences drawn from the row's split, as
/// many as fit, then padding. Ids: [0, V) the tokenizer's, pad = V, mask = V + 1 (masked only).
///   causal  target[t] = input[t + 1] while t + 1 is a sentence token, kIgnore from the last one on
///   masked  mask_tokens over the sentence tokens (padding is never chosen), as the text task
/// Batch::words and Batch::relations give every token's word and partners (-1 at padding); a
/// masked token keeps its relations.
class GrammarTask final : public Task {
 public:
  /// Throws OptionError for bad options, ValueError for a grammar file with a problem; with
  /// `stored` (a checkpoint's vocabulary), ValueError when it is not this lexicon's.
  explicit GrammarTask(const TaskOptions& options, const Tokenizer* stored = nullptr);
  std::string name() const override { return "grammar"; }
  std::size_t input_vocab() const override { return tokenizer_.size() + (masked() ? 2 : 1); }
  std::size_t num_classes() const override { return tokenizer_.size(); }
  std::size_t input_length() const override { return length_; }
  bool next_token() const override { return !masked(); }
  bool masked() const override { return objective_ == Objective::Masked; }
  Index mask_token() const override { return masked() ? Index(tokenizer_.size()) + 1 : -1; }
  Index pad_token() const override { return Index(tokenizer_.size()); }
  const Tokenizer* tokenizer() const override { return &tokenizer_; }
  std::string token_label(Index id) const override;
  const std::vector<std::string>& relation_names() const override { return grammar_->relation_names(); }
  Batch examples(std::uint64_t seed, std::uint64_t first, std::size_t count) const override {
    return examples(Split::Train, seed, first, count);
  }
  Batch examples(Split split, std::uint64_t seed, std::uint64_t first, std::size_t count) const override;

  /// analyse(text) without the padding after the last sentence (the encoder attends no pad key,
  /// a decoder's queries come before them: what the row shows does not change); with a
  /// `mask_text` in a masked task's text, the tokens with mask ids instead and the final "。" /
  /// "." added when missing, without words and relations (a sentence with a hole is not analysed).
  Batch text_row(const std::string& text, const std::string& what, const std::string& mask_text = kMaskText) const override;

  Language language() const { return language_; }
  const Grammar& grammar() const { return *grammar_; }
  /// One row (1, T) holding the sentences of `text` (each ending in "。" / "."; the last may leave
  /// it out) as examples() would: tokens, padding, words and relations; targets as the objective
  /// gives them unmasked (causal: next tokens; masked: kIgnore everywhere, nothing is masked).
  /// Throws ValueError (analyse_sentence's, or the sentences need more than T tokens).
  Batch analyse(const std::string& text) const;

 private:
  Language language_;
  std::shared_ptr<const Grammar> grammar_;
  Objective objective_;
  std::size_t length_;
  double mask_rate_, val_fraction_, test_fraction_;
  Tokenizer tokenizer_;
};

}  // namespace qkv::data
