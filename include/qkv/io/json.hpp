#pragma once
/// @file
/// JSON in and out: what the instruments' results are written as (the command's --json, the
/// studio's answers, what Python reads back: one text, so one set of numbers), and a strict
/// reader for small documents (the studio's requests, the compiler's ground truth files): RFC
/// 8259 with no comments, no trailing commas, no duplicate keys, valid UTF-8 and bounded depth,
/// into a value tree, and readers that name the field in every error
/// ("input.masks[2]: expected a whole number in [0, 6], found -1"). Writer places the commas.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/tensor/names.hpp"

namespace qkv::json {

/// One parsed JSON value. Objects keep their members in the order written; numbers keep their
/// text too (whole numbers are checked on it, never through a double).
struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string text;  ///< String: the decoded UTF-8; Number: as written
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;
  /// The member `key` of an object, nullptr when absent (or not an object).
  const Value* find(std::string_view key) const;
};

/// "null", "true or false", "a number", "a string", "an array", "an object".
const char* kind_name(Value::Kind kind);
/// What a value is, for errors: "the string 'abc'", "the number -1", "an array of 3", ...
std::string describe(const Value& v);

/// Parse exactly one JSON value from `text` (whitespace around it allowed). ValueError
/// "`what`: <problem> at byte N" for anything else: a syntax error, a duplicate key, invalid
/// UTF-8 or an unpaired surrogate escape, a number out of double range, nesting deeper than
/// `max_depth`.
Value parse(std::string_view text, const std::string& what = "body", std::size_t max_depth = 16);

/// The members of an object, checked against the fields a request may have: ValueError
/// naming `path` when `v` is not an object, and naming an unknown member with the fields allowed
/// (and the closest one).
class Fields {
 public:
  Fields(const Value& v, std::string path, std::vector<std::string> allowed);
  /// The member, or nullptr when absent or null.
  const Value* get(const std::string& key) const;
  /// "path.key" (or "key" at the top), for errors and for nested readers.
  std::string path(const std::string& key) const;

 private:
  const Value& v_;
  std::string path_;
};

/// A whole number in [lo, hi] (digits only: no sign, fraction or exponent), else ValueError
/// "`path`: expected a whole number in [lo, hi], found ...".
std::size_t whole(const Value& v, const std::string& path, std::size_t lo, std::size_t hi);
/// A string, else ValueError naming `path`; at most `max_bytes` long.
const std::string& string(const Value& v, const std::string& path, std::size_t max_bytes = 4096);
/// An array of at most `max_items`, else ValueError naming `path`.
const std::vector<Value>& array(const Value& v, const std::string& path, std::size_t max_items);
bool boolean(const Value& v, const std::string& path);

/// A JSON string literal of UTF-8 text: UTF-8 kept as is; quotes, backslashes and control
/// characters escaped; "</" and "<!--" written as "<\/" and "<\u0021--" so that the text may sit
/// inside an HTML <script> element (docs/viewer.md, the embedding rule).
std::string quote(std::string_view s);
/// Shortest text that reads back as the same double (%.17g at most); null for NaN and infinities.
std::string number(double x);

/// Builds one JSON text: objects and arrays opened and closed in order, commas placed.
///   Writer w; w.open('{'); w.key("a"); w.value(1); w.close('}');
class Writer {
 public:
  Writer& open(char bracket);               ///< '{' or '['
  Writer& close(char bracket);              ///< '}' or ']'
  Writer& key(std::string_view k);          ///< the next member's name (inside an object)
  Writer& value(double x);
  Writer& value(std::int64_t x);
  Writer& value(std::size_t x) { return value(std::int64_t(x)); }
  Writer& value(int x) { return value(std::int64_t(x)); }
  Writer& value(bool x);
  Writer& value(std::string_view s);
  Writer& value(const char* s) { return value(std::string_view(s)); }
  Writer& null();
  /// Already valid JSON text, as one value.
  Writer& raw(std::string_view json);
  template <class T>
  Writer& member(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }
  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void comma();
  std::string out_;
  bool first_ = true;     // no value written yet at this level
  bool after_key_ = false;
};

/// Standard base64 (RFC 4648, with padding) of `n` bytes.
std::string base64(const unsigned char* bytes, std::size_t n);
/// Standard base64 (RFC 4648, padded) of the little-endian bytes of `n` floats: how the studio
/// sends attention weights (exact to the model's float32; the page reads them as a Float32Array).
std::string base64_floats(const float* values, std::size_t n);
/// Base64 of the bytes round(255 w) of `n` weights w in [0, 1] (clamped): a quarter of the float32 bytes.
std::string base64_bytes(const float* weights, std::size_t n);

}  // namespace qkv::json
