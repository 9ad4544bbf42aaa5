// The grammar task: sentences with known roles. Determinism, the split (no held-out sentence ever
// trains; the learners' sentences are in the language and in test), hand-checked relations,
// the size of the language, packing and padding, the masked objective, and the errors.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "qkv/config/config.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::data {
namespace {

TaskOptions grammar(Language language, Objective objective = Objective::Causal, std::size_t length = 32) {
  TaskOptions o;
  o.name = "grammar";
  o.language = language;
  o.objective = objective;
  o.length = length;
  return o;
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.inputs == b.inputs && a.targets == b.targets && a.words == b.words && a.relations == b.relations;
}

// The sentences of every row of `b` (the tokens before padding, cut after each full stop), as text.
std::vector<std::string> sentences_of(const GrammarTask& task, const Batch& b, const IndexArray& tokens) {
  const std::size_t T = task.input_length();
  const Tokenizer& tk = *task.tokenizer();
  const Index stop = tk.encode(std::string_view(task.language() == Language::Zh ? "。" : "."), false, "t")[0];
  std::vector<std::string> out;
  for (std::size_t r = 0; r < b.size(); ++r) {
    std::vector<Index> s;
    for (std::size_t t = 0; t < T && tokens(r, t) != task.pad_token(); ++t) {
      s.push_back(tokens(r, t));
      if (tokens(r, t) == stop) out.push_back(tk.decode(s)), s.clear();
    }
    CHECK(s.empty());  // every row holds whole sentences
  }
  return out;
}

// partners[r] of an analysed sentence, by relation name.
std::vector<Index> relation(const GrammarSentence& s, const std::string& name) {
  const auto& names = grammar_relation_names();
  return s.partners[std::size_t(std::find(names.begin(), names.end(), name) - names.begin())];
}

}  // namespace

TEST_CASE("grammar: examples are a pure function of (seed, index), for any thread count") {
  for (Language l : {Language::Zh, Language::En})
    for (Objective obj : {Objective::Causal, Objective::Masked}) {
      CAPTURE(std::string(name(l)));
      CAPTURE(std::string(name(obj)));
      GrammarTask task(grammar(l, obj));
      const Batch all = task.examples(Split::Train, 11, 0, 8), part = task.examples(Split::Train, 11, 5, 3);
      CHECK(same_batch(task.examples(Split::Train, 11, 0, 8), all));
      CHECK(same_batch(part, rows(all, 5, 8)));
      CHECK(all.relations.shape() == Shape{8, 6, 32});
      CHECK(all.words.shape() == Shape{8, 32});
      CHECK_FALSE(task.examples(Split::Train, 12, 0, 8).inputs == all.inputs);
      CHECK_FALSE(task.examples(Split::Val, 11, 0, 8).inputs == all.inputs);
      const int saved = num_threads();
      set_num_threads(1);
      const Batch one = task.examples(Split::Val, 2, 100, 200);
      set_num_threads(2);
      const Batch two = task.examples(Split::Val, 2, 100, 200);
      set_num_threads(saved);
      CHECK(same_batch(one, two));
    }
}

TEST_CASE("grammar: no validation or test sentence is in training, and the learners' sentences are only in test") {
  for (Language l : {Language::Zh, Language::En}) {
    CAPTURE(std::string(name(l)));
    GrammarTask task(grammar(l));
    const auto& learners = learner_sentences(l);
    for (const std::string& s : learners) {
      CAPTURE(s);
      CHECK(analyse_sentence(l, s).text == s);  // in the language, written so
      CHECK(grammar_split(l, s, 0.05, 0.05) == Split::Test);
    }
    std::map<Split, std::set<std::string>> seen;
    for (Split split : {Split::Train, Split::Val, Split::Test}) {
      const Batch b = task.examples(split, 7, 0, split == Split::Train ? 6000 : 1500);
      for (const std::string& s : sentences_of(task, b, b.inputs)) {
        REQUIRE(grammar_split(l, s, 0.05, 0.05) == split);
        seen[split].insert(s);
      }
    }
    for (const std::string& s : learners) CHECK(seen[Split::Train].count(s) == 0);
    for (const std::string& s : seen[Split::Val]) CHECK(seen[Split::Train].count(s) == 0);
    for (const std::string& s : seen[Split::Test]) CHECK(seen[Split::Train].count(s) == 0);
    CHECK(seen[Split::Train].size() > 10000);
    // About 5% of the sentences fall in each held-out split.
    Generator gen(3);
    std::map<Split, int> count;
    for (int i = 0; i < 20000; ++i) ++count[grammar_split(l, random_sentence(l, gen).text, 0.05, 0.05)];
    CHECK(count[Split::Val] == doctest::Approx(1000).epsilon(0.15));
    CHECK(count[Split::Test] == doctest::Approx(1000).epsilon(0.15));
  }
}

TEST_CASE("grammar: the language is too large to memorise: tens of thousands of distinct sentences") {
  for (Language l : {Language::Zh, Language::En}) {
    CAPTURE(std::string(name(l)));
    Generator gen(1);
    std::set<std::string> distinct;
    for (int i = 0; i < 60000; ++i) distinct.insert(random_sentence(l, gen).text);
    CHECK(distinct.size() > 40000);
  }
}

TEST_CASE("grammar: relations of hand-checked sentences (roles are semantic, also in 被 sentences)") {
  using V = std::vector<Index>;
  using W = std::vector<std::string>;
  const Index _ = -1;
  {
    const GrammarSentence s = analyse_sentence(Language::Zh, "他打碎了花瓶");
    CHECK(s.words == W{"他", "打", "碎", "了", "花瓶", "。"});
    CHECK(relation(s, "verb->subject") == V{_, 0, _, _, _, _});
    CHECK(relation(s, "verb->object") == V{_, 4, _, _, _, _});
    CHECK(relation(s, "subject->verb") == V{1, _, _, _, _, _});
    CHECK(relation(s, "object->verb") == V{_, _, _, _, 1, _});
    CHECK(relation(s, "verb->result") == V{_, 2, _, _, _, _});
    CHECK(relation(s, "modifier->head") == V{_, _, _, _, _, _});
    CHECK(s.token_words == V{0, 1, 2, 3, 4, 4, 5});  // 花瓶 is two tokens of word 4
  }
  {
    const GrammarSentence s = analyse_sentence(Language::Zh, "花瓶被他打碎了。");
    CHECK(s.words == W{"花瓶", "被", "他", "打", "碎", "了", "。"});
    CHECK(relation(s, "verb->subject") == V{_, _, _, 2, _, _, _});  // the doer is 他
    CHECK(relation(s, "verb->object") == V{_, _, _, 0, _, _, _});   // what was broken: 花瓶
    CHECK(relation(s, "subject->verb") == V{_, _, 3, _, _, _, _});
    CHECK(relation(s, "object->verb") == V{3, _, _, _, _, _, _});
    CHECK(relation(s, "verb->result") == V{_, _, _, 4, _, _, _});
  }
  {
    const GrammarSentence s = analyse_sentence(Language::Zh, "他把花瓶打碎了");
    CHECK(s.words == W{"他", "把", "花瓶", "打", "碎", "了", "。"});
    CHECK(relation(s, "verb->subject") == V{_, _, _, 0, _, _, _});
    CHECK(relation(s, "verb->object") == V{_, _, _, 2, _, _, _});
    CHECK(relation(s, "subject->verb") == V{3, _, _, _, _, _, _});
    CHECK(relation(s, "object->verb") == V{_, _, 3, _, _, _, _});
  }
  {
    const GrammarSentence s = analyse_sentence(Language::Zh, "我的猫吃鱼");
    CHECK(s.words == W{"我", "的", "猫", "吃", "鱼", "。"});
    CHECK(relation(s, "modifier->head") == V{2, _, _, _, _, _});
    CHECK(relation(s, "verb->subject") == V{_, _, _, 2, _, _});
    CHECK(relation(s, "verb->object") == V{_, _, _, 4, _, _});
    CHECK(relation(s, "subject->verb") == V{_, _, 3, _, _, _});
  }
  {
    // 爱吃: 爱's object is the event, headed by 吃; 我 is the subject of both verbs.
    const GrammarSentence s = analyse_sentence(Language::Zh, "我爱吃苹果");
    CHECK(s.words == W{"我", "爱", "吃", "苹果", "。"});
    CHECK(relation(s, "verb->subject") == V{_, 0, 0, _, _});
    CHECK(relation(s, "verb->object") == V{_, 2, 3, _, _});
    CHECK(relation(s, "subject->verb") == V{1, _, _, _, _});
    CHECK(relation(s, "object->verb") == V{_, _, _, 2, _});
  }
  {
    const GrammarSentence s = analyse_sentence(Language::En, "The vase was broken by him.");
    CHECK(s.text == "the vase was broken by him .");
    CHECK(relation(s, "verb->subject") == V{_, _, _, 5, _, _, _});
    CHECK(relation(s, "verb->object") == V{_, _, _, 1, _, _, _});
    CHECK(relation(s, "verb->result") == V{_, _, _, _, _, _, _});  // English breaks without a result word
  }
  {
    const GrammarSentence s = analyse_sentence(Language::En, "she washed my clothes clean");
    CHECK(s.words == W{"she", "washed", "my", "clothes", "clean", "."});
    CHECK(relation(s, "verb->result") == V{_, 4, _, _, _, _});
    CHECK(relation(s, "modifier->head") == V{_, _, 3, _, _, _});
  }
}

TEST_CASE("grammar: every drawn sentence is analysed back to its own words and relations") {
  for (Language l : {Language::Zh, Language::En}) {
    CAPTURE(std::string(name(l)));
    Generator gen(5);
    for (int i = 0; i < 1000; ++i) {
      const GrammarSentence s = random_sentence(l, gen);
      CAPTURE(s.text);
      const GrammarSentence a = analyse_sentence(l, s.text);
      CHECK(a.words == s.words);
      CHECK(a.partners == s.partners);
      CHECK(a.tokens == s.tokens);
    }
  }
}

TEST_CASE("grammar: rows are whole sentences then padding, and causal targets stop at the last sentence token") {
  GrammarTask task(grammar(Language::Zh));
  const std::size_t T = 32, R = 6;
  const Index pad = task.pad_token();
  CHECK(pad == Index(task.tokenizer()->size()));
  CHECK(task.input_vocab() == task.tokenizer()->size() + 1);
  CHECK(task.num_classes() == task.tokenizer()->size());
  CHECK(task.mask_token() == -1);
  CHECK(task.next_token());
  CHECK(task.token_label(pad) == "<pad>");
  const Batch b = task.examples(Split::Train, 3, 0, 200);
  std::size_t padded = 0;
  for (std::size_t r = 0; r < 200; ++r) {
    std::size_t n = 0;
    while (n < T && b.inputs(r, n) != pad) ++n;
    REQUIRE(n > 0);
    CHECK(T - n < grammar_max_tokens(Language::Zh));  // the next sentence would not have fitted
    padded += T - n;
    for (std::size_t t = 0; t < T; ++t) {
      if (t < n) {
        CHECK(b.words(r, t) >= 0);
        CHECK(b.targets(r, t) == (t + 1 < n ? b.inputs(r, t + 1) : kIgnore));
      } else {
        CHECK(b.inputs(r, t) == pad);
        CHECK(b.targets(r, t) == kIgnore);
        CHECK(b.words(r, t) == -1);
        for (std::size_t k = 0; k < R; ++k) CHECK(b.relations(r, k, t) == -1);
      }
    }
    // Word indices count up through the row, one sentence after another.
    for (std::size_t t = 1; t < n; ++t) CHECK((b.words(r, t) == b.words(r, t - 1) || b.words(r, t) == b.words(r, t - 1) + 1));
  }
  CHECK(padded > 0);
  // A row analysed from text is packed the same way.
  const Batch a = task.analyse("我爱吃苹果。 他打碎了花瓶");
  CHECK(a.inputs.shape() == Shape{1, 32});
  const std::vector<Index> words = {0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9, 9, 10, -1};
  for (std::size_t t = 0; t < words.size(); ++t) CHECK(a.words(0, t) == words[t]);
  CHECK(a.relations(0, 0, 7) == 5);   // verb->subject at 打: 他, word 5 of the row
  CHECK(a.relations(0, 3, 10) == 6);  // object->verb at 花 and 瓶 (both tokens of 花瓶): 打
  CHECK(a.relations(0, 3, 11) == 6);
  CHECK(a.inputs(0, 13) == pad);
  CHECK(a.targets(0, 12) == kIgnore);
  CHECK(a.targets(0, 0) == a.inputs(0, 1));
}

TEST_CASE("grammar: masked objective - exactly round(rate n) sentence tokens chosen, 80/10/10, relations kept") {
  for (Language l : {Language::Zh, Language::En}) {
    CAPTURE(std::string(name(l)));
    GrammarTask causal(grammar(l)), masked(grammar(l, Objective::Masked));
    CHECK(masked.masked());
    CHECK_FALSE(masked.next_token());
    const Index mask = masked.mask_token(), pad = masked.pad_token();
    CHECK(mask == pad + 1);
    CHECK(masked.input_vocab() == std::size_t(mask) + 1);
    CHECK(masked.num_classes() == causal.num_classes());
    CHECK(masked.token_label(mask) == "[MASK]");
    const std::size_t N = 3000, T = 32;
    // The sentences come first from each example's generator, so both objectives hold the same ones.
    const Batch c = causal.examples(Split::Train, 9, 0, N), m = masked.examples(Split::Train, 9, 0, N);
    CHECK(m.words == c.words);
    CHECK(m.relations == c.relations);
    std::size_t chosen = 0, as_mask = 0, kept = 0, other = 0;
    for (std::size_t r = 0; r < N; ++r) {
      std::size_t n = 0, here = 0;
      while (n < T && c.inputs(r, n) != pad) ++n;
      for (std::size_t t = 0; t < T; ++t) {
        const Index original = c.inputs(r, t), in = m.inputs(r, t), y = m.targets(r, t);
        if (y == kIgnore) {
          CHECK(in == original);  // not chosen: untouched (padding included)
          continue;
        }
        REQUIRE(t < n);  // padding is never chosen
        CHECK(y == original);
        ++here;
        if (in == mask) {
          ++as_mask;
        } else if (in == original) {
          ++kept;
        } else {
          ++other;
          CHECK((in >= 0 && in < Index(masked.tokenizer()->size()) - 1));  // a real token, not <unk>
        }
      }
      CHECK(here == std::max<std::size_t>(1, std::size_t(std::llround(0.15 * double(n)))));
      chosen += here;
    }
    const double k = double(chosen);
    CHECK(double(as_mask) / k == doctest::Approx(0.8).epsilon(0.03));
    CHECK(double(kept) / k == doctest::Approx(0.1 + 0.1 / double(masked.tokenizer()->size())).epsilon(0.15));
    CHECK(double(other) / k == doctest::Approx(0.1).epsilon(0.15));
  }
}

TEST_CASE("grammar: analyse names the first word not in the lexicon, or the rule a sentence breaks") {
  auto error = [](Language l, const std::string& text) {
    try {
      analyse_sentence(l, text);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error(Language::Zh, "我爱吃披萨") == "'我爱吃披萨': '披' starts no word of the zh lexicon");
  CHECK(error(Language::En, "i love to eat pizza") == "'i love to eat pizza': 'pizza' is not a word of the en lexicon");
  CHECK(error(Language::Zh, "我爱吃花瓶") ==
        "'我爱吃花瓶' is not a sentence of the zh grammar: 吃 (eat) does not take 花瓶 (vase) as its object");
  CHECK(error(Language::Zh, "他打了花瓶") == "'他打了花瓶' is not a sentence of the zh grammar: 打 needs a result complement");
  CHECK(error(Language::En, "he break the vase") ==
        "'he break the vase' is not a sentence of the en grammar: no sentence of the grammar has 'break' after 'he'");
  CHECK(error(Language::Zh, "猫喜欢追逐老鼠了") ==
        "'猫喜欢追逐老鼠了' is not a sentence of the zh grammar: no sentence of the grammar has '了' after '猫喜欢追逐老鼠'");
  CHECK(error(Language::Zh, "我爱吃[MASK]") == "'我爱吃[MASK]': '[' starts no word of the zh lexicon");
  GrammarTask task(grammar(Language::Zh, Objective::Causal, 26));
  CHECK_THROWS_WITH_AS(task.analyse("我爱吃苹果。我爱吃苹果。我爱吃苹果。我爱吃苹果。我爱吃苹果。"),
                       doctest::Contains("has 30 tokens, more than task.length = 26"), ValueError);
}

TEST_CASE("grammar: bad options name the key") {
  auto fails = [](TaskOptions o, const std::string& message) {
    CHECK_THROWS_WITH_AS(make_task(o), doctest::Contains(message.c_str()), OptionError);
  };
  TaskOptions o = grammar(Language::Zh);
  o.length = 12;
  fails(o, "length: a row holds whole sentences");
  o = grammar(Language::Zh);
  o.val_fraction = 0;
  fails(o, "val_fraction: expected a number in [0.001, 1)");
  o = grammar(Language::Zh, Objective::Masked);
  o.mask_rate = 1;
  fails(o, "mask_rate: expected a number in (0, 1)");
  o.mask_rate = 0;
  fails(o, "mask_rate: expected a number in (0, 1)");
  o = TaskOptions();
  o.objective = Objective::Masked;
  fails(o, "objective: the masked objective is for the text and grammar tasks, found task 'sort'");
  o = TaskOptions();
  o.name = "text", o.path = "x", o.tokenizer = TokenizerKind::Word;
  fails(o, "tokenizer: the text task reads a corpus as byte or char tokens");
  // In a config file, the key as written.
  using config::parse_config;
  CHECK_THROWS_WITH_AS(parse_config("task: {name: sort, objective: masked}\n", "c.yaml"),
                       doctest::Contains("c.yaml:1: task.objective: the masked objective is for the text and grammar tasks"),
                       config::ConfigError);
  CHECK_THROWS_WITH_AS(parse_config("task: {name: grammar, language: fr}\n", "c.yaml"),
                       doctest::Contains("task.language: expected one of zh, en, found 'fr'"), config::ConfigError);
  CHECK_THROWS_WITH_AS(parse_config("task: {name: grammar, objective: bert}\n", "c.yaml"),
                       doctest::Contains("task.objective: expected one of causal, masked, found 'bert'"), config::ConfigError);
  CHECK_THROWS_WITH_AS(parse_config("task: {name: grammar, mask_rate: 1.5}\n", "c.yaml"),
                       doctest::Contains("task.mask_rate: expected a number in (0, 1)"), config::ConfigError);
  CHECK_NOTHROW(parse_config("task: {name: grammar, language: en, objective: masked}\n", "c.yaml"));
}

TEST_CASE("grammar: the vocabulary is the lexicon's, and a checkpoint's vocabulary rebuilds the same task") {
  for (Language l : {Language::Zh, Language::En}) {
    CAPTURE(std::string(name(l)));
    const Tokenizer& tk = grammar_tokenizer(l);
    CHECK(tk.kind() == (l == Language::Zh ? TokenizerKind::Char : TokenizerKind::Word));
    // What a checkpoint stores and reads back.
    const Tokenizer stored = Tokenizer::from_vocab(tk.kind(), tk.to_vocab());
    const TaskOptions o = grammar(l, Objective::Masked);
    auto task = make_vocabulary_task(o, stored);
    CHECK(task->name() == "grammar");
    CHECK(task->masked());
    CHECK(task->input_vocab() == tk.size() + 2);
    CHECK(task->relation_names() == grammar_relation_names());
    CHECK(same_batch(task->examples(Split::Val, 1, 0, 4), GrammarTask(o).examples(Split::Val, 1, 0, 4)));
  }
  // docs/tasks.md and docs/config.md state these sizes: a change to the lexicon updates them.
  CHECK(grammar_tokenizer(Language::Zh).size() == 153);
  CHECK(grammar_tokenizer(Language::En).size() == 246);
  CHECK(grammar_max_tokens(Language::Zh) == 26);
  CHECK(grammar_max_tokens(Language::En) == 17);
  const Tokenizer other = Tokenizer::chars(U"我爱吃苹果。");
  CHECK_THROWS_WITH_AS(make_vocabulary_task(grammar(Language::Zh), other),
                       doctest::Contains("the checkpoint's vocabulary (char, 7 tokens) is not the zh lexicon's"), ValueError);
  CHECK_THROWS_WITH_AS(make_task(grammar(Language::En), &grammar_tokenizer(Language::Zh)),
                       doctest::Contains("is not the en lexicon's (word,"), ValueError);
}

TEST_CASE("grammar: tasks without relations carry empty words and relations through concat and rows") {
  TaskOptions o;
  auto sort = make_task(o);
  CHECK(sort->relation_names().empty());
  CHECK(sort->pad_token() == -1);
  const Batch b = sort->examples(1, 0, 4);
  CHECK(b.words.shape() == Shape{0});
  CHECK(b.relations.shape() == Shape{0});
  const Batch both = concat(b, sort->examples(1, 4, 2));
  CHECK(both.size() == 6);
  CHECK(both.relations.shape() == Shape{0});
  CHECK(rows(both, 4, 6).inputs == sort->examples(1, 4, 2).inputs);
  GrammarTask g(grammar(Language::En));
  const Batch x = g.examples(Split::Train, 1, 0, 3), y = g.examples(Split::Train, 1, 3, 2);
  CHECK(same_batch(concat(x, y), g.examples(Split::Train, 1, 0, 5)));
  Dataset d(std::make_shared<GrammarTask>(grammar(Language::En)), 4, 8, 3);
  CHECK(d.eval_set().relations.shape() == Shape{8, 6, 32});
  CHECK(same_batch(d.next_train(5), concat(d.train_examples(0, 3), d.train_examples(0, 2))));
}

}  // namespace qkv::data
