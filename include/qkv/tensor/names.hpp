#pragma once
/// @file
/// Names: the one table of choices behind every enumerated option (activation, positional
/// encoding, attention implementation, schedule, optimizer, tokenizer...), and "did you mean"
/// suggestions. Parsing, validation, printing, suggestions and the config reference all read the
/// same table, so a choice is added in one place.

#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "qkv/tensor/tensor.hpp"

namespace qkv {

/// Levenshtein distance between two words (insertions, deletions and substitutions each cost 1).
std::size_t edit_distance(const std::string& a, const std::string& b);

/// The candidate `word` most likely meant: the closest one within max(2, |word| / 3) edits, else
/// one that contains `word` (for words of 3 or more letters), else "".
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);
/// "; did you mean 'X'?" for closest_name, or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
/// "a, b, c".
std::string join_names(const std::vector<std::string>& names);

/// The names of an enum's values, in the order they are documented.
template <class E>
class NameTable {
 public:
  NameTable(std::initializer_list<std::pair<const char*, E>> entries) : entries_(entries) {}
  /// The value named `name`; throws ValueError "<what>: expected one of a, b, found 'x'; did you
  /// mean 'a'?".
  E parse(const std::string& name, const std::string& what) const {
    for (auto& [n, v] : entries_)
      if (name == n) return v;
    throw ValueError(what + ": expected one of " + join_names(names()) + ", found '" + name + "'" +
                     did_you_mean(name, names()));
  }
  /// True when `name` is one of the names.
  bool contains(const std::string& name) const {
    for (auto& [n, v] : entries_)
      if (name == n) return true;
    return false;
  }
  /// The name of `value`.
  const char* name(E value) const {
    for (auto& [n, v] : entries_)
      if (v == value) return n;
    throw ValueError("NameTable: value without a name");
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& [n, v] : entries_) out.emplace_back(n);
    return out;
  }

 private:
  std::vector<std::pair<const char*, E>> entries_;
};

}  // namespace qkv

namespace qkv {
/// Shell-style match of a whole name: '*' matches any run of characters (dots included), '?'
/// one character. "blocks.*.attn.hook_pattern" matches "blocks.0.attn.hook_pattern".
bool glob_match(const std::string& pattern, const std::string& name);
}  // namespace qkv
