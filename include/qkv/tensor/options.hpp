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

/// An option outside what its struct allows. what() is "<owner>: <field>: <message>" ("<field>
/// [<value>]: <message>" for a request's field error), with the {path} references rendered as
/// field paths.
struct OptionError : ValueError {
  OptionError(std::string owner, std::vector<std::string> fields, std::string message, std::string value = "");
  /// The message with every "{path}" replaced by name(path).
  std::string render(const std::function<std::string(const std::string&)>& name) const;
  /// The same error with every field (and reference) renamed by `rename` (nested structs).
  OptionError renamed(const std::function<std::string(const std::string&)>& rename) const;

  std::string owner;                ///< the struct, e.g. "TransformerOptions"
  std::vector<std::string> fields;  ///< the fields involved, most specific first (never empty)
  std::string message;              ///< e.g. "{d_model} (64) must be divisible by {attn.num_heads} (5)"
  std::string value;                ///< the value given, when the message is about it ("" otherwise)
  /// "<name(field)>[ <value>]: <render(name)>": how a front end reports a request's field error.
  std::string report(const std::function<std::string(const std::string&)>& name) const;
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

/// Requests (the instruments' request structs) report a bad field as an OptionError of owner
/// "request" naming the field by its path in the request ("top_k", "clean.text"); each front end
/// renders that path in its own spelling (a flag, a keyword argument, a JSON path).
[[noreturn]] void field_error(const std::string& field, const std::string& message, const std::string& value = "");
/// Run `f`; a ValueError whose message starts with "<field>: " (what a library call given `field`
/// as the name of its argument says) becomes field_error(field, the rest). OptionErrors pass.
void as_field(const std::string& field, const std::function<void()>& f);
/// Run `f`; field errors from it get `prefix` in front of their fields ("clean." + "text").
void with_prefix(const std::string& prefix, const std::function<void()>& f);

/// A request's field spelt a front end's way: the first (from, to) of `renames` whose `from` is
/// the field, or a prefix of it ending in '.', or followed in it by '[', gives `to`, followed by
/// the rest of the field when `to` ends in '.' or the rest starts with '[' ("ablate" -> "ablate.heads"
/// makes "ablate[2]" "ablate.heads[2]"; "clean." -> "--clean" makes "clean.text" "--clean"); an
/// empty `to` drops the prefix ("options." -> "" makes "options.seed" "seed"). The field itself
/// when none applies.
std::string renamed_field(const std::string& field, const std::vector<std::pair<std::string, std::string>>& renames);

/// Shortest "%g"-style text of a number (for messages).
std::string number_text(double x);

}  // namespace qkv
