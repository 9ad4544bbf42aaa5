// Reading a grammar file (grammar_spec.hpp): yaml-cpp stays in this file. Every check names the
// file, the line and the key, and says what was expected and what was found, so that a learner
// who edits share/grammar/v2.yaml (or a copy) is told exactly where and what to fix.
#include "grammar_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

#include "qkv/tensor/names.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::data::gram {

Bits Names::bit(const std::string& name) {
  const Bits b = find(name);
  if (b) return b;
  names.push_back(name);
  return Bits(1) << (names.size() - 1);
}

Bits Names::find(const std::string& name) const {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return Bits(1) << i;
  return 0;
}

namespace {

int line_of(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    default: return "nothing";
  }
}

const std::vector<std::string>& kind_names() {  // NounKind order
  static const std::vector<std::string> names = {"thing", "person", "name", "kin", "pronoun"};
  return names;
}

bool is_slot_name(const std::string& s) {
  if (s.empty() || !std::isupper(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c));
  });
}

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = s.find_first_not_of(' ');
  while (i != std::string::npos) {
    const std::size_t j = std::min(s.size(), s.find(' ', i));
    out.push_back(s.substr(i, j - i));
    i = s.find_first_not_of(' ', j);
  }
  return out;
}

using Entries = std::vector<std::pair<std::string, YAML::Node>>;

// The checks, each failing with "<file>:<line>: <key>: <message>".
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(int line, const std::string& key, const std::string& message) const {
    throw ValueError(file_ + ":" + std::to_string(line) + ": " + key + ": " + message);
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& message) const {
    fail(line_of(n), key, message);
  }

  // The entries of a mapping in file order; a key given twice is an error.
  Entries map(const YAML::Node& n, const std::string& key) const {
    if (!n.IsMap()) fail(n, key, "expected a mapping, found " + describe(n));
    Entries out;
    std::map<std::string, int> seen;
    for (auto e : n) {
      if (!e.first.IsScalar()) fail(e.first, key, "expected a name as the key, found " + describe(e.first));
      const std::string k = e.first.Scalar();
      auto [at, fresh] = seen.emplace(k, line_of(e.first));
      if (!fresh) fail(e.first, key + "." + k, "given twice (first at line " + std::to_string(at->second) + ")");
      out.emplace_back(k, e.second);
    }
    return out;
  }

  // A mapping whose keys are among `allowed` and hold every one of `required`.
  Entries fields(const YAML::Node& n, const std::string& key, const std::vector<std::string>& allowed,
                 const std::vector<std::string>& required) const {
    Entries out = map(n, key);
    for (auto& [k, v] : out)
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
        fail(line_of(v), key, "unknown key '" + k + "' (expected: " + join_names(allowed) + ")" + did_you_mean(k, allowed));
    for (const std::string& r : required)
      if (std::none_of(out.begin(), out.end(), [&](auto& e) { return e.first == r; }))
        fail(n, key, "missing key '" + r + "'");
    return out;
  }

  std::string text(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar() || n.Scalar().empty()) fail(n, key, "expected a word or text, found " + describe(n));
    return n.Scalar();
  }
  // A text without spaces.
  std::string word(const YAML::Node& n, const std::string& key) const {
    const std::string s = text(n, key);
    if (s.find_first_of(" \t\n") != std::string::npos) fail(n, key, "expected one word, found '" + s + "'");
    return s;
  }
  // A scalar (one) or a list of scalars.
  std::vector<std::string> texts(const YAML::Node& n, const std::string& key) const {
    if (n.IsScalar()) return {text(n, key)};
    if (!n.IsSequence()) fail(n, key, "expected a list, found " + describe(n));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < n.size(); ++i) out.push_back(text(n[i], key + "[" + std::to_string(i) + "]"));
    return out;
  }
  double number(const YAML::Node& n, const std::string& key, double lo, double hi, bool lo_open) const {
    const std::string range = std::string(lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + "]";
    if (!n.IsScalar()) fail(n, key, "expected a number in " + range + ", found " + describe(n));
    char* end = nullptr;
    const double x = std::strtod(n.Scalar().c_str(), &end);
    if (n.Scalar().empty() || *end || !(lo_open ? x > lo : x >= lo) || !(x <= hi))
      fail(n, key, "expected a number in " + range + ", found '" + n.Scalar() + "'");
    return x;
  }
  bool flag(const YAML::Node& n, const std::string& key) const {
    if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) return n.Scalar() == "true";
    fail(n, key, "expected true or false, found " + describe(n));
  }
  // One of `choices`.
  std::string choice(const YAML::Node& n, const std::string& key, const std::vector<std::string>& choices) const {
    const std::string s = text(n, key);
    if (std::find(choices.begin(), choices.end(), s) == choices.end())
      fail(n, key, "expected one of " + join_names(choices) + ", found '" + s + "'" + did_you_mean(s, choices));
    return s;
  }
  // The bits of names that must be in `known` (what: "class").
  Bits known(const YAML::Node& n, const std::string& key, const Names& names, const std::string& what) const {
    Bits b = 0;
    for (const std::string& s : texts(n, key)) {
      const Bits one = names.find(s);
      if (!one)
        fail(n, key, "unknown " + what + " '" + s + "' (the " + what + "es: " + join_names(names.names) + ")" +
                         did_you_mean(s, names.names));
      b |= one;
    }
    return b;
  }

 private:
  std::string file_;
};

const YAML::Node* get(const Entries& e, const std::string& key) {
  for (auto& [k, v] : e)
    if (k == key) return &v;
  return nullptr;
}

// ---- the lexicon ----

Noun read_noun(const Reader& r, const std::string& zh, const YAML::Node& n, const std::string& key, Names& classes) {
  Noun out;
  out.zh = zh;
  const Entries e = r.fields(n, key, {"en", "plural", "object", "possessive", "kind", "number", "person", "classifier", "close", "classes"},
                             {"en", "classes"});
  for (auto& [k, v] : e) {
    const std::string at = key + "." + k;
    if (k == "en") out.en = r.word(v, at);
    if (k == "plural") out.plural = r.word(v, at);
    if (k == "object") out.object = r.word(v, at);
    if (k == "possessive") out.possessive = r.word(v, at);
    if (k == "classifier") out.classifier = r.word(v, at);
    if (k == "close") out.close = r.flag(v, at);
    if (k == "classes") out.classes = r.known(v, at, classes, "class");
    if (k == "person") out.person = int(r.number(v, at, 1, 3, false));
    if (k == "kind") {
      const std::string s = r.choice(v, at, kind_names());
      out.kind = NounKind(std::find(kind_names().begin(), kind_names().end(), s) - kind_names().begin());
    }
    if (k == "number") {
      const std::string s = r.choice(v, at, {"count", "mass", "plural"});
      out.number = s == "count" ? Number::Count : s == "mass" ? Number::Mass : Number::Plural;
    }
  }
  if (out.kind == NounKind::Pronoun && out.object.empty()) r.fail(n, key, "a pronoun needs its object form: missing key 'object'");
  if (out.kind != NounKind::Pronoun && !out.object.empty()) r.fail(n, key, "only a pronoun has an object form ('object')");
  if (out.plural.empty()) out.plural = out.number == Number::Count ? out.en + "s" : out.en;
  if (out.number != Number::Count && !out.classifier.empty())
    r.fail(n, key, "a mass or plural noun takes no classifier (determiners need a count noun)");
  return out;
}

std::vector<std::string> verb_forms(const Reader& r, const YAML::Node& n, const std::string& key) {
  if (!n.IsSequence() || n.size() != 4)
    r.fail(n, key, "expected the four English forms [base, third person singular, past, past participle], found " + describe(n) +
                       (n.IsSequence() ? " of " + std::to_string(n.size()) : ""));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < 4; ++i) out.push_back(r.word(n[i], key + "[" + std::to_string(i) + "]"));
  return out;
}

void read_verb(const Reader& r, const std::string& zh, const YAML::Node& n, const std::string& key, Spec& s) {
  Verb v;
  v.zh = zh;
  const Entries e = r.fields(n, key, {"en", "agents", "objects", "recipients", "tags", "needs_result", "results"}, {"en", "agents", "tags"});
  const YAML::Node* results = nullptr;
  for (auto& [k, x] : e) {
    const std::string at = key + "." + k;
    if (k == "en") v.en = verb_forms(r, x, at);
    if (k == "agents") v.agents = r.known(x, at, s.classes, "class");
    if (k == "objects" && !(x.IsSequence() && x.size() == 0)) v.objects = r.known(x, at, s.classes, "class");
    if (k == "recipients") v.recipients = r.known(x, at, s.classes, "class");
    if (k == "tags")
      for (const std::string& t : r.texts(x, at)) v.tags |= s.verb_tags.bit(t);
    if (k == "needs_result") v.needs_result = r.flag(x, at);
    if (k == "results") results = &x;
  }
  if (results)
    for (auto& [rz, x] : r.map(*results, key + ".results")) {
      const std::string at = key + ".results." + rz;
      Result res;
      res.zh = rz;
      res.verb = int(s.verbs.size());
      bool uses = false;
      if (!x.IsNull())
        for (auto& [k, y] : r.fields(x, at, {"en", "en_verb", "agents", "objects", "uses"}, {})) {
          if (k == "en") res.en = r.text(y, at + ".en");
          if (k == "en_verb") res.en_verb = verb_forms(r, y, at + ".en_verb");
          if (k == "agents") res.agents = r.known(y, at + ".agents", s.classes, "class");
          if (k == "objects") res.objects = r.known(y, at + ".objects", s.classes, "class");
          if (k == "uses") {
            uses = true;
            for (const std::string& u : r.texts(y, at + ".uses")) res.uses |= s.uses.bit(u);
          }
        }
      if (!uses) res.uses = s.uses.bit("plain") | s.uses.bit("potential");
      v.results.push_back(int(s.results.size()));
      s.results.push_back(std::move(res));
    }
  if (v.needs_result && v.results.empty()) r.fail(n, key, "needs_result is true but the verb has no results");
  s.verbs.push_back(std::move(v));
}

void read_words(const Reader& r, const YAML::Node& n, Spec& s) {
  for (auto& [name, list] : r.map(n, "words")) {
    WordList l;
    l.name = name;
    for (auto& [zh, x] : r.map(list, "words." + name)) {
      const std::string at = "words." + name + "." + zh;
      Word w;
      w.zh = zh;
      for (auto& [k, y] : r.fields(x, at, {"en", "tags"}, {"en"})) {
        if (k == "en") w.en = y.IsScalar() ? y.Scalar() : r.text(y, at + ".en");
        if (k == "tags")
          for (const std::string& t : r.texts(y, at + ".tags")) w.tags |= s.word_tags.bit(t);
      }
      l.words.push_back(w);
    }
    if (l.words.empty()) r.fail(list, "words." + name, "expected at least one word");
    s.lists.push_back(std::move(l));
  }
}

Modifiers read_modifiers(const Reader& r, const Entries& e, const std::string& key, Modifiers m) {
  for (auto& [k, v] : e) {
    if (k == "det") m.det = r.number(v, key + ".det", 0, 1, false);
    if (k == "possessor") m.possessor = r.number(v, key + ".possessor", 0, 1, false);
    if (k == "adjective") m.adjective = r.number(v, key + ".adjective", 0, 1, false);
    if (k == "bare") m.bare = r.number(v, key + ".bare", 0, 1, false);
    if (k == "place") m.place = r.number(v, key + ".place", 0, 1, false);
  }
  return m;
}

// ---- constructions ----

int slot_index(const Construction& c, const std::string& name) {
  for (std::size_t i = 0; i < c.slots.size(); ++i)
    if (c.slots[i].name == name) return int(i);
  return -1;
}

std::vector<std::string> slot_names(const Construction& c) {
  std::vector<std::string> out;
  for (const Slot& s : c.slots) out.push_back(s.name);
  return out;
}

// A slot named in `text` at `key`, declared before slot `before` (slots are drawn in order).
int earlier_slot(const Reader& r, const YAML::Node& n, const std::string& key, const Construction& c, const std::string& name,
                 std::size_t before) {
  const int i = slot_index(c, name);
  if (i < 0) r.fail(n, key, "unknown slot '" + name + "' (slots: " + join_names(slot_names(c)) + ")" + did_you_mean(name, slot_names(c)));
  if (std::size_t(i) >= before)
    r.fail(n, key, "slot '" + name + "' must be declared before slot '" + c.slots[before].name + "' (slots are drawn in order)");
  return i;
}

void read_slot(const Reader& r, const std::string& name, const YAML::Node& n, const std::string& key, Construction& c, Spec& s) {
  if (!is_slot_name(name)) r.fail(n, key, "a slot name is capital letters and digits (V, S2), found '" + name + "'");
  Slot slot;
  slot.name = name;
  slot.line = line_of(n);
  const std::size_t self = c.slots.size();
  c.slots.push_back(slot);  // so that earlier_slot can name it
  const Entries e = r.map(n, key);
  const std::vector<std::string> kinds = {"verb", "noun", "result", "word"};
  std::string kind;
  for (auto& [k, v] : e)
    if (std::find(kinds.begin(), kinds.end(), k) != kinds.end()) {
      if (!kind.empty()) r.fail(v, key, "a slot is one of verb, noun, result, word: found both '" + kind + "' and '" + k + "'");
      kind = k;
    }
  if (kind.empty()) r.fail(n, key, "missing the slot's kind: one of the keys verb, noun, result, word");
  std::vector<std::string> allowed = {kind, "p", "unless"};
  if (kind == "noun") allowed.insert(allowed.end(), {"kinds", "det", "possessor", "adjective", "bare", "place"});
  if (kind == "result") allowed.push_back("uses");
  if (kind == "word") allowed.push_back("tags");
  r.fields(n, key, allowed, {});
  for (auto& [k, v] : e) {
    const std::string at = key + "." + k;
    if (k == "p") slot.p = r.number(v, at, 0, 1, true);
    if (k == "unless")
      for (const std::string& u : r.texts(v, at)) slot.unless.push_back(earlier_slot(r, v, at, c, u, self));
    if (k == "verb") {
      slot.kind = SlotKind::Verb;
      for (const std::string& t : r.texts(v, at)) {
        const Bits b = s.verb_tags.find(t);
        if (!b)
          r.fail(v, at, "no verb has the tag '" + t + "' (the verbs' tags: " + join_names(s.verb_tags.names) + ")" +
                            did_you_mean(t, s.verb_tags.names));
        slot.tags |= b;
      }
    }
    if (k == "noun") {
      slot.kind = SlotKind::Noun;
      for (const std::string& t : r.texts(v, at)) {
        const std::vector<std::string> w = split_spaces(t);
        const std::vector<std::string> roles = {"agent", "object", "recipient"};
        if (w.size() != 3 || w[1] != "of" || std::find(roles.begin(), roles.end(), w[0]) == roles.end())
          r.fail(v, at, "expected 'agent of V', 'object of V' or 'recipient of V', found '" + t + "'");
        const int verb = earlier_slot(r, v, at, c, w[2], self);
        if (c.slots[std::size_t(verb)].kind != SlotKind::Verb) r.fail(v, at, "slot '" + w[2] + "' is not a verb slot");
        slot.restrictions.push_back({w[0] == "agent" ? Role::Agent : w[0] == "object" ? Role::Object : Role::Recipient, verb});
      }
      slot.modifiers = read_modifiers(r, e, key, s.modifiers);
      if (const YAML::Node* kinds = get(e, "kinds")) {
        slot.kinds = 0;
        for (const std::string& k : r.texts(*kinds, key + ".kinds")) {
          const auto& names = kind_names();
          const auto it = std::find(names.begin(), names.end(), k);
          if (it == names.end())
            r.fail(*kinds, key + ".kinds", "expected noun kinds among " + join_names(names) + ", found '" + k + "'" + did_you_mean(k, names));
          slot.kinds |= 1u << (it - names.begin());
        }
      }
    }
    if (k == "result") {
      slot.kind = SlotKind::Result;
      slot.of = earlier_slot(r, v, at, c, r.text(v, at), self);
      if (c.slots[std::size_t(slot.of)].kind != SlotKind::Verb) r.fail(v, at, "slot '" + v.Scalar() + "' is not a verb slot");
      for (auto& other : c.slots)
        if (&other != &c.slots[self] && other.kind == SlotKind::Result && other.of == slot.of)
          r.fail(v, at, "verb slot '" + v.Scalar() + "' already has a result slot ('" + other.name + "')");
    }
    if (k == "word") {
      slot.kind = SlotKind::Word;
      const std::string l = r.text(v, at);
      for (std::size_t i = 0; i < s.lists.size(); ++i)
        if (s.lists[i].name == l) slot.list = int(i);
      if (slot.list < 0) {
        std::vector<std::string> lists;
        for (auto& x : s.lists) lists.push_back(x.name);
        r.fail(v, at, "unknown word list '" + l + "' (the lists under 'words': " + join_names(lists) + ")" + did_you_mean(l, lists));
      }
    }
  }
  for (auto& [k, v] : e) {
    const std::string at = key + "." + k;
    if (k == "uses")
      for (const std::string& u : r.texts(v, at)) {
        const Bits b = s.uses.find(u);
        if (!b) r.fail(v, at, "no result has the use '" + u + "' (the uses: " + join_names(s.uses.names) + ")" + did_you_mean(u, s.uses.names));
        slot.tags |= b;
      }
    if (k == "tags")
      for (const std::string& t : r.texts(v, at)) {
        const Bits b = s.word_tags.find(t);
        if (!b) r.fail(v, at, "no word has the tag '" + t + "' (the words' tags: " + join_names(s.word_tags.names) + ")" + did_you_mean(t, s.word_tags.names));
        slot.tags |= b;
      }
  }
  c.slots[self] = slot;
}

Template read_template(const Reader& r, const YAML::Node& n, const std::string& key, const Construction& c, bool en) {
  Template t;
  const std::vector<std::string> verb_forms = {"base", "present", "past", "pp"};
  const std::vector<std::string> noun_forms = {"subject", "object", "generic", "was", "has"};
  std::vector<int> count(c.slots.size(), 0);
  for (const std::string& w : split_spaces(r.text(n, key))) {
    const std::size_t colon = w.find(':');
    const std::string name = w.substr(0, colon);
    if (!is_slot_name(name)) {
      t.push_back({w, -1, Form::None});
      continue;
    }
    const int i = slot_index(c, name);
    if (i < 0) r.fail(n, key, "unknown slot '" + name + "' (slots: " + join_names(slot_names(c)) + ")" + did_you_mean(name, slot_names(c)));
    const Slot& s = c.slots[std::size_t(i)];
    Item item{"", i, Form::None};
    const std::string form = colon == std::string::npos ? "" : w.substr(colon + 1);
    if (!en && !form.empty()) r.fail(n, key, "'" + w + "': Chinese words have one form, write '" + name + "'");
    if (en && s.kind == SlotKind::Verb) {
      if (std::find(verb_forms.begin(), verb_forms.end(), form) == verb_forms.end())
        r.fail(n, key, "'" + w + "': a verb slot in English needs its form: " + name + ":base, " + name + ":present, " + name +
                           ":past or " + name + ":pp");
      item.form = form == "base" ? Form::Base : form == "present" ? Form::Present : form == "past" ? Form::Past : Form::Participle;
    } else if (en && s.kind == SlotKind::Noun) {
      if (std::find(noun_forms.begin(), noun_forms.end(), form) == noun_forms.end())
        r.fail(n, key, "'" + w + "': a noun slot in English needs its form: " + name + ":subject, " + name + ":object, " + name +
                           ":generic (or " + name + ":was, " + name + ":has)");
      item.form = form == "subject" ? Form::Subject : form == "object" ? Form::Object : form == "generic" ? Form::Generic
                  : form == "was"   ? Form::Was : Form::Has;
    } else if (!form.empty()) {
      r.fail(n, key, "'" + w + "': only verb and noun slots have forms in English, write '" + name + "'");
    }
    if (item.form != Form::Was && item.form != Form::Has) ++count[std::size_t(i)];
    t.push_back(item);
  }
  for (std::size_t i = 0; i < c.slots.size(); ++i)
    if (count[i] != 1)
      r.fail(n, key, "slot '" + c.slots[i].name + "' appears " + std::to_string(count[i]) + " times: each slot appears once in each word order");
  return t;
}

void read_links(const Reader& r, const YAML::Node& n, const std::string& key, Construction& c, const Spec& s) {
  for (auto& [rel, v] : r.map(n, key)) {
    const std::string at = key + "." + rel;
    const auto it = std::find(s.relations.begin(), s.relations.end(), rel);
    if (it == s.relations.end())
      r.fail(v, at, "unknown relation '" + rel + "' (relations: " + join_names(s.relations) + ")" + did_you_mean(rel, s.relations));
    for (const std::string& pair : r.texts(v, at)) {
      const std::vector<std::string> w = split_spaces(pair);
      if (w.size() != 2) r.fail(v, at, "expected two slots 'FROM TO' (at FROM's words, TO's head word), found '" + pair + "'");
      int ends[2];
      for (int k = 0; k < 2; ++k) {
        ends[k] = slot_index(c, w[std::size_t(k)]);
        if (ends[k] < 0)
          r.fail(v, at, "unknown slot '" + w[std::size_t(k)] + "' (slots: " + join_names(slot_names(c)) + ")" +
                            did_you_mean(w[std::size_t(k)], slot_names(c)));
      }
      if (ends[0] == ends[1]) r.fail(v, at, "a slot is not its own partner: '" + pair + "'");
      for (const Link& l : c.links)
        if (l.relation == int(it - s.relations.begin()) && l.from == ends[0])
          r.fail(v, at, "slot '" + w[0] + "' already has a partner under " + rel + " (a word has one partner per relation)");
      c.links.push_back({int(it - s.relations.begin()), ends[0], ends[1]});
    }
  }
}

void read_construction(const Reader& r, const YAML::Node& n, const std::string& key, Spec& s) {
  Construction c;
  c.line = line_of(n);
  const Entries e = r.fields(n, key, {"name", "weight", "example", "slots", "zh", "en", "relations"},
                             {"name", "weight", "example", "slots", "zh", "en", "relations"});
  c.name = r.word(*get(e, "name"), key + ".name");
  for (const Construction& o : s.constructions)
    if (o.name == c.name) r.fail(*get(e, "name"), key + ".name", "a construction named '" + c.name + "' comes before (line " + std::to_string(o.line) + ")");
  const std::string at = key + " (" + c.name + ")";
  c.weight = r.number(*get(e, "weight"), at + ".weight", 0, 1e9, true);
  const YAML::Node& ex = *get(e, "example");
  if (!ex.IsSequence() || ex.size() != 2) r.fail(ex, at + ".example", "expected [Chinese sentence, English sentence], found " + describe(ex));
  c.example[0] = r.text(ex[0], at + ".example[0]"), c.example[1] = r.text(ex[1], at + ".example[1]");
  c.example_line = line_of(ex);
  for (auto& [name, v] : r.map(*get(e, "slots"), at + ".slots")) read_slot(r, name, v, at + ".slots." + name, c, s);
  if (c.slots.empty()) r.fail(*get(e, "slots"), at + ".slots", "expected at least one slot");
  for (int l = 0; l < 2; ++l) {
    const char* lang = l == 0 ? "zh" : "en";
    const YAML::Node& orders = *get(e, lang);
    const std::vector<std::string> texts = r.texts(orders, at + "." + lang);
    for (std::size_t i = 0; i < texts.size(); ++i)
      c.orders[l].push_back(read_template(r, orders.IsSequence() ? orders[i] : orders, at + "." + lang + "[" + std::to_string(i) + "]", c, l == 1));
  }
  read_links(r, *get(e, "relations"), at + ".relations", c, s);
  // An English verb in the present agrees with its partner under `agreement`.
  for (const Template& t : c.orders[1])
    for (const Item& item : t)
      if (item.form == Form::Present &&
          std::none_of(c.links.begin(), c.links.end(), [&](const Link& l) { return l.relation == s.agreement && l.from == item.slot; }))
        r.fail(*get(e, "en"), at + ".en", c.slots[std::size_t(item.slot)].name + ":present agrees with its " + s.relations[std::size_t(s.agreement)] +
                                      " partner, and the construction gives it none under relations");
  s.constructions.push_back(std::move(c));
}

int relation_index(const Reader& r, const YAML::Node& n, const std::string& key, const Spec& s) {
  const std::string name = r.text(n, key);
  const auto it = std::find(s.relations.begin(), s.relations.end(), name);
  if (it == s.relations.end())
    r.fail(n, key, "unknown relation '" + name + "' (relations: " + join_names(s.relations) + ")" + did_you_mean(name, s.relations));
  return int(it - s.relations.begin());
}

}  // namespace

Spec parse_spec(const std::string& text, const std::string& file) {
  const Reader r(file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    r.fail(e.mark.is_null() ? 0 : e.mark.line + 1, "YAML", e.msg);
  }
  if (!root.IsMap()) r.fail(root, "grammar file", "expected a mapping of keys (grammar, relations, nouns, verbs, constructions, ...), found " + describe(root));
  const Entries e = r.fields(root, "grammar file",
                             {"grammar", "relations", "modifier_relation", "agreement", "classes", "noun_phrase", "nouns", "verbs",
                              "adjectives", "determiners", "places", "words", "learners", "constructions"},
                             {"grammar", "relations", "modifier_relation", "agreement", "classes", "noun_phrase", "nouns", "verbs",
                              "learners", "constructions"});
  Spec s;
  s.file = file;
  s.name = r.word(*get(e, "grammar"), "grammar");
  s.relations = r.texts(*get(e, "relations"), "relations");
  for (std::size_t i = 0; i < s.relations.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (s.relations[i] == s.relations[j]) r.fail(*get(e, "relations"), "relations", "'" + s.relations[i] + "' is given twice");
  s.modifier_relation = relation_index(r, *get(e, "modifier_relation"), "modifier_relation", s);
  s.agreement = relation_index(r, *get(e, "agreement"), "agreement", s);
  for (const std::string& c : r.texts(*get(e, "classes"), "classes")) s.classes.bit(c);
  if (s.classes.names.size() > 64) r.fail(*get(e, "classes"), "classes", "at most 64 classes, found " + std::to_string(s.classes.names.size()));
  const Entries np = r.fields(*get(e, "noun_phrase"), "noun_phrase", {"det", "possessor", "adjective", "bare", "place"},
                              {"det", "possessor", "adjective", "bare"});
  s.modifiers = read_modifiers(r, np, "noun_phrase", {});
  for (auto& [zh, v] : r.map(*get(e, "nouns"), "nouns")) s.nouns.push_back(read_noun(r, zh, v, "nouns." + zh, s.classes));
  for (auto& [zh, v] : r.map(*get(e, "verbs"), "verbs")) read_verb(r, zh, v, "verbs." + zh, s);
  if (s.nouns.empty()) r.fail(*get(e, "nouns"), "nouns", "expected at least one noun");
  if (s.verbs.empty()) r.fail(*get(e, "verbs"), "verbs", "expected at least one verb");
  if (s.verb_tags.names.size() > 64 || s.uses.names.size() > 64)
    r.fail(*get(e, "verbs"), "verbs", "at most 64 tags and 64 uses");
  if (auto* a = get(e, "adjectives"))
    for (auto& [zh, v] : r.map(*a, "adjectives")) {
      Adjective adj;
      adj.zh = zh;
      for (auto& [k, x] : r.fields(v, "adjectives." + zh, {"en", "de", "heads", "order"}, {"en", "heads"})) {
        const std::string at = "adjectives." + zh + "." + k;
        if (k == "en") adj.en = r.word(x, at);
        if (k == "de") adj.de = r.flag(x, at);
        if (k == "heads") adj.heads = r.known(x, at, s.classes, "class");
        if (k == "order") adj.order = int(r.number(x, at, 1, 9, false));
      }
      s.adjectives.push_back(adj);
    }
  if (auto* d = get(e, "determiners"))
    for (auto& [zh, v] : r.map(*d, "determiners")) {
      const Entries de = r.fields(v, "determiners." + zh, {"en"}, {"en"});
      s.determiners.push_back({zh, r.word(*get(de, "en"), "determiners." + zh + ".en")});
    }
  if (auto* pl = get(e, "places"))
    for (auto& [zh, v] : r.map(*pl, "places")) {
      Place place;
      place.zh = zh;
      for (auto& [k, x] : r.fields(v, "places." + zh, {"en", "nouns", "heads"}, {"en", "nouns", "heads"})) {
        const std::string at = "places." + zh + "." + k;
        if (k == "en") place.en = r.word(x, at);
        if (k == "nouns") place.nouns = r.known(x, at, s.classes, "class");
        if (k == "heads") place.heads = r.known(x, at, s.classes, "class");
      }
      s.places.push_back(place);
    }
  if (auto* w = get(e, "words")) read_words(r, *w, s);
  if (s.word_tags.names.size() > 64) r.fail(*get(e, "words"), "words", "at most 64 tags");
  const Entries learners = r.fields(*get(e, "learners"), "learners", {"zh", "en"}, {"zh", "en"});
  for (int l = 0; l < 2; ++l) {
    const YAML::Node& v = *get(learners, l == 0 ? "zh" : "en");
    s.learners[l] = r.texts(v, std::string("learners.") + (l == 0 ? "zh" : "en"));
    s.learners_line[l] = line_of(v);
  }
  const YAML::Node& cs = *get(e, "constructions");
  if (!cs.IsSequence() || cs.size() == 0) r.fail(cs, "constructions", "expected a list of constructions, found " + describe(cs));
  for (std::size_t i = 0; i < cs.size(); ++i) read_construction(r, cs[i], "constructions[" + std::to_string(i) + "]", s);
  return s;
}

}  // namespace qkv::data::gram
