// The viewer's data: base64 of the weight bytes, the JSON of a hand-set model whose weights are
// known, the embedding rule, and snapshots checked against the model.
#include <doctest/doctest.h>

#include "constructed.hpp"
#include "interp/json.hpp"
#include "qkv/interp/viewer.hpp"
#include "qkv/model/evaluate.hpp"

namespace qkv {
namespace {

std::string b64(const std::string& s) { return interp::base64(reinterpret_cast<const unsigned char*>(s.data()), s.size()); }

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

// The first "weights":"..." string after `from` in `json`.
std::string weights_after(const std::string& json, std::size_t from) {
  const std::string key = "\"weights\":\"";
  const std::size_t a = json.find(key, from) + key.size();
  return json.substr(a, json.find('"', a) - a);
}

}  // namespace

TEST_CASE("viewer: base64 gives the RFC 4648 test vectors") {
  CHECK(b64("") == "");
  CHECK(b64("f") == "Zg==");
  CHECK(b64("fo") == "Zm8=");
  CHECK(b64("foo") == "Zm9v");
  CHECK(b64("foobar") == "Zm9vYmFy");
  CHECK(b64(std::string("\xff\x00\x80", 3)) == "/wCA");
  CHECK(unbase64(b64("any bytes \x01\xfe")) == "any bytes \x01\xfe");
}

TEST_CASE("viewer: the JSON of a hand-set model holds its known weights, scores and labels") {
  test::Constructed m = test::constructed_decoder();
  const data::Batch b = test::previous_token_batch(1, m.T, m.V, 5);
  interp::ViewerContent c;
  c.title = "a </script> title <!-- x";
  const std::string json = interp::viewer_json(*m.model, *m.task, m.cfg.model, b, c);
  CHECK(json.rfind("{\"format\":\"qkv-viewer\",\"version\":1,", 0) == 0);
  CHECK(json.find("</") == std::string::npos);  // the embedding rule
  CHECK(json.find("<!--") == std::string::npos);
  CHECK(json.find("\"arch\":\"decoder\"") != std::string::npos);
  CHECK(json.find("\"name\":\"blocks.0.attn\",\"kind\":\"causal\"") != std::string::npos);
  CHECK(json.find("\"label\":\"previous-token\"") != std::string::npos);
  CHECK(json.find("\"label\":\"first-token\"") != std::string::npos);
  CHECK(json.find("NaN") == std::string::npos);
  CHECK(json.find("\"retrieval\"") == std::string::npos);  // a score that does not apply is left out

  // head 0: query i puts (about) all of its weight on key i - 1; query 0 on key 0
  const std::string w0 = unbase64(weights_after(json, 0));
  REQUIRE(w0.size() == m.T * m.T);
  CHECK((unsigned char)w0[0] == 255);
  for (std::size_t i = 1; i < m.T; ++i) {
    INFO("query " << i);
    CHECK((unsigned char)w0[i * m.T + i - 1] >= 253);
    for (std::size_t j = i + 1; j < m.T; ++j) CHECK(w0[i * m.T + j] == 0);  // causal: no future key
  }
  // head 1: every query on key 0
  const std::string w1 = unbase64(weights_after(json, json.find("\"weights\"") + 10));
  REQUIRE(w1.size() == m.T * m.T);
  for (std::size_t i = 0; i < m.T; ++i) CHECK((unsigned char)w1[i * m.T] >= 253);

  const std::string page = interp::viewer_page(json);
  CHECK(page.find("/*QKV_DATA*/") == std::string::npos);
  CHECK(page.find(json) != std::string::npos);
  CHECK(page.find("<script id=\"qkv-data\" type=\"application/json\">{\"format\"") != std::string::npos);
  CHECK_THROWS_WITH_AS(interp::viewer_page(json, "<html>no placeholder</html>"), doctest::Contains("exactly one"), ValueError);
  CHECK_THROWS_WITH_AS(interp::viewer_json(*m.model, *m.task, m.cfg.model, test::previous_token_batch(2, m.T, m.V, 5), c),
                       doctest::Contains("one example"), ShapeError);
}

TEST_CASE("viewer: snapshots join the page as base64 per step, and snapshots of another model are refused") {
  test::Constructed m = test::constructed_decoder();
  const data::Batch b = test::previous_token_batch(2, m.T, m.V, 5);
  interp::SnapshotRecorder rec(*m.model, *m.task, b);
  rec.record(0);
  rec.record(7);
  interp::ViewerContent c;
  c.snapshots = &rec.snapshots();
  c.snapshot_example = 1;
  const std::string json = interp::viewer_json(*m.model, *m.task, m.cfg.model, data::rows(b, 0, 1), c);
  const std::size_t at = json.find("\"snapshots\":{\"steps\":[0,7],\"example\":\"held-out example 1\"");
  REQUIRE(at != std::string::npos);
  const std::size_t w = json.find("\"weights\":[\"", at);
  REQUIRE(w != std::string::npos);
  CHECK(unbase64(json.substr(w + 12, json.find('"', w + 12) - w - 12)).size() == m.T * m.T);

  c.snapshot_example = 2;
  CHECK_THROWS_WITH_AS(interp::viewer_json(*m.model, *m.task, m.cfg.model, data::rows(b, 0, 1), c),
                       doctest::Contains("example 2"), ValueError);
  interp::Snapshots other = rec.snapshots();
  other.layers[0].name = "blocks.9.attn";
  c.snapshots = &other;
  c.snapshot_example = 0;
  CHECK_THROWS_WITH_AS(interp::viewer_json(*m.model, *m.task, m.cfg.model, data::rows(b, 0, 1), c),
                       doctest::Contains("another model"), ValueError);
}

TEST_CASE("viewer: JSON strings escape quotes, control characters and the HTML end of a script") {
  CHECK(interp::json_string("a\"b\\c\n") == "\"a\\\"b\\\\c\\u000a\"");
  CHECK(interp::json_string("</script>") == "\"<\\/script>\"");
  CHECK(interp::json_string("<!-- x") == "\"<\\u0021-- x\"");
  CHECK(interp::json_string("我爱吃苹果") == "\"我爱吃苹果\"");
  CHECK(interp::json_number(NAN) == "null");
  CHECK(interp::json_number(0.5) == "0.5");
}

}  // namespace qkv
