// The engine of the grammar files (share/grammar/v2.yaml, or a user's): one interpreter of the
// data that grammar_spec.cpp reads. It draws a sentence (a construction by weight, its slots in
// order, each uniform among the lexicon entries that fit what is already drawn, checked, redrawn
// until it fits), writes it in Chinese or English, gives each word its relations, and reads a
// typed sentence back (a search over the constructions' word orders, then the same checks, so a
// typed sentence is told which rule it breaks). docs/tasks.md ("Grammar v2") describes it.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "grammar_spec.hpp"
#include "grammar_text.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/tensor/names.hpp"

namespace qkv::data {

// The built-in grammar files' text (generated from share/grammar/ by CMake: grammar_files.cpp.in).
const std::string& grammar_file_v2();

namespace {

using namespace gram;

constexpr int kZh = 0, kEn = 1;
Language language_of(int l) { return l == kZh ? Language::Zh : Language::En; }

// ---- frames: a drawn or analysed sentence, independent of its language ----

struct Phrase {
  int noun = -1, det = -1, possessor = -1, adjective = -1, bare = -1, place = -1, place_noun = -1;
};

struct Value {
  bool present = false;
  int entry = -1;  // verb, result (into Spec::results), word of the slot's list
  Phrase np;       // noun slots
};

struct Frame {
  int construction = -1, order = 0;
  std::vector<Value> values;  // one per slot
};

// A word as written, with where it comes from: a slot's head (the verb, the noun, the word), a
// modifier of a noun phrase, or a function word (literals, 的, "the", "was").
enum class Part { Function, Head, Modifier };
struct Out {
  std::string text;
  int slot;
  Part part;
};
using Outs = std::vector<Out>;

bool vowel(const std::string& w) { return !w.empty() && std::string("aeiou").find(w[0]) != std::string::npos; }

class Engine {
 public:
  explicit Engine(Spec spec) : s_(std::move(spec)) {
    for (const Construction& c : s_.constructions) total_weight_ += c.weight;
    for (std::size_t a = 0; a < s_.adjectives.size(); ++a) (s_.adjectives[a].de ? de_adjectives_ : bare_adjectives_).push_back(int(a));
    for (std::size_t n = 0; n < s_.nouns.size(); ++n)
      if (!s_.nouns[n].possessive.empty()) possessors_.push_back(int(n));
    for (int l : {kZh, kEn}) {
      lexicon_[l] = lexicon_words(l);
      tokenizer_[l] = std::make_unique<Tokenizer>(l == kZh ? Tokenizer::chars(decode_utf8(join_all(lexicon_[l]), s_.file))
                                                           : Tokenizer::words(lexicon_[l]));
    }
  }

  const Spec& spec() const { return s_; }
  const std::vector<std::string>& lexicon(int l) const { return lexicon_[l]; }
  const Tokenizer& tokenizer(int l) const { return *tokenizer_[l]; }

  // ---- drawing ----

  Frame draw(Generator& gen, int l) const {
    double u = gen.uniform() * total_weight_;
    std::size_t c = 0;
    while (c + 1 < s_.constructions.size() && u >= s_.constructions[c].weight) u -= s_.constructions[c++].weight;
    return draw(gen, int(c), l);
  }

  // A sentence of construction c: its slots drawn until the frame breaks no rule.
  Frame draw(Generator& gen, int c, int l) const {
    const Construction& con = s_.constructions[std::size_t(c)];
    for (int attempt = 0; attempt < 10000; ++attempt) {
      Frame f;
      f.construction = c;
      f.values.resize(con.slots.size());
      if (fill(gen, con, f) && violation(f).empty()) {
        f.order = int(gen.randint(con.orders[l].size()));
        return f;
      }
    }
    throw ValueError(s_.file + ":" + std::to_string(con.line) + ": construction '" + con.name +
                     "': no sentence fits its slots in 10000 draws (do its restrictions leave a word for every slot?)");
  }

  // ---- writing ----

  Outs realise(const Frame& f, int l) const {
    const Construction& c = s_.constructions[std::size_t(f.construction)];
    Outs out;
    for (const Item& item : c.orders[l][std::size_t(f.order)]) write(f, l, item, out);
    return out;
  }

  // The words of one item of a word order (none for a slot left out).
  void write(const Frame& f, int l, const Item& item, Outs& out) const {
    if (item.slot < 0) {
      out.push_back({item.literal, -1, Part::Function});
      return;
    }
    const Value& v = f.values[std::size_t(item.slot)];
    if (!v.present) return;
    const Slot& slot = s_.constructions[std::size_t(f.construction)].slots[std::size_t(item.slot)];
    switch (slot.kind) {
      case SlotKind::Verb:
        add(out, l == kZh ? s_.verbs[std::size_t(v.entry)].zh : verb_forms(f, item).front(), item.slot, Part::Head);
        break;
      case SlotKind::Result: {
        const Result& r = s_.results[std::size_t(v.entry)];
        add(out, l == kZh ? r.zh : r.en, item.slot, Part::Head);
        break;
      }
      case SlotKind::Word: {
        const Word& w = s_.lists[std::size_t(slot.list)].words[std::size_t(v.entry)];
        add(out, l == kZh ? w.zh : w.en, item.slot, Part::Head);
        break;
      }
      case SlotKind::Noun:
        if (item.form == Form::Was || item.form == Form::Has)
          out.push_back({auxiliary(s_.nouns[std::size_t(v.np.noun)], item.form), -1, Part::Function});
        else
          phrase(v.np, l, item.form, item.slot, out);
        break;
    }
  }

  // The partners of each word: a construction's links (at the words of `from`, the head word of
  // `to`), and every noun modifier's head under the modifier relation.
  std::vector<std::vector<Index>> partners(const Frame& f, const Outs& words) const {
    const Construction& c = s_.constructions[std::size_t(f.construction)];
    std::vector<Index> head(c.slots.size(), -1);
    for (std::size_t i = 0; i < words.size(); ++i)
      if (words[i].part == Part::Head && head[std::size_t(words[i].slot)] < 0) head[std::size_t(words[i].slot)] = Index(i);
    std::vector<std::vector<Index>> p(s_.relations.size(), std::vector<Index>(words.size(), -1));
    for (std::size_t i = 0; i < words.size(); ++i) {
      if (words[i].part == Part::Modifier) p[std::size_t(s_.modifier_relation)][i] = head[std::size_t(words[i].slot)];
      if (words[i].part != Part::Head) continue;
      for (const Link& link : c.links)
        if (link.from == words[i].slot) p[std::size_t(link.relation)][i] = head[std::size_t(link.to)];
    }
    return p;
  }

  GrammarSentence sentence(const Frame& f, int l) const {
    const Outs words = realise(f, l);
    GrammarSentence s;
    s.construction = s_.constructions[std::size_t(f.construction)].name;
    s.partners = partners(f, words);
    for (std::size_t i = 0; i < words.size(); ++i) {
      s.text += (l == kEn && i ? " " : "") + words[i].text;
      s.words.push_back(words[i].text);
      for (Index id : tokenizer(l).encode(std::string_view(words[i].text), false, s_.file)) {
        s.tokens.push_back(id);
        s.token_words.push_back(Index(i));
      }
    }
    return s;
  }

  // ---- reading ----

  // The frame of a sentence (canonical text); `only` >= 0 searches that construction alone.
  // Returns false with `problem` set when no frame of the grammar writes it.
  bool analyse(int l, const std::string& text, Frame& found, std::string& problem, int only = -1) const {
    Search search(*this, l, text);
    for (std::size_t c = 0; c < s_.constructions.size(); ++c) {
      if (only >= 0 && int(c) != only) continue;
      for (std::size_t o = 0; o < s_.constructions[c].orders[l].size(); ++o)
        if (search.run(int(c), int(o))) {
          found = search.found;
          return true;
        }
    }
    problem = !search.reason.empty() ? search.reason
                                     : astray(l == kZh ? Language::Zh : Language::En, text, search.reached, lexicon_[l]);
    return false;
  }

  // No sentence has more tokens than this: per word order, the longest writing of each item.
  std::size_t max_tokens(int l) const {
    const Tokenizer& tk = tokenizer(l);
    auto len = [&](const std::string& w) { return w.empty() ? 0 : tk.encode(std::string_view(w), false, s_.file).size(); };
    auto longest = [&](auto&& entries, auto&& text) {
      std::size_t m = 0;
      for (auto& e : entries) m = std::max(m, len(text(e)));
      return m;
    };
    const std::size_t noun = longest(s_.nouns, [&](const Noun& n) { return l == kZh ? n.zh : n.plural; });
    const std::size_t classifier = longest(s_.nouns, [&](const Noun& n) { return l == kZh ? n.classifier : ""; });
    const std::size_t det = longest(s_.determiners, [&](const Determiner& d) { return l == kZh ? d.zh : d.en; });
    const std::size_t poss = longest(s_.nouns, [&](const Noun& n) { return n.possessive.empty() ? "" : l == kZh ? n.zh : n.possessive; });
    std::size_t adj[2] = {0, 0};  // de, bare
    for (const Adjective& a : s_.adjectives) adj[a.de ? 0 : 1] = std::max(adj[a.de ? 0 : 1], len(l == kZh ? a.zh : a.en));
    const std::size_t place = longest(s_.places, [&](const Place& p) { return l == kZh ? p.zh : p.en; });
    std::size_t verb = 0, result = 0;
    for (const Verb& v : s_.verbs) verb = std::max(verb, l == kZh ? len(v.zh) : std::size_t(1));
    for (const Result& r : s_.results) result = std::max(result, len(l == kZh ? r.zh : r.en));
    std::size_t best = 0;
    for (const Construction& c : s_.constructions)
      for (const Template& t : c.orders[l]) {
        std::size_t n = 0;
        for (const Item& item : t) {
          if (item.slot < 0) {
            n += len(item.literal);
            continue;
          }
          const Slot& slot = c.slots[std::size_t(item.slot)];
          if (slot.kind == SlotKind::Verb) n += verb;
          if (slot.kind == SlotKind::Result) n += result;
          if (slot.kind == SlotKind::Word) n += longest(s_.lists[std::size_t(slot.list)].words, [&](const Word& w) { return l == kZh ? w.zh : w.en; });
          if (slot.kind != SlotKind::Noun) continue;
          if (item.form == Form::Was || item.form == Form::Has) {
            ++n;
            continue;
          }
          const Modifiers& m = slot.modifiers;
          const std::size_t de = l == kZh ? 1 : 0;  // 的
          n += noun + std::max({m.det > 0 ? det + (l == kZh ? classifier : 0) : 0, m.possessor > 0 ? poss + de : 0,
                                std::size_t(l == kEn ? 1 : 0)});  // en: "the"
          n += (m.adjective > 0 ? adj[0] + de : 0) + (m.bare > 0 ? adj[1] : 0);
          if (m.place > 0 && !s_.places.empty()) n += noun + place + 1;  // zh 的, en "the"
        }
        best = std::max(best, n);
      }
    return best;
  }

  // "" when the frame is a sentence of the grammar, else the rule it breaks (checked slot by
  // slot in order, so the message names the first problem a reader meets).
  std::string violation(const Frame& f) const {
    const Construction& c = s_.constructions[std::size_t(f.construction)];
    const std::string here = " in construction '" + c.name + "'";
    std::set<int> heads;
    for (std::size_t i = 0; i < c.slots.size(); ++i) {
      const Slot& slot = c.slots[i];
      const Value& v = f.values[i];
      if (!v.present) {
        if (slot.kind == SlotKind::Result && f.values[std::size_t(slot.of)].present &&
            s_.verbs[std::size_t(f.values[std::size_t(slot.of)].entry)].needs_result)
          return s_.verbs[std::size_t(f.values[std::size_t(slot.of)].entry)].zh + " needs a result complement";
        continue;
      }
      for (int u : slot.unless)
        if (f.values[std::size_t(u)].present)
          return gloss(f, int(i)) + " does not go with " + gloss(f, u) + here;
      switch (slot.kind) {
        case SlotKind::Verb: {
          const Verb& verb = s_.verbs[std::size_t(v.entry)];
          if ((verb.tags & slot.tags) != slot.tags) return gloss(f, int(i)) + " is not used" + here;
          if (verb.needs_result && result_slot(c, int(i)) < 0) return verb.zh + " needs a result complement";
          break;
        }
        case SlotKind::Result: {
          const Result& r = s_.results[std::size_t(v.entry)];
          if (r.verb != f.values[std::size_t(slot.of)].entry)
            return r.zh + " is not a result of " + s_.verbs[std::size_t(f.values[std::size_t(slot.of)].entry)].zh;
          if ((r.uses & slot.tags) != slot.tags) return gloss(f, slot.of) + " is not used" + here;
          break;
        }
        case SlotKind::Word: {
          const Word& w = s_.lists[std::size_t(slot.list)].words[std::size_t(v.entry)];
          if ((w.tags & slot.tags) != slot.tags) return gloss(w) + " does not go" + here;
          break;
        }
        case SlotKind::Noun: {
          const Noun& n = s_.nouns[std::size_t(v.np.noun)];
          if (!(slot.kinds & (1u << unsigned(n.kind)))) return gloss(n) + " is not used as " + slot.name + here;
          for (const Restriction& r : slot.restrictions) {
            if (!f.values[std::size_t(r.verb)].present) continue;
            if (!(classes_of(f, r) & n.classes)) {
              const std::string verb = gloss(f, r.verb);
              if (r.role == Role::Agent) return gloss(n) + " cannot be the subject of " + verb;
              return verb + " does not take " + gloss(n) + " as its " + (r.role == Role::Object ? "object" : "recipient");
            }
          }
          const std::string problem = phrase_problem(v.np);
          if (!problem.empty()) return problem;
          if (!heads.insert(v.np.noun).second) return gloss(n) + " cannot fill two places in one sentence";
          break;
        }
      }
    }
    return "";
  }

 private:
  // ---- the lexicon's words ----

  static std::string join_all(const std::vector<std::string>& words) {
    std::string s;
    for (const std::string& w : words) s += w;
    return s;
  }

  // Every word the writers can produce (en: split at spaces), sorted, distinct.
  std::vector<std::string> lexicon_words(int l) const {
    std::vector<std::string> w;
    auto add = [&](const std::string& s) {
      if (!s.empty()) w.push_back(s);
    };
    auto add_all = [&](const std::vector<std::string>& v) {
      for (const std::string& s : v) add(s);
    };
    for (const Noun& n : s_.nouns)
      l == kZh ? (add(n.zh), add(n.classifier)) : (add(n.en), add(n.plural), add(n.object), add(n.possessive));
    for (const Verb& v : s_.verbs) l == kZh ? add(v.zh) : add_all(v.en);
    for (const Result& r : s_.results) l == kZh ? add(r.zh) : (add(r.en), add_all(r.en_verb));
    for (const Adjective& a : s_.adjectives) add(l == kZh ? a.zh : a.en);
    for (const Determiner& d : s_.determiners) add(l == kZh ? d.zh : d.en);
    for (const Place& p : s_.places) add(l == kZh ? p.zh : p.en);
    for (const WordList& list : s_.lists)
      for (const Word& x : list.words) add(l == kZh ? x.zh : x.en);
    for (const Construction& c : s_.constructions)
      for (const Template& t : c.orders[l])
        for (const Item& item : t)
          if (item.slot < 0) add(item.literal);
    if (l == kZh) add("的");
    if (l == kEn)
      for (const char* x : {"the", "an", "was", "were", "has", "have"}) add(x);
    return lexicon_list(std::move(w), language_of(l));
  }

  // ---- glosses in messages, both languages: "吃 (eat)" ----

  static std::string gloss(const Noun& n) { return n.zh + " (" + n.en + ")"; }
  static std::string gloss(const Word& w) { return w.zh + (w.en.empty() ? "" : " (" + w.en + ")"); }
  std::string gloss(const Frame& f, int slot) const {
    const Construction& c = s_.constructions[std::size_t(f.construction)];
    const Slot& s = c.slots[std::size_t(slot)];
    const Value& v = f.values[std::size_t(slot)];
    switch (s.kind) {
      case SlotKind::Noun: return gloss(s_.nouns[std::size_t(v.np.noun)]);
      case SlotKind::Word: return gloss(s_.lists[std::size_t(s.list)].words[std::size_t(v.entry)]);
      case SlotKind::Result: return gloss(f, s.of);
      case SlotKind::Verb: break;
    }
    const Verb& verb = s_.verbs[std::size_t(v.entry)];
    const Result* r = result(f, slot);
    const std::string en = r && !r->en_verb.empty() ? r->en_verb[0] : verb.en[0];
    return verb.zh + (r ? r->zh : "") + " (" + en + (r && !r->en.empty() ? " " + r->en : "") + ")";
  }

  // ---- slots and their restrictions ----

  static int result_slot(const Construction& c, int verb) {
    for (std::size_t i = 0; i < c.slots.size(); ++i)
      if (c.slots[i].kind == SlotKind::Result && c.slots[i].of == verb) return int(i);
    return -1;
  }
  // The result drawn for verb slot `verb`, or nullptr.
  const Result* result(const Frame& f, int verb) const {
    const int r = result_slot(s_.constructions[std::size_t(f.construction)], verb);
    return r >= 0 && f.values[std::size_t(r)].present ? &s_.results[std::size_t(f.values[std::size_t(r)].entry)] : nullptr;
  }
  // The classes a restriction asks for: the verb's, or its result's when that has its own.
  Bits classes_of(const Frame& f, const Restriction& r) const {
    const Verb& v = s_.verbs[std::size_t(f.values[std::size_t(r.verb)].entry)];
    const Result* res = result(f, r.verb);
    if (r.role == Role::Agent) return res && res->agents ? res->agents : v.agents;
    if (r.role == Role::Object) return res && res->objects ? res->objects : v.objects;
    return v.recipients;
  }

  bool takes_determiner(const Noun& n) const {
    return (n.kind == NounKind::Thing || n.kind == NounKind::Person) && !n.classifier.empty();
  }
  bool takes_adjective(const Noun& n, const Adjective& a) const {
    return (n.kind == NounKind::Thing || n.kind == NounKind::Person) && (n.classes & a.heads);
  }
  // Pronouns and names take no possessor; kin only a pronoun or a name (我妈妈, 小明妈妈).
  bool takes_possessor(int head, int possessor) const {
    const NounKind k = s_.nouns[std::size_t(head)].kind, p = s_.nouns[std::size_t(possessor)].kind;
    return head != possessor && k != NounKind::Pronoun && k != NounKind::Name &&
           (k != NounKind::Kin || p == NounKind::Pronoun || p == NounKind::Name);
  }

  // "" when the phrase's modifiers fit its noun, else why not.
  std::string phrase_problem(const Phrase& p) const {
    const Noun& n = s_.nouns[std::size_t(p.noun)];
    if (p.det >= 0 && !takes_determiner(n))
      return gloss(n) + " takes no determiner (" + s_.determiners[std::size_t(p.det)].zh + ")";
    if (p.det >= 0 && p.possessor >= 0) return gloss(n) + " takes a determiner or a possessor, not both";
    if (p.possessor >= 0 && !takes_possessor(p.noun, p.possessor))
      return gloss(s_.nouns[std::size_t(p.possessor)]) + " cannot possess " + gloss(n);
    for (int a : {p.adjective, p.bare})
      if (a >= 0 && !takes_adjective(n, s_.adjectives[std::size_t(a)]))
        return s_.adjectives[std::size_t(a)].zh + " (" + s_.adjectives[std::size_t(a)].en + ") cannot modify " + gloss(n);
    if (p.place >= 0) {
      const Place& place = s_.places[std::size_t(p.place)];
      const std::string where = gloss(s_.nouns[std::size_t(p.place_noun)]) + " " + place.zh + " (" + place.en + ")";
      if (!(place.heads & n.classes) || (n.kind != NounKind::Thing && n.kind != NounKind::Person))
        return gloss(n) + " cannot be " + where;
      if (!takes_place(p, p.place_noun)) return gloss(s_.nouns[std::size_t(p.place_noun)]) + " is not a place " + place.zh + " (" + place.en + ")";
    }
    return "";
  }

  // One of [0, n) uniformly among those `ok` accepts; -1 when none is.
  template <class Ok>
  static int pick(Generator& gen, std::size_t n, Ok ok) {
    std::vector<int> fits;
    for (std::size_t i = 0; i < n; ++i)
      if (ok(int(i))) fits.push_back(int(i));
    return fits.empty() ? -1 : fits[gen.randint(fits.size())];
  }
  template <class Ok>
  static int pick_of(Generator& gen, const std::vector<int>& among, Ok ok) {
    const int i = pick(gen, among.size(), [&](int k) { return ok(among[std::size_t(k)]); });
    return i < 0 ? -1 : among[std::size_t(i)];
  }

  // Draws the slots in order, each among the entries that fit the slots drawn before it.
  bool fill(Generator& gen, const Construction& c, Frame& f) const {
    for (std::size_t i = 0; i < c.slots.size(); ++i) {
      const Slot& slot = c.slots[i];
      Value& v = f.values[i];
      if (std::any_of(slot.unless.begin(), slot.unless.end(), [&](int u) { return f.values[std::size_t(u)].present; })) continue;
      if (slot.p < 1 && gen.uniform() >= slot.p) continue;
      v.present = true;
      switch (slot.kind) {
        case SlotKind::Verb:
          v.entry = pick(gen, s_.verbs.size(), [&](int k) { return (s_.verbs[std::size_t(k)].tags & slot.tags) == slot.tags; });
          break;
        case SlotKind::Result: {
          if (!f.values[std::size_t(slot.of)].present) return false;
          const std::vector<int>& rs = s_.verbs[std::size_t(f.values[std::size_t(slot.of)].entry)].results;
          v.entry = pick_of(gen, rs, [&](int r) { return (s_.results[std::size_t(r)].uses & slot.tags) == slot.tags; });
          break;
        }
        case SlotKind::Word: {
          const auto& words = s_.lists[std::size_t(slot.list)].words;
          v.entry = pick(gen, words.size(), [&](int k) { return (words[std::size_t(k)].tags & slot.tags) == slot.tags; });
          break;
        }
        case SlotKind::Noun:
          v.np.noun = pick(gen, s_.nouns.size(), [&](int k) {
            if (!(slot.kinds & (1u << unsigned(s_.nouns[std::size_t(k)].kind)))) return false;
            for (const Restriction& r : slot.restrictions)
              if (f.values[std::size_t(r.verb)].present && !(classes_of(f, r) & s_.nouns[std::size_t(k)].classes)) return false;
            for (std::size_t j = 0; j < i; ++j)
              if (f.values[j].present && f.values[j].np.noun == k) return false;
            return true;
          });
          if (v.np.noun >= 0) modifiers(gen, slot.modifiers, v.np);
          break;
      }
      if (v.entry < 0 && v.np.noun < 0) return false;
    }
    return true;
  }

  void modifiers(Generator& gen, const Modifiers& m, Phrase& p) const {
    const Noun& n = s_.nouns[std::size_t(p.noun)];
    if (gen.uniform() < m.det && takes_determiner(n) && !s_.determiners.empty()) p.det = int(gen.randint(s_.determiners.size()));
    if (gen.uniform() < m.possessor && p.det < 0) p.possessor = pick_of(gen, possessors_, [&](int k) { return takes_possessor(p.noun, k); });
    const auto fits = [&](int a) { return takes_adjective(n, s_.adjectives[std::size_t(a)]); };
    if (gen.uniform() < m.adjective) p.adjective = pick_of(gen, de_adjectives_, fits);
    if (gen.uniform() < m.bare) p.bare = pick_of(gen, bare_adjectives_, fits);
    if (gen.uniform() < m.place && (n.kind == NounKind::Thing || n.kind == NounKind::Person)) {
      p.place = pick(gen, s_.places.size(), [&](int k) { return (s_.places[std::size_t(k)].heads & n.classes) != 0; });
      if (p.place >= 0)
        p.place_noun = pick(gen, s_.nouns.size(), [&](int k) { return takes_place(p, k); });
      if (p.place_noun < 0) p.place = -1;
    }
  }
  // Whether noun k may be the place of phrase p (桌子 in 桌子上的猫): of the place's classes, a
  // thing, not the head.
  bool takes_place(const Phrase& p, int k) const {
    const Noun& n = s_.nouns[std::size_t(k)];
    return k != p.noun && n.kind == NounKind::Thing && (n.classes & s_.places[std::size_t(p.place)].nouns);
  }

  // ---- writing ----

  static void add(Outs& out, const std::string& text, int slot, Part part) {
    for (std::string& w : split_words(text)) out.push_back({std::move(w), slot, part});
  }
  static bool third_singular(const Noun& n) { return n.person == 3 && n.number != Number::Plural; }
  // "was" or "were", "has" or "have", agreeing with n (i was, you were, he has, i have).
  static const char* auxiliary(const Noun& n, Form form) {
    if (form == Form::Was) return n.number != Number::Plural && n.person != 2 ? "was" : "were";
    return third_singular(n) ? "has" : "have";
  }

  // The English form of a verb item: one word, or both present forms while its subject (the
  // partner under `agreement`) is not drawn or read yet.
  std::vector<std::string> verb_forms(const Frame& f, const Item& item) const {
    const Verb& v = s_.verbs[std::size_t(f.values[std::size_t(item.slot)].entry)];
    const Result* r = result(f, item.slot);
    const std::vector<std::string>& forms = r && !r->en_verb.empty() ? r->en_verb : v.en;
    switch (item.form) {
      case Form::Base: return {forms[0]};
      case Form::Past: return {forms[2]};
      case Form::Participle: return {forms[3]};
      default: break;
    }
    for (const Link& link : s_.constructions[std::size_t(f.construction)].links)
      if (link.relation == s_.agreement && link.from == item.slot && f.values[std::size_t(link.to)].np.noun >= 0)
        return {third_singular(s_.nouns[std::size_t(f.values[std::size_t(link.to)].np.noun)]) ? forms[1] : forms[0]};
    return {forms[1], forms[0]};
  }

  // A noun phrase. zh: [determiner classifier | possessor (的)] [adjective 的] [bare adjective]
  // noun. en: [determiner | possessor | the] adjectives (by order) noun; a pronoun by its case; a
  // generic count noun in the plural without "the".
  void phrase(const Phrase& p, int l, Form form, int slot, Outs& out) const {
    const Noun& n = s_.nouns[std::size_t(p.noun)];
    if (l == kZh) {
      if (p.place >= 0) {
        out.push_back({s_.nouns[std::size_t(p.place_noun)].zh, slot, Part::Modifier});
        out.push_back({s_.places[std::size_t(p.place)].zh, slot, Part::Function});
        out.push_back({"的", slot, Part::Function});
      }
      if (p.det >= 0) {
        out.push_back({s_.determiners[std::size_t(p.det)].zh, slot, Part::Modifier});
        out.push_back({n.classifier, slot, Part::Modifier});
      } else if (p.possessor >= 0) {
        out.push_back({s_.nouns[std::size_t(p.possessor)].zh, slot, Part::Modifier});
        if (!n.close) out.push_back({"的", slot, Part::Function});
      }
      if (p.adjective >= 0) {
        out.push_back({s_.adjectives[std::size_t(p.adjective)].zh, slot, Part::Modifier});
        out.push_back({"的", slot, Part::Function});
      }
      if (p.bare >= 0) out.push_back({s_.adjectives[std::size_t(p.bare)].zh, slot, Part::Modifier});
      out.push_back({n.zh, slot, Part::Head});
      return;
    }
    if (n.kind == NounKind::Pronoun) {
      out.push_back({form == Form::Subject ? n.en : n.object, slot, Part::Head});
      return;
    }
    const bool generic = form == Form::Generic;
    const std::size_t first = out.size();
    if (p.det >= 0)
      out.push_back({s_.determiners[std::size_t(p.det)].en, slot, Part::Modifier});
    else if (p.possessor >= 0)
      out.push_back({s_.nouns[std::size_t(p.possessor)].possessive, slot, Part::Modifier});
    else if ((n.kind == NounKind::Thing || n.kind == NounKind::Person) && !generic)
      out.push_back({"the", slot, Part::Function});
    std::vector<int> adjectives;
    for (int a : {p.adjective, p.bare})
      if (a >= 0) adjectives.push_back(a);
    std::stable_sort(adjectives.begin(), adjectives.end(),
                     [&](int a, int b) { return s_.adjectives[std::size_t(a)].order < s_.adjectives[std::size_t(b)].order; });
    for (int a : adjectives) out.push_back({s_.adjectives[std::size_t(a)].en, slot, Part::Modifier});
    const bool plural = generic && p.det < 0 && n.number == Number::Count && n.kind != NounKind::Name && n.kind != NounKind::Kin;
    out.push_back({plural ? n.plural : n.en, slot, Part::Head});
    if (p.det >= 0 && out[first].text == "a" && vowel(out[first + 1].text)) out[first].text = "an";
    if (p.place >= 0) {
      const Noun& where = s_.nouns[std::size_t(p.place_noun)];
      out.push_back({s_.places[std::size_t(p.place)].en, slot, Part::Function});
      if (where.kind == NounKind::Thing) out.push_back({"the", slot, Part::Function});
      out.push_back({where.en, slot, Part::Modifier});
    }
  }

  // ---- reading: a depth-first search over one word order, items left to right ----

  struct Search {
    Search(const Engine& e, int language, const std::string& text) : e(e), s(e.s_), l(language), text(text) {
      const std::vector<std::string> words = split_words(text);
      tokens = l == kEn ? words : std::vector<std::string>{};
      present.insert(words.begin(), words.end());
      end = l == kZh ? text.size() : tokens.size();
      for (std::size_t n = 0; n < s.nouns.size(); ++n)
        if (occurs(l == kZh ? s.nouns[n].zh : s.nouns[n].en) || (l == kEn && (occurs(s.nouns[n].plural) || occurs(s.nouns[n].object))))
          nouns.push_back(int(n));
      for (int n : e.possessors_)
        if (occurs(l == kZh ? s.nouns[std::size_t(n)].zh : s.nouns[std::size_t(n)].possessive)) possessors.push_back(n);
      for (std::size_t d = 0; d < s.determiners.size(); ++d)
        if (occurs(l == kZh ? s.determiners[d].zh : s.determiners[d].en) || (l == kEn && occurs("an"))) dets.push_back(int(d));
      for (std::size_t a = 0; a < s.adjectives.size(); ++a)
        if (occurs(l == kZh ? s.adjectives[a].zh : s.adjectives[a].en)) (s.adjectives[a].de ? des : bares).push_back(int(a));
      for (std::size_t p = 0; p < s.places.size(); ++p)
        if (occurs(l == kZh ? s.places[p].zh : s.places[p].en)) places.push_back(int(p));
    }

    // True when some frame of construction c, order o, writes the text and breaks no rule.
    bool run(int c, int o) {
      con = &s.constructions[std::size_t(c)];
      frame = Frame();
      frame.construction = c, frame.order = o;
      frame.values.assign(con->slots.size(), Value());
      decided.assign(con->slots.size(), false);
      return step(con->orders[l][std::size_t(o)], 0, 0);
    }

    Frame found;
    std::string reason;     // the first rule broken by a frame that writes the text
    std::size_t reached = 0;  // the furthest point some item matched up to

   private:
    bool occurs(const std::string& w) const {
      if (w.empty()) return false;
      if (l == kZh) return text.find(w) != std::string::npos;
      for (const std::string& part : split_words(w))
        if (!present.count(part)) return false;
      return true;
    }
    // Whether `w` is written at `at`; the point after it.
    bool match(const std::string& w, std::size_t at, std::size_t& next) const {
      if (l == kZh) {
        if (text.compare(at, w.size(), w) != 0) return false;
        next = at + w.size();
        return true;
      }
      const std::vector<std::string> parts = split_words(w);
      if (at + parts.size() > tokens.size()) return false;
      for (std::size_t i = 0; i < parts.size(); ++i)
        if (tokens[at + i] != parts[i]) return false;
      next = at + parts.size();
      return true;
    }
    bool advance(const Template& t, std::size_t i, std::size_t next) {
      reached = std::max(reached, next);
      return step(t, i + 1, next);
    }
    // Tries `v` as the value of `slot`, written by item i at `at`; undone when nothing follows.
    bool try_value(const Template& t, std::size_t i, std::size_t at, int slot, const Value& v) {
      frame.values[std::size_t(slot)] = v;
      decided[std::size_t(slot)] = true;
      if (follow(t, i, at)) return true;
      frame.values[std::size_t(slot)] = Value();
      decided[std::size_t(slot)] = false;
      return false;
    }
    // Item i written with the frame's values (every writing it may have), then the rest.
    bool follow(const Template& t, std::size_t i, std::size_t at) {
      for (const std::string& w : e.texts(frame, l, t[i])) {
        std::size_t next = at;
        if (w.empty() ? step(t, i + 1, at) : match(w, at, next) && advance(t, i, next)) return true;
      }
      return false;
    }

    bool step(const Template& t, std::size_t i, std::size_t at) {
      if (i == t.size()) return at == end && complete();
      const Item& item = t[i];
      std::size_t next = at;
      if (item.slot < 0) return match(item.literal, at, next) && advance(t, i, next);
      const int si = item.slot;
      const Slot& slot = con->slots[std::size_t(si)];
      if (decided[std::size_t(si)]) return follow(t, i, at);  // "O:was", or a result read with its verb
      if (slot.p < 1 && try_value(t, i, at, si, Value())) return true;
      Value v;
      v.present = true;
      switch (slot.kind) {
        case SlotKind::Verb: {
          // English may write a verb with its result as another verb ("broke"): such a result is
          // read here, with the verb.
          const int rs = result_slot(*con, si);
          for (std::size_t k = 0; k < s.verbs.size(); ++k) {
            if (!verb_occurs(s.verbs[k])) continue;
            v.entry = int(k);
            if (l == kEn && rs >= 0 && !decided[std::size_t(rs)])
              for (int r : s.verbs[k].results) {
                if (s.results[std::size_t(r)].en_verb.empty()) continue;
                Value rv;
                rv.present = true, rv.entry = r;
                frame.values[std::size_t(rs)] = rv;
                decided[std::size_t(rs)] = true;
                if (try_value(t, i, at, si, v)) return true;
                frame.values[std::size_t(rs)] = Value();
                decided[std::size_t(rs)] = false;
              }
            if (try_value(t, i, at, si, v)) return true;
          }
          return false;
        }
        case SlotKind::Result: {
          const bool known = decided[std::size_t(slot.of)] && frame.values[std::size_t(slot.of)].present;
          for (std::size_t k = 0; k < s.results.size(); ++k) {
            const Result& r = s.results[k];
            if (known && r.verb != frame.values[std::size_t(slot.of)].entry) continue;
            if (l == kZh ? !occurs(r.zh) : !(r.en.empty() || occurs(r.en))) continue;
            v.entry = int(k);
            if (try_value(t, i, at, si, v)) return true;
          }
          return false;
        }
        case SlotKind::Word: {
          const auto& words = s.lists[std::size_t(slot.list)].words;
          for (std::size_t k = 0; k < words.size(); ++k) {
            const std::string& w = l == kZh ? words[k].zh : words[k].en;
            if (!w.empty() && !occurs(w)) continue;
            v.entry = int(k);
            if (try_value(t, i, at, si, v)) return true;
          }
          return false;
        }
        case SlotKind::Noun:
          for (const Phrase& p : phrases()) {
            v.np = p;
            if (try_value(t, i, at, si, v)) return true;
          }
          return false;
      }
      return false;
    }

    bool verb_occurs(const Verb& v) const {
      if (l == kZh) return occurs(v.zh);
      for (const std::string& f : v.en)
        if (occurs(f)) return true;
      for (int r : v.results)
        for (const std::string& f : s.results[std::size_t(r)].en_verb)
          if (occurs(f)) return true;
      return false;
    }

    // Every noun phrase of the words in the text (structurally possible: a determiner only with
    // a classifier, not with a possessor); whether the modifiers fit is a rule checked later.
    const std::vector<Phrase>& phrases() {
      if (!phrases_.empty()) return phrases_;
      auto with_none = [](std::vector<int> v) {
        v.insert(v.begin(), -1);
        return v;
      };
      std::vector<std::pair<int, int>> wheres = {{-1, -1}};  // (place, place noun)
      for (int p : places)
        for (int n : nouns) wheres.push_back({p, n});
      for (int n : nouns)
        for (int d : with_none(dets))
          for (int p : with_none(possessors))
            for (int a : with_none(des))
              for (int b : with_none(bares))
                for (auto [w, wn] : wheres) {
                  if (d >= 0 && (p >= 0 || s.nouns[std::size_t(n)].classifier.empty())) continue;
                  phrases_.push_back({n, d, p, a, b, w, wn});
                }
      return phrases_;
    }

    // Every item matched: the frame writes the text when the items' forms agree (checked by
    // writing it again: agreement, "a" or "an", a result's English verb), then the rules.
    bool complete() {
      for (std::size_t k = 0; k < frame.values.size(); ++k)
        if (!decided[k]) return false;
      const Outs words = e.realise(frame, l);
      std::string again;
      for (const Out& w : words) again += (l == kEn && !again.empty() ? " " : "") + w.text;
      if (again != text) return false;
      const std::string why = e.violation(frame);
      if (why.empty()) {
        found = frame;
        return true;
      }
      if (reason.empty()) reason = why;
      return false;
    }

    const Engine& e;
    const Spec& s;
    int l;
    const std::string& text;
    std::vector<std::string> tokens;
    std::set<std::string> present;
    std::size_t end = 0;
    std::vector<int> nouns, possessors, dets, des, bares, places;
    std::vector<Phrase> phrases_;
    const Construction* con = nullptr;
    Frame frame;
    std::vector<bool> decided;
  };

  // The writings of one item with the frame's values: one text ("" for nothing), or both present
  // forms of a verb whose subject is not read yet.
  std::vector<std::string> texts(const Frame& f, int l, const Item& item) const {
    const Value& v = item.slot >= 0 ? f.values[std::size_t(item.slot)] : Value();
    if (item.slot >= 0 && v.present && l == kEn &&
        s_.constructions[std::size_t(f.construction)].slots[std::size_t(item.slot)].kind == SlotKind::Verb)
      return verb_forms(f, item);
    Outs out;
    write(f, l, item, out);
    std::string w;
    for (const Out& x : out) w += (l == kEn && !w.empty() ? " " : "") + x.text;
    return {w};
  }

  Spec s_;
  double total_weight_ = 0;
  std::vector<int> de_adjectives_, bare_adjectives_, possessors_;
  std::vector<std::string> lexicon_[2];
  std::unique_ptr<Tokenizer> tokenizer_[2];
};


// A grammar file in one language: the engine (shared by both languages) and its learners' sentences.
class FileGrammar final : public Grammar {
 public:
  FileGrammar(std::shared_ptr<const Engine> engine, std::string name, int l)
      : engine_(std::move(engine)), name_(std::move(name)), l_(l) {
    const Spec& s = engine_->spec();
    for (const std::string& text : s.learners[l]) {
      const std::string at = s.file + ":" + std::to_string(s.learners_line[l]) + ": learners." + (l == kZh ? "zh" : "en") + ": ";
      try {
        learners_.push_back(analyse(text).text);
      } catch (const ValueError& e) {
        throw ValueError(at + e.what());
      }
    }
    max_tokens_ = engine_->max_tokens(l);
  }

  const std::string& name() const override { return name_; }
  Language language() const override { return language_of(l_); }
  const std::vector<std::string>& relation_names() const override { return engine_->spec().relations; }
  const std::vector<std::string>& learner_sentences() const override { return learners_; }
  std::vector<std::string> constructions() const override {
    std::vector<std::string> names;
    for (const Construction& c : engine_->spec().constructions) names.push_back(c.name);
    return names;
  }
  GrammarSentence random_sentence(Generator& gen) const override { return engine_->sentence(engine_->draw(gen, l_), l_); }
  const Tokenizer& tokenizer() const override { return engine_->tokenizer(l_); }
  std::size_t max_tokens() const override { return max_tokens_; }

  GrammarSentence analyse(const std::string& text) const override {
    const Language language = language_of(l_);
    const std::string s = canonical_sentence(language, text, true);
    const std::string quoted = "'" + text + "'";
    std::string problem = unknown_word(language, s, engine_->lexicon(l_));
    if (!problem.empty()) throw ValueError(quoted + ": " + problem);
    Frame f;
    if (!engine_->analyse(l_, s, f, problem))
      throw ValueError(quoted + " is not a sentence of the " + data::name(language) + " grammar " + engine_->spec().name + ": " + problem);
    return engine_->sentence(f, l_);
  }

 private:
  std::shared_ptr<const Engine> engine_;
  std::string name_;
  int l_;
  std::vector<std::string> learners_;
  std::size_t max_tokens_ = 0;
};

// The engine of a file's text, with what only an engine can check: every construction draws a
// sentence, and its examples are sentences it writes.
std::shared_ptr<const Engine> make_engine(const std::string& text, const std::string& file) {
  auto e = std::make_shared<const Engine>(parse_spec(text, file));
  const Spec& s = e->spec();
  for (std::size_t c = 0; c < s.constructions.size(); ++c) {
    const Construction& con = s.constructions[c];
    const std::string at = file + ":" + std::to_string(con.example_line) + ": constructions[" + std::to_string(c) + "] (" + con.name + ").example: ";
    Generator gen(c);
    e->draw(gen, int(c), kZh);
    for (int l : {kZh, kEn}) {
      const std::string written = canonical_sentence(language_of(l), con.example[l], true);
      std::string problem = unknown_word(language_of(l), written, e->lexicon(l));
      Frame f;
      if (problem.empty() && e->analyse(l, written, f, problem, int(c))) continue;
      throw ValueError(at + "'" + con.example[l] + "' is not a sentence of construction '" + con.name + "': " + problem);
    }
  }
  return e;
}

}  // namespace

std::shared_ptr<const Grammar> parse_grammar(const std::string& text, const std::string& file, Language language) {
  const int l = language == Language::Zh ? kZh : kEn;
  return std::make_shared<const FileGrammar>(make_engine(text, file), file, l);
}

const std::vector<std::string>& builtin_grammars() {
  static const std::vector<std::string> names = {"v1", "v2"};
  return names;
}

const std::string& builtin_grammar_text(const std::string& name) {
  if (name == "v2") return grammar_file_v2();
  throw ValueError("grammar '" + name + "': no built-in grammar file of this name (the files: v2; v1 is written in C++)");
}

std::shared_ptr<const Grammar> load_grammar(const std::string& grammar, Language language) {
  const int l = language == Language::Zh ? kZh : kEn;
  if (grammar == "v1") return v1_grammar(language);
  if (grammar == "v2") {
    static const std::shared_ptr<const Engine> engine = make_engine(grammar_file_v2(), "share/grammar/v2.yaml");
    static const std::shared_ptr<const Grammar> both[2] = {std::make_shared<const FileGrammar>(engine, "v2", kZh),
                                                           std::make_shared<const FileGrammar>(engine, "v2", kEn)};
    return both[l];
  }
  const auto& builtin = builtin_grammars();
  const auto ends = [&](const std::string& tail) {
    return grammar.size() > tail.size() && grammar.compare(grammar.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (!ends(".yaml") && !ends(".yml"))
    throw ValueError("grammar '" + grammar + "': expected " + join_names(builtin) + " or the path of a grammar file (.yaml)" +
                     did_you_mean(grammar, builtin));
  std::ifstream in(grammar, std::ios::binary);
  if (!in) throw ValueError("grammar file '" + grammar + "': cannot be read (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  return std::make_shared<const FileGrammar>(make_engine(text.str(), grammar), grammar, l);
}

}  // namespace qkv::data
