#pragma once
// Internal to src/data: a grammar file (share/grammar/v2.yaml, or a user's copy) as data: its
// lexicon, its constructions and their relations, checked on load (grammar_spec.cpp). The engine
// that draws, writes and analyses its sentences is grammar_engine.cpp; docs/tasks.md
// ("Grammar v2") describes the file for its readers.

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::data::gram {

using Bits = std::uint64_t;  // a set of noun classes or tags: at most 64 names of each kind

// A set of names, each a bit (noun classes, verb tags, word tags, result uses).
struct Names {
  std::vector<std::string> names;
  // The bit of `name`, added when new.
  Bits bit(const std::string& name);
  // The bit of `name`, 0 when absent.
  Bits find(const std::string& name) const;
};

enum class NounKind { Thing, Person, Name, Kin, Pronoun };
enum class Number { Count, Mass, Plural };

struct Noun {
  std::string zh, en, plural, object, possessive, classifier;  // en: singular (a pronoun's subject form)
  NounKind kind = NounKind::Thing;
  Number number = Number::Count;
  int person = 3;
  bool close = false;  // possessed without 的 (我妈妈)
  Bits classes = 0;
};

struct Result {
  std::string zh, en;                // en: the English word after the object ("" none)
  std::vector<std::string> en_verb;  // empty, or the four forms of an English verb replacing the verb's
  Bits agents = 0, objects = 0;      // 0: the verb's
  Bits uses = 0;
  int verb = -1;
};

struct Verb {
  std::string zh;
  std::vector<std::string> en;  // base, third person singular, past, past participle
  Bits agents = 0, objects = 0, recipients = 0, tags = 0;
  bool needs_result = false;
  std::vector<int> results;  // into Spec::results
};

struct Adjective {
  std::string zh, en;
  bool de = false;  // written with 的 (红色的); else right before the noun (大狗)
  Bits heads = 0;
  int order = 1;  // English order before the noun
};

struct Word {
  std::string zh, en;  // en may hold several words or none
  Bits tags = 0;
};

struct WordList {
  std::string name;
  std::vector<Word> words;
};

struct Determiner {
  std::string zh, en;
};

// How often a noun phrase gets each modifier.
struct Modifiers {
  double det = 0, possessor = 0, adjective = 0, bare = 0, place = 0;
};

// A place before a noun: 桌子上的猫 "the cat on the table" (the place noun modifies the head).
struct Place {
  std::string zh, en;  // 上, "on"
  Bits nouns = 0;      // the classes of the place noun (桌子)
  Bits heads = 0;      // the classes of the nouns it may modify
};

enum class SlotKind { Verb, Noun, Result, Word };
enum class Role { Agent, Object, Recipient };

struct Restriction {
  Role role;
  int verb;  // the verb slot
};

struct Slot {
  std::string name;
  SlotKind kind = SlotKind::Word;
  double p = 1;      // present with this probability
  Bits tags = 0;     // verb: verb tags; word: word tags; result: uses
  int list = -1;     // word: the word list
  int of = -1;       // result: its verb slot
  std::vector<Restriction> restrictions;  // noun
  unsigned kinds = ~0u;                   // noun: the NounKinds (bits) it takes
  Modifiers modifiers;                    // noun
  std::vector<int> unless;                // drawn only when these slots are left out
  int line = 0;
};

// Was, Has: a noun slot's auxiliary agreeing with it ("was"/"were", "has"/"have"), not the noun itself.
enum class Form { None, Base, Present, Past, Participle, Subject, Object, Generic, Was, Has };

struct Item {
  std::string literal;  // when slot < 0
  int slot = -1;
  Form form = Form::None;
};
using Template = std::vector<Item>;

struct Link {
  int relation, from, to;  // at the words of slot `from`, the head word of slot `to`
};

struct Construction {
  std::string name;
  double weight = 1;
  std::vector<Slot> slots;
  std::vector<Template> orders[2];  // [Language::Zh], [Language::En]: the word orders
  std::vector<Link> links;
  std::string example[2];
  int line = 0, example_line = 0;
};

struct Spec {
  std::string name, file;
  std::vector<std::string> relations;
  int modifier_relation = -1, agreement = -1;
  Names classes, verb_tags, word_tags, uses;
  Modifiers modifiers;
  std::vector<Noun> nouns;
  std::vector<Verb> verbs;
  std::vector<Result> results;
  std::vector<Adjective> adjectives;
  std::vector<Determiner> determiners;
  std::vector<Place> places;
  std::vector<WordList> lists;
  std::vector<Construction> constructions;
  std::vector<std::string> learners[2];
  int learners_line[2] = {0, 0};
};

// The file's text as a Spec. Throws ValueError "<file>:<line>: <key>: <what was expected>, found
// <what>" on the first problem: YAML syntax, a missing or unknown key, a value of the wrong kind,
// an unknown name (class, tag, slot, relation, word list), a template that leaves out a slot.
// Whether the examples and the learners' sentences are sentences of the grammar is checked by
// the engine, which can read them.
Spec parse_spec(const std::string& text, const std::string& file);

}  // namespace qkv::data::gram
