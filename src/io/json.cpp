#include "qkv/io/json.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>


namespace qkv::json {

const Value* Value::find(std::string_view key) const {
  for (auto& [k, v] : members)
    if (k == key) return &v;
  return nullptr;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "true or false";
    case Value::Kind::Number: return "a number";
    case Value::Kind::String: return "a string";
    case Value::Kind::Array: return "an array";
    case Value::Kind::Object: return "an object";
  }
  return "?";
}

std::string describe(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return v.boolean ? "true" : "false";
    case Value::Kind::Number: return "the number " + v.text;
    case Value::Kind::String: {
      std::string s = v.text.size() > 40 ? v.text.substr(0, 40) + "..." : v.text;
      for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20) c = ' ';
      return "the string '" + s + "'";
    }
    case Value::Kind::Array: return "an array of " + std::to_string(v.items.size());
    case Value::Kind::Object: return "an object";
  }
  return "?";
}

namespace {

class Parser {
 public:
  Parser(std::string_view s, const std::string& what, std::size_t max_depth) : s_(s), what_(what), max_depth_(max_depth) {}

  Value document() {
    space();
    if (at_end()) fail("empty; expected a JSON value (an object such as {\"model\": 0})");
    Value v = value(0);
    space();
    if (!at_end()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw ValueError(what_ + ": " + problem + " at byte " + std::to_string(i_) + " (not valid JSON)");
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }
  void space() {
    while (!at_end() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c, const char* where) {
    if (peek() != c) fail(std::string("expected '") + c + "' " + where);
    ++i_;
  }
  void literal(const char* word) {
    const std::size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) fail(std::string("expected a value (did you mean ") + word + "?)");
    i_ += n;
  }

  Value value(std::size_t depth) {
    if (depth > max_depth_) fail("nesting deeper than " + std::to_string(max_depth_) + " levels");
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind = Value::Kind::Object;
      ++i_;
      space();
      if (peek() == '}') return ++i_, v;
      while (true) {
        space();
        if (peek() != '"') fail("expected a member name in double quotes");
        std::string key = string_body();
        for (auto& [k, other] : v.members)
          if (k == key) fail("the member '" + key + "' appears twice");
        space();
        expect(':', "after a member name");
        space();
        v.members.emplace_back(std::move(key), value(depth + 1));
        space();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect('}', "or ',' after a member");
        return v;
      }
    }
    if (c == '[') {
      v.kind = Value::Kind::Array;
      ++i_;
      space();
      if (peek() == ']') return ++i_, v;
      while (true) {
        space();
        v.items.push_back(value(depth + 1));
        space();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        expect(']', "or ',' after an array item");
        return v;
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::String;
      v.text = string_body();
      return v;
    }
    if (c == 't' || c == 'f') {
      v.kind = Value::Kind::Bool;
      v.boolean = c == 't';
      literal(c == 't' ? "true" : "false");
      return v;
    }
    if (c == 'n') {
      literal("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number_value();
    if (at_end()) fail("the text ends where a value was expected");
    fail(std::string("expected a value (an object, array, string, number, true, false or null), found '") +
         (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f ? std::string("?") : std::string(1, c)) +
         "'");
  }

  Value number_value() {
    const std::size_t start = i_;
    auto digits = [&] {
      const std::size_t from = i_;
      while (peek() >= '0' && peek() <= '9') ++i_;
      return i_ > from;
    };
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
      if (peek() >= '0' && peek() <= '9') fail("a number may not start with 0 followed by digits");
    } else if (!digits()) {
      fail("expected digits in a number");
    }
    if (peek() == '.') {
      ++i_;
      if (!digits()) fail("expected digits after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!digits()) fail("expected digits in the exponent");
    }
    Value v;
    v.kind = Value::Kind::Number;
    v.text = std::string(s_.substr(start, i_ - start));
    v.number = std::strtod(v.text.c_str(), nullptr);
    if (!std::isfinite(v.number)) fail("the number " + v.text.substr(0, 40) + " is out of range");
    return v;
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      const char h = peek();
      u <<= 4;
      if (h >= '0' && h <= '9') u |= unsigned(h - '0');
      else if (h >= 'a' && h <= 'f') u |= unsigned(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') u |= unsigned(h - 'A' + 10);
      else fail("expected 4 hexadecimal digits after \\u");
    }
    return u;
  }

  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F)), out += char(0x80 | ((cp >> 6) & 0x3F)),
          out += char(0x80 | (cp & 0x3F));
    }
  }

  // One UTF-8 sequence starting at i_ (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
  void utf8(std::string& out) {
    const unsigned char b0 = static_cast<unsigned char>(s_[i_]);
    std::size_t n = b0 >= 0xF0 && b0 <= 0xF4 ? 4 : b0 >= 0xE0 && b0 < 0xF0 ? 3 : b0 >= 0xC2 && b0 < 0xE0 ? 2 : 0;
    if (n == 0) fail("invalid UTF-8 in a string");
    if (i_ + n > s_.size()) fail("a UTF-8 sequence is cut off at the end of the text");
    unsigned cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (std::size_t k = 1; k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s_[i_ + k]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in a string");
      cp = cp << 6 | (b & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      fail("invalid UTF-8 in a string (an overlong form, a surrogate or past U+10FFFF)");
    out.append(s_.data() + i_, n);
    i_ += n;
  }

  std::string string_body() {
    ++i_;  // the opening quote
    std::string out;
    while (true) {
      if (at_end()) fail("a string is not closed");
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c < 0x20) fail("a control character in a string (write it as \\n, \\t or \\u00XX)");
      if (c >= 0x80) {
        utf8(out);
        continue;
      }
      if (c != '\\') {
        out += char(c);
        ++i_;
        continue;
      }
      ++i_;
      const char e = peek();
      ++i_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("a low surrogate \\u escape without a high one before it");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (peek() != '\\' || i_ + 1 >= s_.size() || s_[i_ + 1] != 'u')
              fail("a high surrogate \\u escape without its low surrogate");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("a high surrogate \\u escape without its low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default:
          --i_;
          fail("an unknown escape in a string (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
  }

  std::string_view s_;
  const std::string& what_;
  std::size_t max_depth_;
  std::size_t i_ = 0;
};

}  // namespace

Value parse(std::string_view text, const std::string& what, std::size_t max_depth) {
  return Parser(text, what, max_depth).document();
}

Fields::Fields(const Value& v, std::string path, std::vector<std::string> allowed) : v_(v), path_(std::move(path)) {
  if (v.kind != Value::Kind::Object)
    throw ValueError((path_.empty() ? std::string("the body") : path_) + ": expected an object, found " + describe(v));
  for (auto& [k, value] : v.members) {
    bool known = false;
    for (auto& a : allowed) known = known || a == k;
    if (!known)
      throw ValueError(this->path(k) + ": unknown field" + did_you_mean(k, allowed) + " (" +
                         (path_.empty() ? std::string("the body") : path_) + " may have " + join_names(allowed) + ")");
  }
}

const Value* Fields::get(const std::string& key) const {
  const Value* v = v_.find(key);
  return v && v->kind != Value::Kind::Null ? v : nullptr;
}

std::string Fields::path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

std::size_t whole(const Value& v, const std::string& path, std::size_t lo, std::size_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (v.kind != Value::Kind::Number || v.text.empty() || v.text.find_first_not_of("0123456789") != std::string::npos ||
      v.text.size() > 15)
    throw ValueError(path + ": expected a whole number in " + range + ", found " + describe(v));
  const std::size_t x = std::strtoull(v.text.c_str(), nullptr, 10);
  if (x < lo || x > hi) throw ValueError(path + ": expected a whole number in " + range + ", found " + v.text);
  return x;
}

const std::string& string(const Value& v, const std::string& path, std::size_t max_bytes) {
  if (v.kind != Value::Kind::String) throw ValueError(path + ": expected a string, found " + describe(v));
  if (v.text.size() > max_bytes)
    throw ValueError(path + ": " + std::to_string(v.text.size()) + " bytes, more than the " + std::to_string(max_bytes) +
                       " a request may send");
  return v.text;
}

const std::vector<Value>& array(const Value& v, const std::string& path, std::size_t max_items) {
  if (v.kind != Value::Kind::Array) throw ValueError(path + ": expected an array, found " + describe(v));
  if (v.items.size() > max_items)
    throw ValueError(path + ": " + std::to_string(v.items.size()) + " items, more than the " + std::to_string(max_items) +
                       " allowed");
  return v.items;
}

bool boolean(const Value& v, const std::string& path) {
  if (v.kind != Value::Kind::Bool) throw ValueError(path + ": expected true or false, found " + describe(v));
  return v.boolean;
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '<' && s.compare(i, 4, "<!--") == 0) {
      out += "<\\u0021";  // the '!' is this escape
      ++i;
    } else if (c == '<' && i + 1 < s.size() && s[i + 1] == '/') {
      out += "<\\";
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string number(double x) {
  if (!std::isfinite(x)) return "null";
  char b[32];
  for (int digits = 15; digits <= 17; ++digits) {  // the shortest of these that reads back exactly
    std::snprintf(b, sizeof b, "%.*g", digits, x);
    if (std::strtod(b, nullptr) == x) break;
  }
  return b;
}

void Writer::comma() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_) out_ += ',';
  first_ = false;
}

Writer& Writer::open(char bracket) {
  comma();
  out_ += bracket;
  first_ = true;
  return *this;
}

Writer& Writer::close(char bracket) {
  out_ += bracket;
  first_ = false;
  return *this;
}

Writer& Writer::key(std::string_view k) {
  comma();
  out_ += quote(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}

Writer& Writer::value(double x) {
  comma();
  out_ += number(x);
  return *this;
}

Writer& Writer::value(std::int64_t x) {
  comma();
  out_ += std::to_string(x);
  return *this;
}

Writer& Writer::value(bool x) {
  comma();
  out_ += x ? "true" : "false";
  return *this;
}

Writer& Writer::value(std::string_view s) {
  comma();
  out_ += quote(s);
  return *this;
}

Writer& Writer::null() {
  comma();
  out_ += "null";
  return *this;
}

Writer& Writer::raw(std::string_view json) {
  comma();
  out_ += json;
  return *this;
}

std::string base64(const unsigned char* bytes, std::size_t n) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (std::size_t i = 0; i < n; i += 3) {
    const unsigned v = unsigned(bytes[i]) << 16 | (i + 1 < n ? unsigned(bytes[i + 1]) << 8 : 0u) |
                       (i + 2 < n ? unsigned(bytes[i + 2]) : 0u);
    out += digits[v >> 18 & 63];
    out += digits[v >> 12 & 63];
    out += i + 1 < n ? digits[v >> 6 & 63] : '=';
    out += i + 2 < n ? digits[v & 63] : '=';
  }
  return out;
}

std::string base64_floats(const float* values, std::size_t n) {
  std::string raw(n * sizeof(float), '\0');
  for (std::size_t i = 0; i < n; ++i) {  // little-endian whatever the host
    std::uint32_t u;
    std::memcpy(&u, values + i, 4);
    for (int k = 0; k < 4; ++k) raw[4 * i + std::size_t(k)] = char((u >> (8 * k)) & 0xFF);
  }
  return base64(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

std::string base64_bytes(const float* weights, std::size_t n) {
  std::string raw(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    raw[i] = char(static_cast<unsigned char>(std::lround(255.0 * std::min(1.0, std::max(0.0, double(weights[i]))))));
  return base64(reinterpret_cast<const unsigned char*>(raw.data()), n);
}

}  // namespace qkv::json
