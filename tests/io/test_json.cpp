// The JSON writer's pieces the pages depend on: base64 (the weights) and strings that may sit inside
// an HTML <script> element (the embedding rule of docs/viewer.md).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "qkv/io/json.hpp"

namespace qkv {
namespace {

std::string b64(const std::string& s) { return json::base64(reinterpret_cast<const unsigned char*>(s.data()), s.size()); }

// The bytes of a standard base64 text.
std::string unbase64(const std::string& t) {
  const std::string digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : t) {
    if (c == '=') break;
    v = v << 6 | unsigned(digits.find(c));
    bits += 6;
    if (bits >= 8) out += char((v >> (bits -= 8)) & 255);
  }
  return out;
}

}  // namespace

TEST_CASE("json: base64 gives the RFC 4648 test vectors, and weights as float32 or bytes round(255 w)") {
  CHECK(b64("") == "");
  CHECK(b64("f") == "Zg==");
  CHECK(b64("fo") == "Zm8=");
  CHECK(b64("foo") == "Zm9v");
  CHECK(b64("foobar") == "Zm9vYmFy");
  CHECK(b64(std::string("\xff\x00\x80", 3)) == "/wCA");
  CHECK(unbase64(b64("any bytes \x01\xfe")) == "any bytes \x01\xfe");
  const float w[] = {0.0f, 1.0f, 0.5f, 2.0f, -1.0f};
  CHECK(unbase64(json::base64_bytes(w, 5)) == std::string("\x00\xff\x80\xff\x00", 5));  // clamped to [0, 1]
  CHECK(unbase64(json::base64_floats(w + 1, 1)) == std::string("\x00\x00\x80\x3f", 4));  // 1.0f, little-endian
}

TEST_CASE("json: strings escape quotes, control characters and the HTML end of a script") {
  CHECK(json::quote("a\"b\\c\n") == "\"a\\\"b\\\\c\\u000a\"");
  CHECK(json::quote("</script>") == "\"<\\/script>\"");
  CHECK(json::quote("<!-- x") == "\"<\\u0021-- x\"");
  CHECK(json::quote("我爱吃苹果") == "\"我爱吃苹果\"");
  CHECK(json::number(NAN) == "null");
  CHECK(json::number(0.5) == "0.5");
  json::Writer w;
  w.open('{').member("title", "a </script> title <!-- x").close('}');
  CHECK(w.str().find("</") == std::string::npos);
  CHECK(w.str().find("<!--") == std::string::npos);
}

}  // namespace qkv
