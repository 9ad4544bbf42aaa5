// The grammar task, and its grammar v1: a lexicon, a frame grammar with semantic restrictions,
// its realisation in Chinese and English, the gold relations, and an analyser that recovers a
// sentence's frame from its text. docs/tasks.md describes the lexicon and the rules. v1 stays in
// C++ (its batches are those of the checkpoints and experiments trained on it); v2 and a user's
// grammars are files read by grammar_engine.cpp.
#include "qkv/data/grammar.hpp"

#include <algorithm>
#include <set>

#include "grammar_text.hpp"
#include "masking.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::data {
namespace {

// ---- the lexicon ----

// Noun classes: what a verb's subject or object, or a modifier's head, must be (one of).
enum : unsigned {
  kHuman = 1u << 0,      // people
  kBeast = 1u << 1,      // animals that act (subjects)
  kAnimal = 1u << 2,     // any animal
  kFood = 1u << 3,
  kFruit = 1u << 4,
  kDrink = 1u << 5,
  kReadable = 1u << 6,
  kWritable = 1u << 7,
  kFragile = 1u << 8,    // breaks (打碎)
  kWashable = 1u << 9,
  kWipeable = 1u << 10,
  kFixable = 1u << 11,
  kOpenable = 1u << 12,  // 打开, 关上
  kToy = 1u << 13,
  kFlower = 1u << 14,
  kGoods = 1u << 15,     // bought and sold
  kFindable = 1u << 16,  // lost and found
  kWearable = 1u << 17,
  kHouse = 1u << 18,
  kColoured = 1u << 19,  // may be red, white, black
  kFurred = 1u << 20,    // may be white or black
  kCute = 1u << 21,
  kSized = 1u << 22,     // big, small
  kAged = 1u << 23,      // new, old
  kAll = ~0u,
};

enum class NounKind { Pronoun, Name, Kin, Person, Thing };  // Person: a human with an article ("the teacher")
enum class Number { Count, Mass, Plural };                  // Plural: plural only ("clothes")

struct Noun {
  const char* zh;
  const char* en;         // singular; a pronoun's subject form
  const char* en_plural;  // Count: the plural; Pronoun: the object form
  const char* en_poss;    // the possessive, when the noun can be a possessor ("my", "mom's"); else nullptr
  NounKind kind;
  Number number;             // Plural: English "were" ("the clothes were", "you were")
  unsigned classes;
  bool third_singular = true;  // English present agreement: "he eats", "they eat"
};

Noun pronoun(const char* zh, const char* subj, const char* obj, const char* poss, bool s3, bool plural) {
  return {zh, subj, obj, poss, NounKind::Pronoun, plural ? Number::Plural : Number::Count, kHuman, s3};
}
Noun person(const char* zh, const char* en, NounKind kind, const char* poss, unsigned extra = 0) {
  return {zh, en, en, poss, kind, Number::Count, kHuman | extra};
}
Noun thing(const char* zh, const char* sg, const char* pl, unsigned classes) {
  return {zh, sg, pl, nullptr, NounKind::Thing, Number::Count, classes};
}
Noun mass(const char* zh, const char* en, unsigned classes) {
  return {zh, en, en, nullptr, NounKind::Thing, Number::Mass, classes};
}
Noun plural(const char* zh, const char* en, unsigned classes) {
  return {zh, en, en, nullptr, NounKind::Thing, Number::Plural, classes};
}

const std::vector<Noun>& nouns() {
  static const std::vector<Noun> table = {
      pronoun("我", "i", "me", "my", false, false), pronoun("你", "you", "you", "your", false, true),
      pronoun("他", "he", "him", "his", true, false), pronoun("她", "she", "her", "her", true, false),
      pronoun("我们", "we", "us", "our", false, true), pronoun("他们", "they", "them", "their", false, true),
      person("小明", "xiaoming", NounKind::Name, "xiaoming's"), person("小红", "xiaohong", NounKind::Name, "xiaohong's"),
      person("小刚", "xiaogang", NounKind::Name, "xiaogang's"), person("小丽", "xiaoli", NounKind::Name, "xiaoli's"),
      person("妈妈", "mom", NounKind::Kin, "mom's"), person("爸爸", "dad", NounKind::Kin, "dad's"),
      person("奶奶", "grandma", NounKind::Kin, "grandma's"), person("爷爷", "grandpa", NounKind::Kin, "grandpa's"),
      person("老师", "teacher", NounKind::Person, nullptr), person("医生", "doctor", NounKind::Person, nullptr),
      person("学生", "student", NounKind::Person, nullptr), person("司机", "driver", NounKind::Person, nullptr),
      person("孩子", "child", NounKind::Person, nullptr, kCute),
      thing("猫", "cat", "cats", kBeast | kAnimal | kFurred | kCute | kSized | kFindable),
      thing("狗", "dog", "dogs", kBeast | kAnimal | kFurred | kCute | kSized | kFindable),
      thing("兔子", "rabbit", "rabbits", kBeast | kAnimal | kFurred | kCute | kSized | kFindable),
      thing("鸟", "bird", "birds", kBeast | kAnimal | kCute | kSized),
      thing("老鼠", "mouse", "mice", kBeast | kAnimal | kSized),
      thing("鱼", "fish", "fish", kAnimal | kFood | kSized | kGoods),
      thing("苹果", "apple", "apples", kFood | kFruit | kWashable | kGoods | kSized),
      thing("香蕉", "banana", "bananas", kFood | kFruit | kGoods),
      thing("西瓜", "watermelon", "watermelons", kFood | kFruit | kGoods | kSized),
      thing("蛋糕", "cake", "cakes", kFood | kGoods | kSized),
      thing("鸡蛋", "egg", "eggs", kFood | kFragile | kGoods),
      mass("面包", "bread", kFood | kGoods), mass("米饭", "rice", kFood), mass("肉", "meat", kFood | kGoods),
      plural("饺子", "dumplings", kFood), plural("面条", "noodles", kFood),
      mass("水", "water", kDrink), mass("牛奶", "milk", kDrink | kGoods), mass("茶", "tea", kDrink | kGoods),
      mass("果汁", "juice", kDrink | kGoods), mass("咖啡", "coffee", kDrink | kGoods),
      thing("书", "book", "books", kReadable | kGoods | kFindable | kOpenable | kAged),
      thing("信", "letter", "letters", kReadable | kWritable | kFindable),
      thing("报纸", "newspaper", "newspapers", kReadable | kGoods),
      thing("小说", "novel", "novels", kReadable | kWritable | kGoods),
      thing("杂志", "magazine", "magazines", kReadable | kGoods),
      thing("诗", "poem", "poems", kReadable | kWritable), thing("日记", "diary", "diaries", kReadable | kWritable),
      mass("作业", "homework", kWritable | kFindable),
      thing("花瓶", "vase", "vases", kFragile | kGoods | kColoured | kSized | kWipeable | kFindable),
      thing("杯子", "cup", "cups", kFragile | kWashable | kWipeable | kGoods | kColoured | kSized | kAged),
      thing("碗", "bowl", "bowls", kFragile | kWashable | kWipeable | kGoods | kColoured | kSized),
      thing("盘子", "plate", "plates", kFragile | kWashable | kWipeable | kGoods | kColoured | kSized),
      thing("窗户", "window", "windows", kFragile | kOpenable | kWipeable | kFixable | kSized),
      thing("镜子", "mirror", "mirrors", kFragile | kWipeable | kGoods | kSized),
      plural("眼镜", "glasses", kFragile | kWipeable | kFindable | kGoods | kFixable),
      plural("衣服", "clothes", kWashable | kGoods | kColoured | kAged | kWearable),
      plural("袜子", "socks", kWashable | kGoods | kColoured | kAged | kWearable | kFindable),
      thing("帽子", "hat", "hats", kWashable | kGoods | kColoured | kAged | kWearable | kFindable),
      thing("桌子", "table", "tables", kWipeable | kFixable | kGoods | kColoured | kSized | kAged),
      thing("椅子", "chair", "chairs", kWipeable | kFixable | kGoods | kColoured | kAged),
      thing("自行车", "bicycle", "bicycles", kFixable | kGoods | kWashable | kWipeable | kColoured | kAged | kFindable),
      thing("汽车", "car", "cars", kFixable | kGoods | kWashable | kColoured | kSized | kAged),
      thing("电脑", "computer", "computers", kFixable | kGoods | kWipeable | kAged | kFindable),
      thing("手表", "watch", "watches", kFixable | kGoods | kAged | kFindable),
      thing("门", "door", "doors", kOpenable | kWipeable | kFixable | kColoured),
      thing("盒子", "box", "boxes", kOpenable | kGoods | kColoured | kSized | kAged | kFindable),
      thing("球", "ball", "balls", kToy | kGoods | kColoured | kSized | kAged | kFindable),
      thing("花", "flower", "flowers", kFlower | kGoods | kColoured),
      thing("钥匙", "key", "keys", kFindable | kAged),
      thing("房子", "house", "houses", kHouse | kGoods | kSized | kAged),
  };
  return table;
}

// Modifiers of a noun: possessors (the nouns with a possessive, followed by 的) and adjectives,
// with 的 (红色的花瓶) or without it (大狗). `heads` are the classes an adjective may modify.
struct Adjective {
  const char* zh;
  const char* en;
  bool de;
  unsigned heads;
};
const std::vector<Adjective>& adjectives() {
  static const std::vector<Adjective> table = {
      {"红色", "red", true, kColoured},
      {"白色", "white", true, kColoured | kFurred},
      {"黑色", "black", true, kColoured | kFurred},
      {"漂亮", "beautiful", true, kColoured | kFurred | kFlower},
      {"可爱", "cute", true, kCute},
      {"新鲜", "fresh", true, kFood | kDrink | kFlower},
      {"干净", "clean", true, kWashable | kWipeable},
      {"有趣", "interesting", true, kReadable},
      {"聪明", "clever", true, kHuman | kBeast},
      {"大", "big", false, kSized},
      {"小", "small", false, kSized},
      {"新", "new", false, kAged},
      {"旧", "old", false, kAged},
  };
  return table;
}

struct Modifier {
  std::string zh, en;
  bool de;
  unsigned heads;
  int possessor;  // the noun, for possessors; -1 for adjectives
};
const std::vector<Modifier>& modifiers() {
  static const std::vector<Modifier> table = [] {
    std::vector<Modifier> out;
    for (std::size_t i = 0; i < nouns().size(); ++i)
      if (nouns()[i].en_poss) out.push_back({nouns()[i].zh, nouns()[i].en_poss, true, kAll, int(i)});
    for (const Adjective& a : adjectives()) out.push_back({a.zh, a.en, a.de, a.heads, -1});
    return out;
  }();
  return table;
}

// Constructions (bit flags, so a verb can list the ones it allows).
enum Construction : unsigned { kPresent = 1, kControl = 2, kPast = 4, kBa = 8, kBei = 16 };
constexpr unsigned kConstructions[] = {kPresent, kControl, kPast, kBa, kBei};
bool past(unsigned c) { return c == kPast || c == kBa || c == kBei; }

struct EnVerb {
  const char* base = nullptr;  // nullptr: none (a result without its own English verb)
  const char* s3 = nullptr;
  const char* past = nullptr;
  const char* pp = nullptr;
};

// A result complement (打 + 碎): Chinese writes it after the verb; English either has a word for
// it ("ate the apple up") or another verb ("broke"). Its objects and agents, when given, replace
// the verb's. A verb with a result allows past, 把 and 被.
struct Result {
  const char* zh;
  const char* en_word;  // nullptr: none
  EnVerb en;            // base nullptr: the verb's own
  unsigned objects = 0, agents = 0;
};

struct Verb {
  const char* zh;
  EnVerb en;
  unsigned agents, objects;
  unsigned bare;  // constructions allowed without a result (0: the verb needs one)
  std::vector<Result> results;
  bool stative = false;  // 爱, 喜欢: no 了, no 常常 or 每天, not under a control verb
};

const std::vector<Verb>& verbs() {
  const unsigned all = kPresent | kPast | kBa | kBei;
  const EnVerb finish{"finish", "finishes", "finished", "finished"};
  static const std::vector<Verb> table = {
      {"吃", {"eat", "eats", "ate", "eaten"}, kHuman | kBeast, kFood, all, {{"完", "up", {}}}},
      {"喝", {"drink", "drinks", "drank", "drunk"}, kHuman | kBeast, kDrink, all, {{"完", "up", {}}}},
      {"追逐", {"chase", "chases", "chased", "chased"}, kHuman | kBeast, kHuman | kBeast | kToy, kPresent | kPast | kBei, {}},
      {"看见", {"see", "sees", "saw", "seen"}, kHuman | kBeast, kAll, kPast | kBei, {}},
      {"打", {"hit", "hits", "hit", "hit"}, kHuman | kBeast, 0, 0,
       {{"碎", nullptr, {"break", "breaks", "broke", "broken"}, kFragile},
        {"开", nullptr, {"open", "opens", "opened", "opened"}, kOpenable, kHuman}}},
      {"洗", {"wash", "washes", "washed", "washed"}, kHuman, kWashable, all, {{"干净", "clean", {}}}},
      {"擦", {"wipe", "wipes", "wiped", "wiped"}, kHuman, kWipeable, all, {{"干净", "clean", {}}}},
      {"写", {"write", "writes", "wrote", "written"}, kHuman, kWritable, kPresent | kPast, {{"完", nullptr, finish}}},
      {"读", {"read", "reads", "read", "read"}, kHuman, kReadable, kPresent | kPast, {{"完", nullptr, finish}}},
      {"买", {"buy", "buys", "bought", "bought"}, kHuman, kGoods, all, {}},
      {"卖", {"sell", "sells", "sold", "sold"}, kHuman, kGoods, all, {}},
      {"修", {"repair", "repairs", "repaired", "repaired"}, kHuman, kFixable, all, {{"好", nullptr, {"fix", "fixes", "fixed", "fixed"}}}},
      {"画", {"draw", "draws", "drew", "drawn"}, kHuman, kHuman | kAnimal | kFruit | kFlower | kHouse, kPresent | kPast, {}},
      {"喂", {"feed", "feeds", "fed", "fed"}, kHuman, kAnimal, all, {}},
      {"抱", {"hug", "hugs", "hugged", "hugged"}, kHuman, kHuman | kBeast, kPresent | kPast, {}},
      {"踢", {"kick", "kicks", "kicked", "kicked"}, kHuman, kToy, all, {}},
      {"咬", {"bite", "bites", "bit", "bitten"}, kBeast, kHuman | kBeast | kFood | kWearable | kToy, all, {}},
      {"偷", {"steal", "steals", "stole", "stolen"}, kHuman | kBeast, kFood | kGoods, all, {}},
      {"拿", {"take", "takes", "took", "taken"}, kHuman, kGoods | kReadable | kFindable, kPast, {{"走", "away", {}}}},
      {"找", {"look", "looks", "looked", "looked"}, kHuman | kBeast, kFindable | kHuman, 0,
       {{"到", nullptr, {"find", "finds", "found", "found"}}}},
      {"关", {"close", "closes", "closed", "closed"}, kHuman, kOpenable, 0, {{"上", nullptr, {}}}},
      {"爱", {"love", "loves", "loved", "loved"}, kHuman | kBeast, kHuman | kAnimal | kFood | kDrink | kFlower, kPresent, {}, true},
      {"喜欢", {"like", "likes", "liked", "liked"}, kHuman | kBeast, kHuman | kAnimal | kFood | kDrink | kFlower | kReadable | kToy,
       kPresent, {}, true},
  };
  return table;
}

// Control verbs take a verb phrase as their object: 我爱吃苹果 "i love to eat apples".
struct Control {
  const char* zh;
  EnVerb en;
  unsigned agents;
  bool wish;  // 想: a wish can be habitual (常常, 每天) or for tomorrow (明天); a liking cannot
};
const std::vector<Control>& controls() {
  static const std::vector<Control> table = {
      {"爱", {"love", "loves", nullptr, nullptr}, kHuman | kBeast, false},
      {"喜欢", {"like", "likes", nullptr, nullptr}, kHuman | kBeast, false},
      {"想", {"want", "wants", nullptr, nullptr}, kHuman | kBeast, true},
  };
  return table;
}

enum class When { Any, Habitual, Wish };  // what a time word needs besides its constructions

struct Time {
  const char* zh;
  const char* en;  // English puts it at the end
  unsigned constructions;
  When needs;
};
const std::vector<Time>& times() {
  static const std::vector<Time> table = {
      {"今天", "today", kPresent | kControl | kPast | kBa | kBei, When::Any},
      {"昨天", "yesterday", kPast | kBa | kBei, When::Any},
      {"每天", "every day", kPresent | kControl, When::Habitual},
      {"明天", "tomorrow", kControl, When::Wish},
  };
  return table;
}

// ---- frames ----

struct Phrase {
  int noun = -1, mod = -1;
  bool operator==(const Phrase& o) const { return noun == o.noun && mod == o.mod; }
};

struct Frame {
  unsigned construction = kPresent;
  Phrase subject, object;  // semantic: the subject is the doer, also in 被 sentences
  int verb = -1, result = -1, control = -1, time = -1;
  bool time_first = false;  // zh: the time before the subject (今天他...) rather than after it (他今天...)
  bool also = false, often = false;
};

const Result* result_of(const Frame& f) { return f.result >= 0 ? &verbs()[std::size_t(f.verb)].results[std::size_t(f.result)] : nullptr; }
unsigned agents_of(const Frame& f) {
  const Result* r = result_of(f);
  return r && r->agents ? r->agents : verbs()[std::size_t(f.verb)].agents;
}
unsigned objects_of(const Frame& f) {
  const Result* r = result_of(f);
  return r && r->objects ? r->objects : verbs()[std::size_t(f.verb)].objects;
}

// Whether modifier m may modify noun n: pronouns and names take none, kin only a possessor.
bool modifies(int m, int n) {
  const Noun& head = nouns()[std::size_t(n)];
  const Modifier& mod = modifiers()[std::size_t(m)];
  if (head.kind == NounKind::Pronoun || head.kind == NounKind::Name) return false;
  if (mod.possessor >= 0) return mod.possessor != n;
  return head.kind != NounKind::Kin && (head.classes & mod.heads);
}

// Lexicon entries in messages, both languages: "吃 (eat)".
std::string gloss(const Noun& n) { return std::string(n.zh) + " (" + n.en + ")"; }
std::string gloss(const Modifier& m) { return m.zh + " (" + m.en + ")"; }
std::string gloss(const Verb& v, const Result* r) {
  std::string zh = std::string(v.zh) + (r ? r->zh : "");
  const char* en = r && r->en.base ? r->en.base : v.en.base;
  return zh + " (" + en + (r && r->en_word ? std::string(" ") + r->en_word : "") + ")";
}

// "" when the frame is a sentence of the language, else the restriction it breaks.
std::string violation(const Frame& f) {
  const Verb& v = verbs()[std::size_t(f.verb)];
  const Result* r = result_of(f);
  const Noun& s = nouns()[std::size_t(f.subject.noun)];
  const Noun& o = nouns()[std::size_t(f.object.noun)];
  const unsigned c = f.construction;
  const std::string verb = gloss(v, r);
  const char* names[] = {"in the present", "after a control verb", "with 了", "with 把", "with 被"};
  const char* here = names[c == kPresent ? 0 : c == kControl ? 1 : c == kPast ? 2 : c == kBa ? 3 : 4];
  if (r && !past(c)) return verb + " (a verb with a result) needs 了, 把 or 被";
  if (!r && v.bare == 0) return std::string(v.zh) + " needs a result complement";
  if (!r && !(v.bare & (c == kControl ? kPresent : c))) return verb + " is not used " + here;
  if (c == kControl && (f.control < 0 || v.stative)) return verb + " is not used " + here;
  if (c != kControl && f.control >= 0) return "a control verb needs a control construction";
  if (c == kControl && !(controls()[std::size_t(f.control)].agents & s.classes))
    return gloss(s) + " cannot be the subject of " + controls()[std::size_t(f.control)].zh + " (" +
           controls()[std::size_t(f.control)].en.base + ")";
  if (!(agents_of(f) & s.classes)) return gloss(s) + " cannot be the subject of " + verb;
  if (!(objects_of(f) & o.classes)) return verb + " does not take " + gloss(o) + " as its object";
  if (f.subject == f.object) return gloss(s) + " cannot be both the subject and the object";
  if (f.subject.mod >= 0 && !modifies(f.subject.mod, f.subject.noun))
    return gloss(modifiers()[std::size_t(f.subject.mod)]) + " cannot modify " + gloss(s);
  if (f.object.mod >= 0 && !modifies(f.object.mod, f.object.noun))
    return gloss(modifiers()[std::size_t(f.object.mod)]) + " cannot modify " + gloss(o);
  const bool wish = c == kControl && controls()[std::size_t(f.control)].wish;
  const bool habitual = !v.stative && (c == kPresent || wish);
  if (f.time >= 0) {
    const Time& t = times()[std::size_t(f.time)];
    const std::string time = std::string(t.zh) + " (" + t.en + ")";
    if (!(t.constructions & c)) return time + " does not go with this tense";
    if (f.often) return "常常 (often) does not go with a time word";
    if (t.needs == When::Habitual && !habitual) return time + " needs a habitual verb";
    if (t.needs == When::Wish && !wish) return time + " needs 想 (want)";
  }
  if (f.time < 0 && f.time_first) return "no time word to put first";
  if (f.often && !habitual) return "常常 (often) needs a habitual verb";
  return "";
}

// One of [0, n) uniformly among those `ok` accepts (reservoir sampling of one); -1 when none is.
template <class Ok>
int pick(Generator& gen, std::size_t n, Ok ok) {
  int chosen = -1;
  std::size_t seen = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (ok(int(i)) && gen.randint(++seen) == 0) chosen = int(i);
  return chosen;
}

// A frame drawn from gen: its parts uniform among those the already chosen parts allow, then
// checked (rejection). Every sentence of the language has a positive probability.
Frame draw_frame(Generator& gen) {
  for (;;) {
    Frame f;
    f.construction = kConstructions[gen.randint(5)];
    f.verb = int(gen.randint(verbs().size()));
    const Verb& v = verbs()[std::size_t(f.verb)];
    if (past(f.construction) && !v.results.empty()) f.result = int(gen.randint(v.results.size() + 1)) - 1;
    if (f.construction == kControl) f.control = int(gen.randint(controls().size()));
    const unsigned agents = agents_of(f), objects = objects_of(f);
    f.subject.noun = pick(gen, nouns().size(), [&](int n) { return nouns()[std::size_t(n)].classes & agents; });
    f.object.noun = pick(gen, nouns().size(), [&](int n) { return nouns()[std::size_t(n)].classes & objects; });
    if (f.subject.noun < 0 || f.object.noun < 0) continue;
    if (gen.uniform() < 0.25) f.subject.mod = pick(gen, modifiers().size(), [&](int m) { return modifies(m, f.subject.noun); });
    if (gen.uniform() < 0.35) f.object.mod = pick(gen, modifiers().size(), [&](int m) { return modifies(m, f.object.noun); });
    if (gen.uniform() < 0.3) {
      f.time = int(gen.randint(times().size()));
      f.time_first = gen.randint(2) == 0;
    }
    f.also = gen.uniform() < 0.15;
    f.often = gen.uniform() < 0.15;
    if (violation(f).empty()) return f;
  }
}

// ---- realisation ----

enum class Role { Time, Adverb, SubjectModifier, Subject, ObjectModifier, Object, Control, Verb, Result, Function };

struct Word {
  std::string text;
  Role role;
};
using Words = std::vector<Word>;

void phrase_zh(const Phrase& p, bool subject, Words& out) {
  if (p.mod >= 0) {
    const Modifier& m = modifiers()[std::size_t(p.mod)];
    out.push_back({m.zh, subject ? Role::SubjectModifier : Role::ObjectModifier});
    if (m.de) out.push_back({"的", Role::Function});
  }
  out.push_back({nouns()[std::size_t(p.noun)].zh, subject ? Role::Subject : Role::Object});
}

Words realise_zh(const Frame& f) {
  Words out;
  const unsigned c = f.construction;
  const Verb& v = verbs()[std::size_t(f.verb)];
  const Result* r = result_of(f);
  auto time = [&] { out.push_back({times()[std::size_t(f.time)].zh, Role::Time}); };
  auto verb = [&] {
    out.push_back({v.zh, Role::Verb});
    if (r) out.push_back({r->zh, Role::Result});
  };
  if (f.time >= 0 && f.time_first) time();
  phrase_zh(c == kBei ? f.object : f.subject, c != kBei, out);
  if (f.time >= 0 && !f.time_first) time();
  if (f.also) out.push_back({"也", Role::Adverb});
  if (f.often) out.push_back({"常常", Role::Adverb});
  if (c == kPresent || c == kControl) {
    if (c == kControl) out.push_back({controls()[std::size_t(f.control)].zh, Role::Control});
    verb();
    phrase_zh(f.object, false, out);
  } else if (c == kPast) {
    verb();
    out.push_back({"了", Role::Function});
    phrase_zh(f.object, false, out);
  } else {
    out.push_back({c == kBa ? "把" : "被", Role::Function});
    phrase_zh(c == kBa ? f.object : f.subject, c == kBei, out);
    verb();
    out.push_back({"了", Role::Function});
  }
  out.push_back({"。", Role::Function});
  return out;
}

// English noun phrases: pronouns by case; names and kin bare ("mom", "my mom"); people with
// "the" ("the teacher"); things "the" + singular when definite, bare plural (or mass) when
// generic (the object of a present-tense verb: "i love to eat apples"). A possessor replaces the
// article ("my apples"); an adjective goes before the noun ("the red vase").
void phrase_en(const Phrase& p, bool subject, bool generic, bool subject_case, Words& out) {
  const Noun& n = nouns()[std::size_t(p.noun)];
  const Role head = subject ? Role::Subject : Role::Object, mod = subject ? Role::SubjectModifier : Role::ObjectModifier;
  if (n.kind == NounKind::Pronoun) {
    out.push_back({subject_case ? n.en : n.en_plural, head});
    return;
  }
  const Modifier* m = p.mod >= 0 ? &modifiers()[std::size_t(p.mod)] : nullptr;
  const bool possessor = m && m->possessor >= 0;
  const bool thing = n.kind == NounKind::Thing;
  if (possessor)
    out.push_back({m->en, mod});
  else if (n.kind == NounKind::Person || (thing && !generic))
    out.push_back({"the", Role::Function});
  if (m && !possessor) out.push_back({m->en, mod});
  out.push_back({thing && generic && n.number == Number::Count ? n.en_plural : n.en, head});
}

Words realise_en(const Frame& f) {
  Words out;
  const unsigned c = f.construction;
  const Verb& v = verbs()[std::size_t(f.verb)];
  const Result* r = result_of(f);
  const EnVerb& en = r && r->en.base ? r->en : v.en;
  const Noun& s = nouns()[std::size_t(f.subject.noun)];
  auto result = [&] {
    if (r && r->en_word) out.push_back({r->en_word, Role::Result});
  };
  if (c != kBei) {
    phrase_en(f.subject, true, false, true, out);
    if (f.also) out.push_back({"also", Role::Adverb});
    if (f.often) out.push_back({"often", Role::Adverb});
    if (c == kControl) {
      const EnVerb& ctl = controls()[std::size_t(f.control)].en;
      out.push_back({s.third_singular ? ctl.s3 : ctl.base, Role::Control});
      out.push_back({"to", Role::Function});
      out.push_back({en.base, Role::Verb});
    } else {
      out.push_back({c == kPresent ? (s.third_singular ? en.s3 : en.base) : en.past, Role::Verb});
    }
    phrase_en(f.object, false, !past(c), false, out);
    result();
  } else {
    const Noun& o = nouns()[std::size_t(f.object.noun)];
    phrase_en(f.object, false, false, true, out);
    out.push_back({o.number == Number::Plural ? "were" : "was", Role::Function});
    if (f.also) out.push_back({"also", Role::Adverb});
    out.push_back({en.pp, Role::Verb});
    result();
    out.push_back({"by", Role::Function});
    phrase_en(f.subject, true, false, false, out);
  }
  if (f.time >= 0)
    for (const std::string& w : split_words(times()[std::size_t(f.time)].en)) out.push_back({w, Role::Time});  // "every day"
  out.push_back({".", Role::Function});
  return out;
}

Words realise(const Frame& f, Language language) { return language == Language::Zh ? realise_zh(f) : realise_en(f); }

std::string join(const Words& words, Language language) {
  std::string s;
  for (const Word& w : words) s += (language == Language::En && !s.empty() ? " " : "") + w.text;
  return s;
}

// ---- relations ----

enum Relation { kVerbSubject, kVerbObject, kSubjectVerb, kObjectVerb, kModifierHead, kVerbResult, kRelations };

// The partners of each word, from the roles: the doer and the thing done to of a verb (a control
// verb's object is the verb it governs), the verb of a subject (the control verb when there is
// one) and of an object, the head of a modifier, the result of a verb.
std::vector<std::vector<Index>> partners(const Words& words) {
  auto find = [&](Role role) {
    for (std::size_t i = 0; i < words.size(); ++i)
      if (words[i].role == role) return Index(i);
    return Index(-1);
  };
  const Index subject = find(Role::Subject), object = find(Role::Object), verb = find(Role::Verb);
  const Index control = find(Role::Control), result = find(Role::Result);
  std::vector<std::vector<Index>> p(kRelations, std::vector<Index>(words.size(), -1));
  for (std::size_t i = 0; i < words.size(); ++i) {
    switch (words[i].role) {
      case Role::Control:
        p[kVerbSubject][i] = subject, p[kVerbObject][i] = verb;
        break;
      case Role::Verb:
        p[kVerbSubject][i] = subject, p[kVerbObject][i] = object, p[kVerbResult][i] = result;
        break;
      case Role::Subject: p[kSubjectVerb][i] = control >= 0 ? control : verb; break;
      case Role::Object: p[kObjectVerb][i] = verb; break;
      case Role::SubjectModifier: p[kModifierHead][i] = subject; break;
      case Role::ObjectModifier: p[kModifierHead][i] = object; break;
      default: break;
    }
  }
  return p;
}

// ---- vocabulary and sentences ----

// Every word the realisers can write.
std::vector<std::string> lexicon_words(Language language) {
  std::vector<std::string> w;
  const bool zh = language == Language::Zh;
  auto add = [&](const char* s) {
    if (s) w.emplace_back(s);
  };
  auto add_en = [&](const EnVerb& v) { add(v.base), add(v.s3), add(v.past), add(v.pp); };
  for (const Noun& n : nouns()) zh ? add(n.zh) : (add(n.en), add(n.en_plural), add(n.en_poss));
  for (const Adjective& a : adjectives()) add(zh ? a.zh : a.en);
  for (const Verb& v : verbs()) {
    zh ? add(v.zh) : add_en(v.en);
    for (const Result& r : v.results) zh ? add(r.zh) : (add(r.en_word), add_en(r.en));
  }
  for (const Control& c : controls()) zh ? add(c.zh) : add_en(c.en);
  for (const Time& t : times()) add(zh ? t.zh : t.en);
  for (const char* f : {"也", "常常", "了", "把", "被", "的", "。"})
    if (zh) add(f);
  for (const char* f : {"also", "often", "the", "to", "was", "were", "by", "."})
    if (!zh) add(f);
  return lexicon_list(std::move(w), language);  // multi-word entries ("every day") are several words
}

GrammarSentence make_sentence(const Words& words, Language language) {
  const Tokenizer& tk = grammar_tokenizer(language);
  GrammarSentence s;
  s.text = join(words, language);
  s.partners = partners(words);
  for (std::size_t i = 0; i < words.size(); ++i) {
    s.words.push_back(words[i].text);
    for (Index id : tk.encode(std::string_view(words[i].text), false, "grammar")) {
      s.tokens.push_back(id);
      s.token_words.push_back(Index(i));
    }
  }
  return s;
}

// ---- analysis ----

// The frames whose realisation is `text`, searched among the lexicon entries whose words occur in
// it. Returns the first frame of the language; else sets `problem`.
bool parse(Language language, const std::string& text, Frame& found, std::string& problem) {
  const bool zh = language == Language::Zh;
  const std::vector<std::string> tokens = split_words(text);
  const std::set<std::string> present(tokens.begin(), tokens.end());
  auto occurs = [&](const char* s) {
    if (!s) return false;
    if (zh) return text.find(s) != std::string::npos;
    for (const std::string& w : split_words(s))
      if (!present.count(w)) return false;
    return true;
  };
  auto occurs_en = [&](const EnVerb& v) { return occurs(v.base) || occurs(v.s3) || occurs(v.past) || occurs(v.pp); };
  // The candidates of each part of a frame: the entries whose words occur in the text.
  enum Part { kC, kVerb, kResult, kControl_, kSubject, kSubjectMod, kObject, kObjectMod, kTime, kTimeFirst, kAlso, kOften, kParts };
  std::vector<int> in[kParts];
  for (unsigned c : kConstructions) in[kC].push_back(int(c));
  in[kResult] = in[kControl_] = in[kSubjectMod] = in[kTime] = {-1};
  in[kTimeFirst] = zh ? std::vector<int>{0, 1} : std::vector<int>{0};
  in[kAlso] = occurs(zh ? "也" : "also") ? std::vector<int>{0, 1} : std::vector<int>{0};
  in[kOften] = occurs(zh ? "常常" : "often") ? std::vector<int>{0, 1} : std::vector<int>{0};
  for (std::size_t i = 0; i < nouns().size(); ++i) {
    const Noun& n = nouns()[i];
    if (zh ? occurs(n.zh) : occurs(n.en) || occurs(n.en_plural)) in[kSubject].push_back(int(i));
  }
  for (std::size_t i = 0; i < modifiers().size(); ++i)
    if (occurs(zh ? modifiers()[i].zh.c_str() : modifiers()[i].en.c_str())) in[kSubjectMod].push_back(int(i));
  for (std::size_t i = 0; i < controls().size(); ++i)
    if (zh ? occurs(controls()[i].zh) : occurs_en(controls()[i].en)) in[kControl_].push_back(int(i));
  for (std::size_t i = 0; i < times().size(); ++i)
    if (occurs(zh ? times()[i].zh : times()[i].en)) in[kTime].push_back(int(i));
  std::vector<std::vector<int>> results_of(verbs().size(), std::vector<int>{-1});  // per verb
  for (std::size_t i = 0; i < verbs().size(); ++i) {
    const Verb& v = verbs()[i];
    // English may write a verb with its result as another verb ("broke"), or the result not at all ("closed").
    bool occurring = zh ? occurs(v.zh) : occurs_en(v.en);
    for (const Result& r : v.results) occurring = occurring || (!zh && r.en.base && occurs_en(r.en));
    if (!occurring) continue;
    in[kVerb].push_back(int(i));
    for (std::size_t k = 0; k < v.results.size(); ++k) {
      if (zh && !occurs(v.results[k].zh)) continue;
      results_of[i].push_back(int(k));
      if (std::find(in[kResult].begin(), in[kResult].end(), int(k)) == in[kResult].end()) in[kResult].push_back(int(k));
    }
  }
  in[kObject] = in[kSubject], in[kObjectMod] = in[kSubjectMod];
  bool searching = std::none_of(std::begin(in), std::end(in), [](const std::vector<int>& p) { return p.empty(); });

  std::size_t best = 0;  // zh: bytes, en: words of the text that some frame writes
  std::string reason;
  std::size_t at[kParts] = {};
  while (searching) {  // every combination of the candidates (an odometer over the parts)
    auto get = [&](Part p) { return in[p][at[p]]; };
    Frame f;
    f.construction = unsigned(get(kC));
    f.verb = get(kVerb), f.result = get(kResult), f.control = get(kControl_), f.time = get(kTime);
    f.subject = {get(kSubject), get(kSubjectMod)}, f.object = {get(kObject), get(kObjectMod)};
    f.time_first = get(kTimeFirst), f.also = get(kAlso), f.often = get(kOften);
    const auto& rs = results_of[std::size_t(f.verb)];
    const bool formed = std::find(rs.begin(), rs.end(), f.result) != rs.end() && (f.result < 0 || past(f.construction)) &&
                        (f.construction == kControl) == (f.control >= 0) && (!f.time_first || f.time >= 0) &&
                        (f.subject.mod < 0 || modifies(f.subject.mod, f.subject.noun)) &&
                        (f.object.mod < 0 || modifies(f.object.mod, f.object.noun));
    if (formed) {
      const Words w = realise(f, language);
      std::size_t k = 0;
      bool same = false;
      if (zh) {
        const std::string written = join(w, language);
        while (k < written.size() && k < text.size() && written[k] == text[k]) ++k;
        same = written == text;
      } else {
        while (k < w.size() && k < tokens.size() && w[k].text == tokens[k]) ++k;
        same = k == w.size() && k == tokens.size();
      }
      best = std::max(best, k);
      if (same) {
        const std::string why = violation(f);
        if (why.empty()) {
          found = f;
          return true;
        }
        if (reason.empty()) reason = why;
      }
    }
    std::size_t p = 0;
    while (p < kParts && ++at[p] == in[p].size()) at[p++] = 0;
    searching = p < kParts;
  }
  if (!reason.empty()) {
    problem = reason;
    return false;
  }
  // The word where every frame went astray: en the first word no frame writes; zh the lexicon
  // word (or the character) at the first byte no frame writes.
  problem = astray(language, text, best, lexicon_words(language));
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const std::vector<std::string>& grammar_relation_names() {
  static const std::vector<std::string> names = {"verb->subject",  "verb->object",   "subject->verb",
                                                 "object->verb",   "modifier->head", "verb->result"};
  return names;
}

const std::vector<std::string>& learner_sentences(Language language) {
  static const std::vector<std::string> zh = {"我爱吃苹果。", "猫喜欢追逐老鼠。", "他打碎了花瓶。"};
  static const std::vector<std::string> en = {"i love to eat apples .", "the cat likes to chase mice .", "he broke the vase ."};
  return language == Language::Zh ? zh : en;
}

const Tokenizer& grammar_tokenizer(Language language) {
  static const Tokenizer zh = [] {
    std::string all;
    for (const std::string& w : lexicon_words(Language::Zh)) all += w;
    return Tokenizer::chars(decode_utf8(all, "grammar lexicon"));
  }();
  static const Tokenizer en = Tokenizer::words(lexicon_words(Language::En));
  return language == Language::Zh ? zh : en;
}

std::size_t grammar_max_tokens(Language language) {
  // The longest word of each slot, summed over every slot a sentence can have.
  const Tokenizer& tk = grammar_tokenizer(language);
  auto len = [&](const std::string& w) { return tk.encode(std::string_view(w), false, "grammar").size(); };
  auto longest = [&](auto&& strings) {
    std::size_t m = 0;
    for (const std::string& s : strings) m = std::max(m, len(s));
    return m;
  };
  const bool zh = language == Language::Zh;
  std::vector<std::string> noun, mod, verb, result, control, time;
  for (const Noun& n : nouns()) noun.push_back(zh ? n.zh : n.en);
  for (const Modifier& m : modifiers()) mod.push_back(zh ? m.zh : m.en);
  for (const Verb& v : verbs()) {
    verb.push_back(zh ? v.zh : v.en.base);
    for (const Result& r : v.results)
      if (zh || r.en_word) result.push_back(zh ? r.zh : r.en_word);
  }
  for (const Control& c : controls()) control.push_back(zh ? c.zh : c.en.base);
  for (const Time& t : times()) time.push_back(zh ? t.zh : t.en);
  // A phrase: 的 (en: an article) + modifier + noun. Six more: zh 也, 常常 (2), 了, 把 or 被, 。;
  // en also, often, to, was, by, "."
  const std::size_t phrase = 1 + longest(mod) + longest(noun);
  return longest(time) + 2 * phrase + longest(control) + longest(verb) + longest(result) + 6;
}

Split grammar_split(Language language, const std::string& text, double val_fraction, double test_fraction) {
  return sentence_split(learner_sentences(language), text, val_fraction, test_fraction);
}

GrammarSentence random_sentence(Language language, Generator& gen) {
  return make_sentence(realise(draw_frame(gen), language), language);
}

GrammarSentence analyse_sentence(Language language, const std::string& text) {
  const std::string s = canonical_sentence(language, text, false);
  const std::string quoted = "'" + text + "'";
  std::string problem = unknown_word(language, s, lexicon_words(language));
  if (!problem.empty()) throw ValueError(quoted + ": " + problem);
  Frame f;
  if (!parse(language, s, f, problem))
    throw ValueError(quoted + " is not a sentence of the " + name(language) + " grammar: " + problem);
  return make_sentence(realise(f, language), language);
}

Grammar::~Grammar() = default;

Split Grammar::split(const std::string& text, double val_fraction, double test_fraction) const {
  return sentence_split(learner_sentences(), text, val_fraction, test_fraction);
}

namespace {

// The grammar v1 behind the Grammar interface: the functions above.
class V1Grammar final : public Grammar {
 public:
  explicit V1Grammar(Language language) : language_(language) {}
  const std::string& name() const override {
    static const std::string n = "v1";
    return n;
  }
  Language language() const override { return language_; }
  const std::vector<std::string>& relation_names() const override { return grammar_relation_names(); }
  const std::vector<std::string>& learner_sentences() const override { return data::learner_sentences(language_); }
  GrammarSentence random_sentence(Generator& gen) const override { return data::random_sentence(language_, gen); }
  GrammarSentence analyse(const std::string& text) const override { return analyse_sentence(language_, text); }
  const Tokenizer& tokenizer() const override { return grammar_tokenizer(language_); }
  std::size_t max_tokens() const override { return grammar_max_tokens(language_); }

 private:
  Language language_;
};

}  // namespace

std::shared_ptr<const Grammar> v1_grammar(Language language) {
  static const std::shared_ptr<const Grammar> zh = std::make_shared<const V1Grammar>(Language::Zh);
  static const std::shared_ptr<const Grammar> en = std::make_shared<const V1Grammar>(Language::En);
  return language == Language::Zh ? zh : en;
}

namespace {

// The options checked, then their grammar.
std::shared_ptr<const Grammar> checked_grammar(const TaskOptions& o) {
  TaskOptions checked = o;
  checked.name = "grammar";
  checked.validate();
  return load_grammar(o.grammar, o.language);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

GrammarTask::GrammarTask(const TaskOptions& o, const Tokenizer* stored)
    : language_(o.language), grammar_(checked_grammar(o)), objective_(o.objective), length_(o.length),
      mask_rate_(o.mask_rate), val_fraction_(o.val_fraction), test_fraction_(o.test_fraction),
      tokenizer_(grammar_->tokenizer()) {
  if (stored && (stored->kind() != tokenizer_.kind() || stored->to_vocab() != tokenizer_.to_vocab()))
    throw ValueError(std::string("task grammar: the checkpoint's vocabulary (") + data::name(stored->kind()) + ", " +
                     std::to_string(stored->size()) + " tokens) is not the " + data::name(language_) + " lexicon's (" +
                     data::name(tokenizer_.kind()) + ", " + std::to_string(tokenizer_.size()) +
                     " tokens): the lexicon changed since the model was trained, or task.language or task.grammar differs");
}

std::string GrammarTask::token_label(Index id) const {
  if (id == pad_token()) return "<pad>";
  if (id == mask_token()) return kMaskText;
  return tokenizer_.token_label(id);
}

namespace {

// Sentences into one row of T tokens, then padding; words and relations counted within the row.
// Returns the number of sentence tokens.
std::size_t pack(const std::vector<GrammarSentence>& sentences, std::size_t T, std::size_t R, Index pad, Index* input,
                 Index* words, Index* relations) {
  std::fill(input, input + T, pad);
  std::fill(words, words + T, -1);
  std::fill(relations, relations + R * T, -1);
  std::size_t pos = 0;
  Index base = 0;
  for (const GrammarSentence& s : sentences) {
    for (std::size_t i = 0; i < s.tokens.size(); ++i, ++pos) {
      const Index w = s.token_words[i];
      input[pos] = s.tokens[i];
      words[pos] = base + w;
      for (std::size_t r = 0; r < R; ++r) {
        const Index p = s.partners[r][std::size_t(w)];
        relations[r * T + pos] = p < 0 ? -1 : base + p;
      }
    }
    base += Index(s.words.size());
  }
  return pos;
}

void next_token_targets(const Index* input, std::size_t n, std::size_t T, Index* target) {
  for (std::size_t t = 0; t < T; ++t) target[t] = t + 1 < n ? input[t + 1] : kIgnore;
}

}  // namespace

Batch GrammarTask::examples(Split split, std::uint64_t seed, std::uint64_t first, std::size_t count) const {
  const std::size_t T = length_, R = grammar_->relation_names().size();
  Batch b;
  b.inputs = IndexArray::from_shape({count, T});
  b.targets = IndexArray::from_shape({count, T});
  b.decoder_inputs = IndexArray::from_shape({0});
  b.words = IndexArray::from_shape({count, T});
  b.relations = IndexArray::from_shape({count, R, T});
  parallel_for(count, kParallelMin / 64, [&](std::size_t row) {
    Generator gen(hash64(seed, first + std::uint64_t(row)));
    // Sentences of this split (rejection), as many as fit; the one that does not fit is dropped.
    std::vector<GrammarSentence> sentences;
    std::size_t used = 0;
    for (;;) {
      GrammarSentence s = grammar_->random_sentence(gen);
      if (grammar_->split(s.text, val_fraction_, test_fraction_) != split) continue;
      if (used + s.tokens.size() > T) break;
      used += s.tokens.size();
      sentences.push_back(std::move(s));
    }
    Index* input = b.inputs.data() + row * T;
    Index* target = b.targets.data() + row * T;
    const std::size_t n = pack(sentences, T, R, pad_token(), input, b.words.data() + row * T, b.relations.data() + row * R * T);
    if (masked()) {
      std::fill(target, target + T, kIgnore);
      mask_tokens(gen, n, mask_rate_, mask_token(), tokenizer_.size() - 1, input, target);
    } else {
      next_token_targets(input, n, T, target);
    }
  });
  return b;
}

Batch GrammarTask::analyse(const std::string& text) const {
  const std::string stop = language_ == Language::Zh ? "。" : ".";
  std::vector<GrammarSentence> sentences;
  std::size_t used = 0, from = 0;
  while (from < text.size()) {
    std::size_t end = text.find(stop, from);
    end = end == std::string::npos ? text.size() : end + stop.size();
    const std::string part = text.substr(from, end - from);
    from = end;
    if (split_words(part).empty()) continue;
    sentences.push_back(grammar_->analyse(part));
    used += sentences.back().tokens.size();
  }
  if (sentences.empty()) throw ValueError("task grammar: no sentence given to analyse");
  if (used > length_)
    throw ValueError("task grammar: '" + text + "' has " + std::to_string(used) + " tokens, more than task.length = " +
                     std::to_string(length_));
  const std::size_t T = length_;
  Batch b;
  b.inputs = IndexArray::from_shape({1, T});
  b.targets = IndexArray::from_shape({1, T});
  b.decoder_inputs = IndexArray::from_shape({0});
  b.words = IndexArray::from_shape({1, T});
  const std::size_t R = grammar_->relation_names().size();
  b.relations = IndexArray::from_shape({1, R, T});
  const std::size_t n = pack(sentences, T, R, pad_token(), b.inputs.data(), b.words.data(), b.relations.data());
  if (masked())
    std::fill(b.targets.begin(), b.targets.end(), kIgnore);
  else
    next_token_targets(b.inputs.data(), n, T, b.targets.data());
  return b;
}

Batch GrammarTask::text_row(const std::string& text, const std::string& what, const std::string& mask_text) const {
  if (!masked() || mask_text.empty() || text.find(mask_text) == std::string::npos) {
    Batch b;
    try {
      b = analyse(text);
    } catch (const ValueError& e) {
      throw ValueError(what + ": " + e.what());
    }
    // The sentences without the padding after them: no query attends a pad key (the encoder masks
    // them, a decoder's queries come before them), so the padding changes nothing the row shows.
    std::size_t n = b.inputs.shape()[1];
    while (n > 1 && b.inputs(0, n - 1) == pad_token()) --n;
    Batch row = rows(b, 0, 1);
    auto cut = [n](const IndexArray& a) {
      std::vector<std::size_t> shape(a.shape().begin(), a.shape().end());
      const std::size_t T = shape.back(), lines = a.size() / T;
      shape.back() = n;
      IndexArray out = IndexArray::from_shape(shape);
      for (std::size_t r = 0; r < lines; ++r) std::copy(a.data() + r * T, a.data() + r * T + n, out.data() + r * n);
      return out;
    };
    row.inputs = cut(b.inputs), row.targets = cut(b.targets), row.words = cut(b.words), row.relations = cut(b.relations);
    return row;
  }
  std::vector<Index> ids = encode_with_masks(tokenizer_, text, mask_token(), mask_text, what);
  const Index stop = tokenizer_.encode(language_ == Language::Zh ? "。" : ".", false, what).front();
  if (ids.empty() || ids.back() != stop) ids.push_back(stop);
  return ids_row(*this, ids, what);
}

}  // namespace qkv::data
