#pragma once
/// @file
/// Checking options structs. Each options struct (TransformerOptions, TaskOptions,
/// OptimizerOptions, ...) has a validate() that states its rules once, in the terms of its own
/// fields; constructors call it, and the config layer calls the same function and reports the
/// failure at the YAML key (file:line) the failing field came from. A field is named by its path
/// in the struct ("attn.num_heads"); a message refers to other fields as "{path}", so that each
/// reader can show them by its own names (field paths for library users, YAML keys for config
/// files).

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/tensor/tensor.hpp"

namespace qkv {

/// An option outside what its struct allows. what() is "<owner>: <field>: <message>", with the
/// {path} references rendered as field paths.
struct OptionError : ValueError {
  OptionError(std::string owner, std::vector<std::string> fields, std::string message);
  /// The message with every "{path}" replaced by name(path).
  std::string render(const std::function<std::string(const std::string&)>& name) const;
  /// The same error with every field (and reference) renamed by `rename` (nested structs).
  OptionError renamed(const std::function<std::string(const std::string&)>& rename) const;

  std::string owner;                ///< the struct, e.g. "TransformerOptions"
  std::vector<std::string> fields;  ///< the fields involved, most specific first (never empty)
  std::string message;              ///< e.g. "{d_model} (64) must be divisible by {attn.num_heads} (5)"
};

/// The rules of validate() functions, each throwing OptionError on the first failure.
class OptionChecker {
 public:
  explicit OptionChecker(std::string owner) : owner_(std::move(owner)) {}
  /// "expected a positive integer, found 0".
  void positive(std::size_t value, const std::string& field) const;
  /// "expected a number in [lo, hi), found x" (brackets by openness; hi may be infinite).
  void in_range(double value, const std::string& field, double lo, bool lo_open, double hi, bool hi_open) const;
  /// A rule over one or several fields; `message` may reference fields as "{path}".
  void require(bool ok, std::vector<std::string> fields, const std::string& message) const;
  /// Run a nested struct's validate() and report its failure as this struct's, with the nested
  /// field "x" named prefix + "x", or renames[x] when given (e.g. {"embed_dim", "d_model"}).
  void nested(const std::string& prefix, const std::function<void()>& validate,
              const std::vector<std::pair<std::string, std::string>>& renames = {}) const;
  const std::string& owner() const { return owner_; }

 private:
  std::string owner_;
};

/// Shortest "%g"-style text of a number (for messages).
std::string number_text(double x);

}  // namespace qkv
