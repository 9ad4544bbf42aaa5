#pragma once
// Internal to src/data: what both grammars (v1 in grammar.cpp, the file grammars in
// grammar_engine.cpp) do with a typed sentence before analysing it: its canonical spelling, the
// first word outside the lexicon, and the word where every analysis went astray.

#include <memory>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"

namespace qkv::data {

// The words of `s`, split at whitespace.
std::vector<std::string> split_words(const std::string& s);

// A lexicon's words, sorted and distinct; en entries of several words ("every day") are split.
std::vector<std::string> lexicon_list(std::vector<std::string> words, Language language);

// The sentence as the realisers write it: zh without whitespace, en lowercased with single spaces;
// both ending in their full stop ("apples." -> "apples ."). With `commas`, also zh ',' -> '，' and
// en "apples," -> "apples ,".
std::string canonical_sentence(Language language, const std::string& text, bool commas);

// The first word of the canonical `text` that is not in the sorted `lexicon`, as a message
// ("'披' starts no word of the zh lexicon", "'pizza' is not a word of the en lexicon"); "" when
// every word is. zh: the text is covered by lexicon words (a reachability scan); the message names
// the character at the furthest point reached.
std::string unknown_word(Language language, const std::string& text, const std::vector<std::string>& lexicon);

// "no sentence of the grammar has 'W' after 'B'": W the word at `reached` (zh: a byte offset, the
// lexicon's longest word there or its character; en: a word index), B the text before it.
std::string astray(Language language, const std::string& text, std::size_t reached, const std::vector<std::string>& lexicon);

// The split of a sentence: `learners` -> Test; else bucket b = hash(text) mod 1000 -> Test when
// b < 1000 test_fraction, Val below 1000 (test_fraction + val_fraction), else Train.
Split sentence_split(const std::vector<std::string>& learners, const std::string& text, double val_fraction, double test_fraction);

class Grammar;
// The grammar v1 (grammar.cpp), one per language, made once.
std::shared_ptr<const Grammar> v1_grammar(Language language);

}  // namespace qkv::data
