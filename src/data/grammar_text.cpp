#include "grammar_text.hpp"

#include <algorithm>
#include <cctype>

#include "qkv/tensor/random.hpp"

namespace qkv::data {

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::size_t i = s.find_first_not_of(" \t\n\r");
  while (i != std::string::npos) {
    const std::size_t j = std::min(s.size(), s.find_first_of(" \t\n\r", i));
    out.push_back(s.substr(i, j - i));
    i = s.find_first_not_of(" \t\n\r", j);
  }
  return out;
}

std::vector<std::string> lexicon_list(std::vector<std::string> words, Language language) {
  if (language == Language::En) {
    std::vector<std::string> split;
    for (const std::string& s : words)
      for (std::string& part : split_words(s)) split.push_back(std::move(part));
    words = std::move(split);
  }
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  return words;
}

std::string canonical_sentence(Language language, const std::string& text, bool commas) {
  if (language == Language::Zh) {
    std::string s;
    for (const std::string& w : split_words(text)) s += w;
    if (commas)
      for (std::size_t at = s.find(','); at != std::string::npos; at = s.find(',', at)) s.replace(at, 1, "，");
    const std::string stop = "。";
    if (s.size() < stop.size() || s.compare(s.size() - stop.size(), stop.size(), stop) != 0) s += stop;
    return s;
  }
  std::string lower = text;
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  std::vector<std::string> words;
  for (std::string& w : split_words(lower)) {
    if (commas && w.size() > 1 && w.back() == ',') {  // "apples," -> "apples" ","
      w.pop_back();
      words.push_back(w);
      words.push_back(",");
    } else {
      words.push_back(w);
    }
  }
  if (!words.empty() && words.back() != "." && words.back().back() == '.') {  // "apples." -> "apples" "."
    words.back().pop_back();
    words.push_back(".");
  }
  if (words.empty() || words.back() != ".") words.push_back(".");
  std::string s;
  for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

std::string unknown_word(Language language, const std::string& text, const std::vector<std::string>& lexicon) {
  if (language == Language::En) {
    for (const std::string& w : split_words(text))
      if (!std::binary_search(lexicon.begin(), lexicon.end(), w)) return "'" + w + "' is not a word of the en lexicon";
    return "";
  }
  std::vector<bool> reach(text.size() + 1, false);
  reach[0] = true;
  std::size_t furthest = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!reach[i]) continue;
    furthest = i;
    for (const std::string& w : lexicon)
      if (text.compare(i, w.size(), w) == 0) reach[i + w.size()] = true;
  }
  if (reach[text.size()]) return "";
  std::size_t end = furthest + 1;  // one UTF-8 character
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  return "'" + text.substr(furthest, end - furthest) + "' starts no word of the zh lexicon";
}

std::string astray(Language language, const std::string& text, std::size_t reached, const std::vector<std::string>& lexicon) {
  std::string word, before;
  if (language == Language::Zh) {
    std::size_t at = reached;
    while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
    std::size_t longest = 1;
    while (at + longest < text.size() && (static_cast<unsigned char>(text[at + longest]) & 0xC0) == 0x80) ++longest;
    for (const std::string& w : lexicon)
      if (w.size() > longest && text.compare(at, w.size(), w) == 0) longest = w.size();
    word = text.substr(at, longest), before = text.substr(0, at);
  } else {
    const std::vector<std::string> tokens = split_words(text);
    word = tokens[std::min(reached, tokens.size() - 1)];
    for (std::size_t i = 0; i < reached && i < tokens.size(); ++i) before += (i ? " " : "") + tokens[i];
  }
  return "no sentence of the grammar has '" + word + "' after '" + before + "'";
}

Split sentence_split(const std::vector<std::string>& learners, const std::string& text, double val_fraction, double test_fraction) {
  if (std::find(learners.begin(), learners.end(), text) != learners.end()) return Split::Test;
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : text) h = (h ^ ch) * 0x100000001b3ull;
  const double bucket = double(hash64(h, 0x73706c6974ull) % 1000);  // "split"
  if (bucket < 1000 * test_fraction) return Split::Test;
  if (bucket < 1000 * (test_fraction + val_fraction)) return Split::Val;
  return Split::Train;
}

}  // namespace qkv::data
