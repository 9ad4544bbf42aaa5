#pragma once
// Writing JSON by hand, for the instruments' --json output and the viewer's data.

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace qkv::interp {

/// A JSON string literal of `s`: UTF-8 kept as is; quotes, backslashes and control characters
/// escaped; "</" and "<!--" written as "<\/" and "<\u0021--" so that the text may sit inside an
/// HTML <script> element (docs/viewer.md, the embedding rule).
inline std::string json_string(const std::string& s) {
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

/// A JSON number (shortest round-trip for doubles, %.17g); null for NaN and infinities.
inline std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

inline std::string json_array(const std::vector<double>& xs) {
  std::string out = "[";
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? "," : "") + json_number(xs[i]);
  return out + "]";
}

inline std::string json_array(const std::vector<std::string>& xs) {
  std::string out = "[";
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? "," : "") + json_string(xs[i]);
  return out + "]";
}

}  // namespace qkv::interp
