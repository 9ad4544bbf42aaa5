#pragma once
// The instruments' JSON, written with the library's one writer (qkv/io/json.hpp).

#include <string>
#include <vector>

#include "qkv/io/json.hpp"

namespace qkv::interp {

inline std::string json_string(const std::string& s) { return json::quote(s); }
inline std::string json_number(double x) { return json::number(x); }
inline std::string json_array(const std::vector<double>& xs) {
  std::string out = "[";
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? "," : "") + json::number(xs[i]);
  return out + "]";
}
inline std::string json_array(const std::vector<std::string>& xs) {
  std::string out = "[";
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? "," : "") + json::quote(xs[i]);
  return out + "]";
}
using json::base64;

}  // namespace qkv::interp
