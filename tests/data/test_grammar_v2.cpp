// Grammar v2 (share/grammar/v2.yaml, read by one engine) and the grammar files: every construction
// writes sentences that read back to the same words and relations; the learners' sentences are
// in the grammar and in test; role and position disagree (the best fixed offset stays low); a bad
// file is told its file, line, key and what was expected; v1 is unchanged; the config key.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "qkv/config/config.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/interp/head_scores.hpp"
#include "test_paths.hpp"

namespace qkv::data {
namespace {

TaskOptions v2(Language language, Objective objective = Objective::Masked, std::size_t length = 64) {
  TaskOptions o;
  o.name = "grammar";
  o.grammar = "v2";
  o.language = language;
  o.objective = objective;
  o.length = length;
  return o;
}

std::vector<Index> relation(const GrammarSentence& s, const Grammar& g, const std::string& name) {
  const auto& names = g.relation_names();
  return s.partners[std::size_t(std::find(names.begin(), names.end(), name) - names.begin())];
}

// The v2 file with `from` replaced by `to` (once; it must occur), read as `file`: the error.
std::string error_of(const std::string& from, const std::string& to, Language language = Language::Zh) {
  std::string text = builtin_grammar_text("v2");
  const std::size_t at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "the v2 file no longer holds: ", from);
  text.replace(at, from.size(), to);
  try {
    parse_grammar(text, "bad.yaml", language);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

// "bad.yaml:<line>: " with the line of `needle` in the v2 file.
std::string at_line_of(const std::string& needle) {
  const std::string& text = builtin_grammar_text("v2");
  const std::size_t at = text.find(needle);
  REQUIRE(at != std::string::npos);
  return "bad.yaml:" + std::to_string(1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(at), '\n')) + ": ";
}

std::uint64_t fnv(std::uint64_t h, const IndexArray& a) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::uint64_t x = std::uint64_t(a.data()[i]);
    for (int b = 0; b < 8; ++b, x >>= 8) h = (h ^ (x & 255)) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace

TEST_CASE("grammar v2: every construction is drawn, and every sentence reads back to its words and relations") {
  for (Language l : {Language::Zh, Language::En}) {
    CAPTURE(std::string(name(l)));
    const auto g = load_grammar("v2", l);
    const std::vector<std::string> all = g->constructions();
    CHECK(all.size() >= 20);
    std::map<std::string, int> seen;
    Generator gen(5);
    for (int i = 0; i < 2000; ++i) {
      const GrammarSentence s = g->random_sentence(gen);
      CAPTURE(s.text);
      ++seen[s.construction];
      CHECK(s.tokens.size() <= g->max_tokens());
      const GrammarSentence a = g->analyse(s.text);
      CHECK(a.text == s.text);
      CHECK(a.words == s.words);
      CHECK(a.partners == s.partners);
      CHECK(a.tokens == s.tokens);
      CHECK(a.token_words == s.token_words);
    }
    for (const std::string& c : all) {
      CAPTURE(c);
      CHECK(seen[c] >= 20);
    }
    CHECK(g->relation_names() == std::vector<std::string>{"verb->subject", "verb->object", "subject->verb", "object->verb",
                                                          "modifier->head", "verb->result", "verb->recipient"});
  }
}

TEST_CASE("grammar v2: the learners' sentences are sentences of v2, always in test, with hand-checked relations") {
  using V = std::vector<Index>;
  using W = std::vector<std::string>;
  const Index _ = -1;
  const auto zh = load_grammar("v2", Language::Zh), en = load_grammar("v2", Language::En);
  const W learners = {"我爱吃苹果。", "猫喜欢追逐老鼠。", "他打碎了花瓶。", "他把花瓶打碎了。", "花瓶被他打碎了。",
                      "苹果，我最爱吃。", "昨天晚上他打碎了花瓶。", "追老鼠的猫跑得很快。", "妈妈给了我一个苹果。"};
  CHECK(zh->learner_sentences() == learners);
  CHECK(en->learner_sentences().size() == 8);  // 他打碎了花瓶 and 他把花瓶打碎了 are both "he broke the vase ."
  for (const auto& g : {zh, en})
    for (const std::string& s : g->learner_sentences()) {
      CAPTURE(s);
      CHECK(g->analyse(s).text == s);
      CHECK(g->split(s, 0.05, 0.05) == Split::Test);
      CHECK(g->split(s, 0.001, 0.001) == Split::Test);
    }
  {  // 把: the object before the verb; 被: the doer after 被, the thing done to first.
    const GrammarSentence s = zh->analyse("他把花瓶打碎了");
    CHECK(s.words == W{"他", "把", "花瓶", "打", "碎", "了", "。"});
    CHECK(relation(s, *zh, "verb->subject") == V{_, _, _, 0, _, _, _});
    CHECK(relation(s, *zh, "verb->object") == V{_, _, _, 2, _, _, _});
    CHECK(relation(s, *zh, "verb->result") == V{_, _, _, 4, _, _, _});
    const GrammarSentence b = zh->analyse("花瓶被他打碎了。");
    CHECK(relation(b, *zh, "verb->subject") == V{_, _, _, 2, _, _, _});
    CHECK(relation(b, *zh, "verb->object") == V{_, _, _, 0, _, _, _});
    CHECK(relation(b, *zh, "object->verb") == V{3, _, _, _, _, _, _});
  }
  {  // The topic first: 吃's object is 苹果, six tokens before it; 爱's object is the event (吃).
    const GrammarSentence s = zh->analyse("苹果，我最爱吃。");
    CHECK(s.words == W{"苹果", "，", "我", "最", "爱", "吃", "。"});
    CHECK(relation(s, *zh, "verb->subject") == V{_, _, _, _, 2, 2, _});
    CHECK(relation(s, *zh, "verb->object") == V{_, _, _, _, 5, 0, _});
    CHECK(relation(s, *zh, "subject->verb") == V{_, _, 4, _, _, _, _});
    CHECK(relation(s, *zh, "object->verb") == V{5, _, _, _, _, _, _});
  }
  {  // A relative clause: 猫 is the doer of both verbs; 追 modifies 猫; 跑's result is 快.
    const GrammarSentence s = zh->analyse("追老鼠的猫跑得很快");
    CHECK(s.words == W{"追", "老鼠", "的", "猫", "跑", "得", "很", "快", "。"});
    CHECK(relation(s, *zh, "verb->subject") == V{3, _, _, _, 3, _, _, _, _});
    CHECK(relation(s, *zh, "verb->object") == V{1, _, _, _, _, _, _, _, _});
    CHECK(relation(s, *zh, "subject->verb") == V{_, _, _, 4, _, _, _, _, _});
    CHECK(relation(s, *zh, "modifier->head") == V{3, _, _, _, _, _, _, _, _});
    CHECK(relation(s, *zh, "verb->result") == V{_, _, _, _, 7, _, _, _, _});
    const GrammarSentence e = en->analyse("The cat that chases mice runs very fast.");
    CHECK(e.words == W{"the", "cat", "that", "chases", "mice", "runs", "very", "fast", "."});
    CHECK(relation(e, *en, "verb->subject") == V{_, _, _, 1, _, 1, _, _, _});
    CHECK(relation(e, *en, "modifier->head") == V{_, _, _, 1, _, _, _, _, _});
    CHECK(relation(e, *en, "verb->result") == V{_, _, _, _, _, 7, _, _, _});
  }
  {  // Two objects: 我 receives, 苹果 is given; 一 and 个 modify 苹果.
    const GrammarSentence s = zh->analyse("妈妈给了我一个苹果");
    CHECK(s.words == W{"妈妈", "给", "了", "我", "一", "个", "苹果", "。"});
    CHECK(relation(s, *zh, "verb->recipient") == V{_, 3, _, _, _, _, _, _});
    CHECK(relation(s, *zh, "verb->object") == V{_, 6, _, _, _, _, _, _});
    CHECK(relation(s, *zh, "modifier->head") == V{_, _, _, _, 6, 6, _, _});
    const GrammarSentence e = en->analyse("mom gave me an apple");
    CHECK(e.words == W{"mom", "gave", "me", "an", "apple", "."});
    CHECK(relation(e, *en, "verb->recipient") == V{_, 2, _, _, _, _});
    CHECK(relation(e, *en, "modifier->head") == V{_, _, _, 4, _, _});
  }
  {  // Modifiers of every length: 那只黑色的小猫 "that small black cat"; 我最好的朋友 "my best friend".
    const GrammarSentence s = zh->analyse("那只黑色的小猫被我最好的朋友抱了");
    CHECK(s.words == W{"那", "只", "黑色", "的", "小", "猫", "被", "我", "最好", "的", "朋友", "抱", "了", "。"});
    CHECK(relation(s, *zh, "modifier->head") == V{5, 5, 5, _, 5, _, _, 10, 10, _, _, _, _, _});
    CHECK(relation(s, *zh, "verb->subject")[11] == 10);
    CHECK(relation(s, *zh, "verb->object")[11] == 5);
    const GrammarSentence e = en->analyse("that small black cat was hugged by my best friend");
    CHECK(relation(e, *en, "modifier->head") == V{3, 3, 3, _, _, _, _, 9, 9, _, _});
  }
  {  // A time word first, and 得 with a state: 洗 -> 干净 three tokens on.
    const GrammarSentence s = zh->analyse("昨天晚上他打碎了花瓶");
    CHECK(relation(s, *zh, "verb->subject") == V{_, _, 1, _, _, _, _});
    const GrammarSentence w = zh->analyse("他把衣服洗得很干净");
    CHECK(relation(w, *zh, "verb->result") == V{_, _, _, 6, _, _, _, _});
    CHECK(en->analyse("last night he broke the vase").text == "last night he broke the vase .");
  }
}

TEST_CASE("grammar v2: role and position disagree - the best fixed offset of each relation stays low (fixed seed)") {
  // The bounds docs/tasks.md and experiments/grammar_v2/offsets.md state: the who/what relations
  // at most 0.30, the result and the recipient 0.40 (they sit near their verb in both
  // languages); modifiers come right before their noun (stated, not bounded low).
  const std::map<std::string, double> bound = {{"verb->subject", 0.30}, {"verb->object", 0.30}, {"subject->verb", 0.30},
                                               {"object->verb", 0.30},  {"verb->result", 0.40}, {"verb->recipient", 0.40},
                                               {"modifier->head", 0.65}};
  for (Language l : {Language::Zh, Language::En}) {
    CAPTURE(std::string(name(l)));
    auto task = std::make_shared<const GrammarTask>(v2(l, Objective::Masked, l == Language::Zh ? 64 : 32));
    const Dataset d(task, 1, 1024);
    const auto base = interp::role_baselines(*task, d.test_set());
    REQUIRE(base.size() == 7);
    for (std::size_t r = 0; r < base.size(); ++r) {
      CAPTURE(task->relation_names()[r]);
      CHECK(base[r].count > 150);
      CHECK(base[r].share <= bound.at(task->relation_names()[r]));
    }
  }
  // v1, for contrast: a fixed offset answers most of them (the reason for v2).
  TaskOptions o;
  o.name = "grammar";
  auto v1 = std::make_shared<const GrammarTask>(o);
  const auto base = interp::role_baselines(*v1, Dataset(v1, 1, 512).test_set());
  CHECK(base[0].share > 0.5);  // verb->subject
  CHECK(base[5].share > 0.95);  // verb->result: always the next token
}

TEST_CASE("grammar v2: splits are a function of the text, stable, and no held-out sentence trains") {
  const auto g = load_grammar("v2", Language::Zh);
  // The same hash as v1 (FNV-1a, hash64, mod 1000), a function of the text alone: these never move.
  const std::vector<std::pair<std::string, Split>> pinned = {
      {"学生已经给小丽买了茶。", Split::Test},
      {"爷爷也修了我刚才拿的白色的自行车。", Split::Train},
      {"他们已经很快地修了那扇门。", Split::Val},
      {"爸爸也已经把那条新鲜的鱼给了她。", Split::Val},
      {"grandpa also already wiped the new cup clean .", Split::Test},
      {"the student already bought the tea for xiaoli .", Split::Train},
      {"grandma also washed this clean hat and then bought this beautiful ball .", Split::Val}};
  for (auto& [text, split] : pinned) {
    CAPTURE(text);
    const Language l = text[0] == 'g' || text[0] == 't' ? Language::En : Language::Zh;
    CHECK(load_grammar("v2", l)->split(text, 0.05, 0.05) == split);
    CHECK(grammar_split(l, text, 0.05, 0.05) == split);  // v1's function of the text
    CHECK(load_grammar("v2", l)->analyse(text).text == text);  // sentences of v2
  }
  std::map<Split, int> count;
  Generator gen(3);
  for (int i = 0; i < 20000; ++i) ++count[g->split(g->random_sentence(gen).text, 0.05, 0.05)];
  CHECK(count[Split::Val] == doctest::Approx(1000).epsilon(0.15));
  CHECK(count[Split::Test] == doctest::Approx(1000).epsilon(0.15));
  GrammarTask task(v2(Language::Zh));
  const Tokenizer& tk = *task.tokenizer();
  const Index stop = tk.encode(std::string_view("。"), false, "t")[0];
  std::map<Split, std::set<std::string>> seen;
  for (Split split : {Split::Train, Split::Val, Split::Test}) {
    const Batch b = task.examples(split, 7, 0, split == Split::Train ? 2000 : 400);
    CHECK(b.relations.shape() == Shape{b.size(), 7, 64});
    for (std::size_t r = 0; r < b.size(); ++r) {
      std::vector<Index> s;
      for (std::size_t t = 0; t < 64; ++t) {
        const Index id = b.targets(r, t) == kIgnore ? b.inputs(r, t) : b.targets(r, t);  // the unmasked token
        if (id == task.pad_token()) break;
        s.push_back(id);
        if (id == stop) {
          const std::string text = tk.decode(s);
          REQUIRE(g->split(text, 0.05, 0.05) == split);
          seen[split].insert(text);
          s.clear();
        }
      }
    }
  }
  for (const std::string& s : seen[Split::Test]) CHECK(seen[Split::Train].count(s) == 0);
  for (const std::string& s : g->learner_sentences()) CHECK(seen[Split::Train].count(s) == 0);
  CHECK(seen[Split::Train].size() > 5000);
}

TEST_CASE("grammar v2: typed sentences - analyse and text_row name the unknown word or the rule broken") {
  auto error = [](Language l, const std::string& text) {
    try {
      load_grammar("v2", l)->analyse(text);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error(Language::Zh, "我爱吃披萨") == "'我爱吃披萨': '披' starts no word of the zh lexicon");
  CHECK(error(Language::En, "i love to eat pizza") == "'i love to eat pizza': 'pizza' is not a word of the en lexicon");
  CHECK(error(Language::Zh, "我爱吃花瓶") ==
        "'我爱吃花瓶' is not a sentence of the zh grammar v2: 吃 (eat) does not take 花瓶 (vase) as its object");
  CHECK(error(Language::Zh, "花瓶被他打了") == "'花瓶被他打了' is not a sentence of the zh grammar v2: 打 needs a result complement");
  CHECK(error(Language::Zh, "妈妈给了花瓶一个苹果") ==
        "'妈妈给了花瓶一个苹果' is not a sentence of the zh grammar v2: 给 (give) does not take 花瓶 (vase) as its recipient");
  CHECK(error(Language::En, "he break the vase") ==
        "'he break the vase' is not a sentence of the en grammar v2: no sentence of the grammar has 'break' after 'he'");
  CHECK(error(Language::Zh, "苹果我最爱吃") ==
        "'苹果我最爱吃' is not a sentence of the zh grammar v2: no sentence of the grammar has '我' after '苹果'");
  // ASCII punctuation is read as the grammar writes it.
  CHECK(load_grammar("v2", Language::Zh)->analyse("苹果,我最爱吃").text == "苹果，我最爱吃。");
  CHECK(load_grammar("v2", Language::En)->analyse("Apples, I love to eat most.").text == "apples , i love to eat most .");
  GrammarTask task(v2(Language::Zh));
  const Batch row = task.text_row("追老鼠的猫跑得很快", "--text");
  CHECK(row.inputs.shape() == Shape{1, 10});
  CHECK(row.relations.shape() == Shape{1, 7, 10});
  CHECK(row.relations(0, 0, 0) == 3);  // 追 -> 猫
  CHECK_THROWS_WITH_AS(task.text_row("我爱吃披萨", "--text"), "--text: '我爱吃披萨': '披' starts no word of the zh lexicon",
                       ValueError);
  const Batch masked = task.text_row("追老鼠的[MASK]跑得很快", "--text");
  CHECK(masked.inputs(0, 4) == task.mask_token());
}

TEST_CASE("grammar files: each kind of problem names the file, the line, the key and what was expected") {
  struct Case {
    const char* what;
    std::string from, to;
    std::string line_of;  // the text whose line the message names (in the v2 file)
    std::string message;  // after "bad.yaml:<line>: "
  };
  const std::vector<Case> cases = {
      {"YAML syntax", "grammar: v2\n", "grammar: [v2\n", "", ": YAML: "},
      {"a missing key", "  - name: bei\n    weight: 16\n", "  - name: bei\n", "  - name: bei",
       "constructions[9]: missing key 'weight'"},
      {"a missing section", "agreement: verb->subject\n", "", "grammar: v2\n", "grammar file: missing key 'agreement'"},
      {"an unknown key", "  猫:     {en: cat, classifier: 只, classes:", "  猫:     {en: cat, classifier: 只, classs:", "  猫: ",
       "nouns.猫: unknown key 'classs' (expected: en, plural, object, possessive, kind, number, person, classifier, close, "
       "classes); did you mean 'classes'?"},
      {"a key given twice", "  兔子:   {en: rabbit", "  狗:   {en: rabbit", "  兔子: ", "nouns.狗: given twice (first at line "},
      {"a value of the wrong kind", "noun_phrase: {det: 0.3,", "noun_phrase: {det: lots,", "noun_phrase: ",
       "noun_phrase.det: expected a number in [0, 1], found 'lots'"},
      {"a probability out of range", "D: {word: degrees, p: 0.8}", "D: {word: degrees, p: 1.5}", "D: {word: degrees, p: 0.8}",
       "constructions[8] (ba_state).slots.D.p: expected a number in (0, 1], found '1.5'"},
      {"four English forms", "吃:   {en: [eat, eats, ate, eaten]", "吃:   {en: [eat, eats, ate]", "  吃: ",
       "verbs.吃.en: expected the four English forms [base, third person singular, past, past participle], found a list of 3"},
      {"an unknown class", "objects: [food], tags: [present, act, past, ba, bei],\n         results: {完: {en: up}}}",
       "objects: [fod], tags: [present, act, past, ba, bei],\n         results: {完: {en: up}}}", "  吃: ",
       "verbs.吃.objects: unknown class 'fod' (the classes: human, "},
      {"an unknown verb tag", "      V: {verb: [present]}", "      V: {verb: [presnt]}", "      V: {verb: [present]}",
       "constructions[0] (present).slots.V.verb: no verb has the tag 'presnt' (the verbs' tags: "},
      {"an unknown word list", "      A: {word: also, p: 0.5}", "      A: {word: alsso, p: 0.5}", "      A: {word: also, p: 0.5}",
       "constructions[0] (present).slots.A.word: unknown word list 'alsso' (the lists under 'words': "},
      {"an unknown noun kind", "kinds: [thing, person]", "kinds: [thing, persn]", "kinds: [thing, person]",
       "constructions[14] (relative_manner).slots.S.kinds: expected noun kinds among thing, person, name, kin, pronoun, found "
       "'persn'; did you mean 'person'?"},
      {"a slot name", "      T2: {word: times", "      t2: {word: times", "      T2: {word: times",
       "constructions[16] (relative_object).slots.t2: a slot name is capital letters and digits (V, S2), found 't2'"},
      {"an unknown slot in a word order", "zh: [T S A F M V O 。, S T A F M V O 。]", "zh: [T S A F M V X 。, S T A F M V O 。]",
       "zh: [T S A F M V O 。, S T A F M V O 。]", "constructions[0] (present).zh[0]: unknown slot 'X' (slots: V, S, O, A, F, M, T)"},
      {"a slot left out of a word order", "en: [S:subject A F M V:present O:generic T .,", "en: [S:subject A F M V:present T .,",
       "en: [S:subject A F M V:present O:generic T .,",
       "constructions[0] (present).en[0]: slot 'O' appears 0 times: each slot appears once in each word order"},
      {"an English verb without its form", "en: [S:subject A F M V:present O:generic T .,", "en: [S:subject A F M V O:generic T .,",
       "en: [S:subject A F M V:present O:generic T .,",
       "constructions[0] (present).en[0]: 'V': a verb slot in English needs its form: V:base, V:present, V:past or V:pp"},
      {"an unknown relation", "relations: {verb->subject: [V S], verb->object: [V O], subject->verb: [S V], object->verb: [O V]}",
       "relations: {verb->subjekt: [V S], verb->object: [V O], subject->verb: [S V], object->verb: [O V]}",
       "relations: {verb->subject: [V S], verb->object: [V O], subject->verb: [S V], object->verb: [O V]}",
       "constructions[0] (present).relations.verb->subjekt: unknown relation 'verb->subjekt' (relations: "},
      {"agreement without its relation",
       "relations: {verb->subject: [V S], verb->object: [V O], subject->verb: [S V], object->verb: [O V]}",
       "relations: {verb->object: [V O], subject->verb: [S V], object->verb: [O V]}",
       "en: [S:subject A F M V:present O:generic T .,",
       "constructions[0] (present).en: V:present agrees with its verb->subject partner, and the construction gives it none under relations"},
      {"a construction no sentence fits", "      V: {verb: [give]}\n      S: {noun: agent of V}\n      X:",
       "      V: {verb: [give, manner]}\n      S: {noun: agent of V}\n      X:", "  - name: give\n",
       "construction 'give': no sentence fits its slots in 10000 draws"},
      {"an example outside its construction", "example: [我的猫常常吃鱼。,", "example: [我的猫常常吃花瓶。,", "example: [我的猫常常吃鱼。,",
       "constructions[0] (present).example: '我的猫常常吃花瓶。' is not a sentence of construction 'present': 吃 (eat) does not "
       "take 花瓶 (vase) as its object"},
      {"a learner's sentence outside the grammar", "  zh: [我爱吃苹果。,", "  zh: [我爱吃花瓶。,", "  zh: [我爱吃苹果。,",
       "learners.zh: '我爱吃花瓶。' is not a sentence of the zh grammar v2: 吃 (eat) does not take 花瓶 (vase) as its object"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string e = error_of(c.from, c.to);
    CAPTURE(e);
    if (c.line_of.empty()) {  // YAML's own message, at the line where it gave up
      CHECK(e.rfind("bad.yaml:", 0) == 0);
      CHECK(e.find(c.message) != std::string::npos);
    } else {
      CHECK(e.rfind(at_line_of(c.line_of) + c.message, 0) == 0);
    }
  }
  CHECK_THROWS_WITH_AS(load_grammar("v3", Language::Zh),
                       "grammar 'v3': expected v1, v2 or the path of a grammar file (.yaml); did you mean 'v1'?", ValueError);
  CHECK_THROWS_WITH_AS(load_grammar("/nonexistent/grammar.yaml", Language::Zh),
                       "grammar file '/nonexistent/grammar.yaml': cannot be read (No such file or directory)", ValueError);
}

TEST_CASE("grammar files: a user's file is read from its path, and the config key selects it") {
  // A learner's copy with one more noun: the vocabulary grows, sentences use it.
  std::string text = builtin_grammar_text("v2");
  const std::string cat = "  猫:     {en: cat, classifier: 只, classes: [beast, animal, furred, cute, sized, findable]}\n";
  REQUIRE(text.find(cat) != std::string::npos);
  text.replace(text.find(cat), cat.size(), cat + "  熊猫:   {en: panda, classifier: 只, classes: [beast, animal, furred, cute, sized]}\n");
  const std::string path = std::string(QKV_TEST_TMP) + "/grammar_panda.yaml";
  std::filesystem::create_directories(QKV_TEST_TMP);
  std::ofstream(path) << text;
  const auto g = load_grammar(path, Language::Zh);
  CHECK(g->name() == path);
  CHECK(g->tokenizer().size() == load_grammar("v2", Language::Zh)->tokenizer().size() + 1);  // 熊
  CHECK(g->analyse("熊猫喜欢吃苹果").text == "熊猫喜欢吃苹果。");
  CHECK(load_grammar(path, Language::En)->analyse("the panda likes to eat apples").words.size() == 7);
  // The config key: v2, a path, or v1 when absent (checkpoints from before keep theirs).
  using config::parse_config;
  CHECK(parse_config("task: {name: grammar}\n", "c.yaml").task.grammar == "v1");
  const config::Config c = parse_config("task: {name: grammar, grammar: v2, language: en, length: 32}\n", "c.yaml");
  CHECK(c.task.grammar == "v2");
  CHECK(make_task(c.task)->relation_names().size() == 7);
  CHECK(parse_config("task: {name: grammar, grammar: " + path + ", length: 64}\n", "c.yaml").task.grammar == path);
  CHECK_THROWS_WITH_AS(parse_config("task: {name: grammar, grammar: v3}\n", "c.yaml"),
                       doctest::Contains("c.yaml:1: task.grammar: grammar 'v3': expected v1, v2 or the path of a grammar file"),
                       config::ConfigError);
  CHECK_THROWS_WITH_AS(parse_config("task: {name: grammar, grammar: v2, length: 32}\n", "c.yaml"),
                       doctest::Contains("task.length: a row holds whole sentences, and the longest sentence of the zh grammar v2 "
                                         "has at most 64 tokens: expected task.length >= 64, found 32"),
                       config::ConfigError);
  // A bad file named in the config: its own file, line and key.
  std::ofstream(path) << "grammar: mine\n";
  CHECK_THROWS_WITH_AS(parse_config("task: {name: grammar, grammar: " + path + "}\n", "c.yaml"),
                       doctest::Contains((path + ":1: grammar file: missing key 'relations'").c_str()), config::ConfigError);
}

TEST_CASE("grammar v2: the vocabulary and the bound on task.length the docs state") {
  // docs/tasks.md and docs/config.md state these: a change to the grammar file updates them.
  CHECK(load_grammar("v2", Language::Zh)->tokenizer().size() == 223);
  CHECK(load_grammar("v2", Language::En)->tokenizer().size() == 348);
  CHECK(load_grammar("v2", Language::Zh)->max_tokens() == 64);
  CHECK(load_grammar("v2", Language::En)->max_tokens() == 31);
  // A checkpoint of v1 (its config has no grammar key) does not open as v2: the vocabularies differ.
  const Tokenizer& one = grammar_tokenizer(Language::Zh);
  CHECK_THROWS_WITH_AS(make_vocabulary_task(v2(Language::Zh), Tokenizer::from_vocab(one.kind(), one.to_vocab())),
                       doctest::Contains("is not the zh lexicon's"), ValueError);
}

TEST_CASE("grammar v1: batches and sentences are those of the C++ grammar before the grammar files") {
  // Checksums of batches made by the code before grammar files existed (v1 was not touched).
  const std::map<std::pair<Language, Objective>, std::uint64_t> expect = {
      {{Language::Zh, Objective::Causal}, 0xd0a035ef19de2a02ull},
      {{Language::Zh, Objective::Masked}, 0x9691c440618dad59ull},
      {{Language::En, Objective::Causal}, 0xb3e75467cbbbbddeull},
      {{Language::En, Objective::Masked}, 0x26eb6b9813a1912cull}};
  for (auto& [key, sum] : expect) {
    TaskOptions o;
    o.name = "grammar";
    o.language = key.first, o.objective = key.second, o.length = 32;
    GrammarTask task(o);
    CHECK(task.grammar().name() == "v1");
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (Split s : {Split::Train, Split::Val, Split::Test}) {
      const Batch b = task.examples(s, 5, 3, 64);
      h = fnv(fnv(fnv(fnv(h, b.inputs), b.targets), b.words), b.relations);
    }
    CHECK(h == sum);
  }
  Generator gen(9);
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 2000; ++i)
    for (char c : random_sentence(Language::En, gen).text) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  CHECK(h == 0x2a0287769591481aull);
}

}  // namespace qkv::data
