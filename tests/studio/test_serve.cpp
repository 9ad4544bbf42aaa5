// The studio's request handler (src/app/serve_api.hpp) without sockets: the strict JSON parser,
// every endpoint's good and bad input, its numbers against the library's (explain, ablation,
// patching), parallel requests, and the fuzz target's corpus and saved inputs replayed.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "app/serve_api.hpp"
#include "qkv/io/json.hpp"
#include "fuzz/serve_target.hpp"
#include "qkv/compile/compile.hpp"
#include "qkv/interp/ablation.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/model/load.hpp"
#include "qkv/rasp/program.hpp"
#include "test_util.hpp"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using json::Value;

app::StudioResponse post(app::Studio& s, const std::string& path, const std::string& body,
                         const std::string& type = "application/json") {
  app::StudioRequest r;
  r.method = "POST", r.path = path, r.body = body, r.content_type = type, r.host = fuzz::kStudioHost;
  return s.handle(r);
}

app::StudioResponse get(app::Studio& s, const std::string& path, std::vector<std::pair<std::string, std::string>> query = {}) {
  app::StudioRequest r;
  r.method = "GET", r.path = path, r.query = std::move(query), r.host = fuzz::kStudioHost;
  return s.handle(r);
}

// The error message of a 4xx response (its JSON parsed), with the status checked.
std::string error_of(const app::StudioResponse& r, int status) {
  CHECK(r.status == status);
  const Value v = json::parse(r.body);
  const Value* e = v.find("error");
  REQUIRE(e != nullptr);
  return e->text;
}

// The body without its timing ("ms", the last member): the same request gives the same text.
std::string without_ms(const std::string& body) { return body.substr(0, body.rfind(",\"ms\":")); }

std::string parse_error(const std::string& text) {
  try {
    json::parse(text);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(parsed)";
}

}  // namespace

TEST_CASE("studio json: strict parsing of requests, with the byte where it fails") {
  const Value v = json::parse(R"( {"a": [1, -2.5e3, true, null], "b": "\u732b\ud83d\ude00\n", "c": {}} )");
  REQUIRE(v.kind == Value::Kind::Object);
  REQUIRE(v.find("a")->items.size() == 4);
  CHECK(v.find("a")->items[1].number == -2500.0);
  CHECK(v.find("a")->items[1].text == "-2.5e3");
  CHECK(v.find("b")->text == "猫😀\n");
  CHECK(v.find("c")->kind == Value::Kind::Object);
  CHECK(json::parse("\"猫\"").text == "猫");

  CHECK(parse_error("") == "body: empty; expected a JSON value (an object such as {\"model\": 0}) at byte 0 (not valid JSON)");
  CHECK(parse_error("{\"a\": 1,}") == "body: expected a member name in double quotes at byte 8 (not valid JSON)");
  CHECK(parse_error("[1, 2,]") == "body: expected a value (an object, array, string, number, true, false or null), found ']' at byte 6 (not valid JSON)");
  CHECK(parse_error("{\"a\": 1, \"a\": 2}") == "body: the member 'a' appears twice at byte 12 (not valid JSON)");
  CHECK(parse_error("{\"a\": 01}") == "body: a number may not start with 0 followed by digits at byte 7 (not valid JSON)");
  CHECK(parse_error("{} x") == "body: unexpected text after the JSON value at byte 3 (not valid JSON)");
  CHECK(parse_error("\"\xff\"").find("invalid UTF-8") != std::string::npos);
  CHECK(parse_error("\"\xe7\x8c\"").find("invalid UTF-8") != std::string::npos);  // cut short
  CHECK(parse_error("\"\xc0\xaf\"").find("invalid UTF-8") != std::string::npos);      // overlong '/'
  CHECK(parse_error("\"\xed\xa0\x80\"").find("invalid UTF-8") != std::string::npos);  // a surrogate
  CHECK(parse_error("\"\\ud83d\"").find("without its low surrogate") != std::string::npos);
  CHECK(parse_error("\"a\nb\"").find("a control character") != std::string::npos);
  CHECK(parse_error("1e999").find("out of range") != std::string::npos);
  CHECK(parse_error(std::string(40, '[') + std::string(40, ']')).find("nesting deeper than 16") != std::string::npos);
  CHECK(parse_error("{\"a\": tru}").find("did you mean true?") != std::string::npos);

  const Value n = json::parse("{\"x\": 3, \"y\": -1, \"z\": 2.0, \"s\": \"3\"}");
  CHECK(json::whole(*n.find("x"), "x", 0, 5) == 3);
  CHECK_THROWS_WITH(json::whole(*n.find("y"), "y", 0, 5), "y: expected a whole number in [0, 5], found the number -1");
  CHECK_THROWS_WITH(json::whole(*n.find("z"), "z", 0, 5), "z: expected a whole number in [0, 5], found the number 2.0");
  CHECK_THROWS_WITH(json::whole(*n.find("s"), "s", 0, 5), "s: expected a whole number in [0, 5], found the string '3'");
  CHECK_THROWS_WITH(json::whole(*n.find("x"), "x", 4, 5), "x: expected a whole number in [4, 5], found 3");

  json::Writer w;
  w.open('{').member("a", 1).key("b").open('[').value(0.5).value("x</script>").null().close(']').member("c", true).close('}');
  CHECK(w.str() == "{\"a\":1,\"b\":[0.5,\"x<\\/script>\",null],\"c\":true}");
  CHECK(json::number(0.1) == "0.1");
  CHECK(json::number(1.0 / 3) == "0.3333333333333333");
  CHECK(json::number(2.0) == "2");
  CHECK(json::base64_floats(std::vector<float>{1.0f}.data(), 1) == "AACAPw==");
}

TEST_CASE("studio: the page, its assets and the models are served, unknown pages and methods refused") {
  app::Studio s = fuzz::make_studio();
  const app::StudioResponse page = get(s, "/");
  CHECK(page.status == 200);
  CHECK(page.content_type == "text/html; charset=utf-8");
  CHECK(page.body.find("<script src=\"/studio.js\"") != std::string::npos);
  auto header = [](const app::StudioResponse& r, const std::string& k) {
    for (auto& [n, v] : r.headers)
      if (n == k) return v;
    return std::string();
  };
  CHECK(header(page, "Content-Security-Policy").find("default-src 'none'; script-src 'self'") == 0);
  CHECK(header(page, "X-Content-Type-Options") == "nosniff");
  CHECK(get(s, "/studio.js").content_type == "text/javascript; charset=utf-8");
  CHECK(get(s, "/studio.css").body.find("--tok-font") != std::string::npos);

  const Value models = json::parse(get(s, "/api/models").body);
  const auto& list = models.find("models")->items;
  REQUIRE(list.size() == 2);
  CHECK(list[0].find("task")->text == "grammar");
  CHECK(list[0].find("objective")->text == "masked");
  CHECK(list[0].find("mask_text")->text == "[MASK]");
  CHECK(list[0].find("suggestion")->find("text")->text == "猫喜欢追逐老鼠");
  CHECK(list[0].find("suggestion")->find("query")->number == 3);
  CHECK(list[0].find("patch")->find("clean")->text == "我爱[MASK]苹果");
  CHECK(list[0].find("patch")->find("answer")->text == "吃");
  CHECK(list[1].find("text")->kind == Value::Kind::Bool);
  CHECK(!list[1].find("text")->boolean);
  CHECK(list[1].find("suggestion")->find("example")->number == 0);
  CHECK(list[1].find("layers")->items.size() == 1);
  CHECK(models.find("run")->boolean == false);

  CHECK(error_of(get(s, "/etc/passwd"), 404).find("no such page: /etc/passwd") == 0);
  CHECK(error_of(get(s, "/api/analyze"), 405) == "/api/analyze: expected method POST, found GET");
  bool allow = false;
  for (auto& [k, v] : get(s, "/api/analyze").headers) allow = allow || (k == "Allow" && v == "POST");
  CHECK(allow);
  CHECK(error_of(post(s, "/api/models", "{}"), 405) == "/api/models: expected method GET, found POST");
  CHECK(error_of(get(s, "/api/models", {{"x", "1"}}), 400) == "/api/models: unknown query parameter 'x' (/api/models takes none)");
  app::StudioRequest other;
  other.method = "GET", other.path = "/api/models", other.host = "evil.example:8080";
  CHECK(error_of(s.handle(other), 403).find("Host 'evil.example:8080' is not this server's") == 0);
  CHECK(get(s, "/favicon.ico").status == 204);
  const Value run = json::parse(get(s, "/api/run").body);
  CHECK(run.find("note")->text == "no --run directory was given");
  CHECK(error_of(get(s, "/api/snapshot"), 404) == "/api/snapshot: no --run directory was given to qkv serve");
  CHECK(error_of(post(s, "/api/reload", "{}"), 400).find("built in memory") != std::string::npos);
}

TEST_CASE("studio: --host on loopback answers only its own names, any other address is announced as open") {
  const app::Exposure local = app::exposure("127.0.0.1", 8080);
  CHECK(local.warning.empty());
  CHECK(local.allowed_hosts == std::vector<std::string>{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"});
  CHECK(app::exposure("::1", 9000).warning.empty());
  CHECK(app::exposure("localhost", 9000).allowed_hosts.size() == 3);
  const app::Exposure other_loopback = app::exposure("127.0.0.2", 9000);
  CHECK(other_loopback.warning.empty());
  CHECK(other_loopback.allowed_hosts.back() == "127.0.0.2:9000");
  for (const std::string host : {"0.0.0.0", "192.168.1.5", "::", "128.0.0.1"}) {
    const app::Exposure open = app::exposure(host, 8080);
    CAPTURE(host);
    CHECK(open.allowed_hosts.empty());
    CHECK(open.warning == "--host " + host + ": the studio is open to the network: anyone who can reach this machine on "
                          "port 8080 can use it and run the models (there is no login)");
  }
}

TEST_CASE("studio: analyze gives every head's weights, the answer and the loss, and the explanation the library gives") {
  app::Studio s = fuzz::make_studio();
  auto models = fuzz::studio_models();
  model::LoadedModel& g = models[0]->loaded;

  // The textbook sentence with 老 hidden: the answer is a fill, the loss scores 老.
  const app::StudioResponse r = post(s, "/api/analyze",
                                     R"({"input": {"text": "猫喜欢追逐老鼠", "masks": [5]}, "query": {"layer": 1, "head": 0, "position": 3}})");
  REQUIRE(r.status == 200);
  const Value v = json::parse(r.body);
  std::vector<std::string> tokens;
  for (auto& t : v.find("tokens")->items) tokens.push_back(t.text);
  CHECK(tokens == std::vector<std::string>{"猫", "喜", "欢", "追", "逐", "[MASK]", "鼠", "。"});
  const auto& layers = v.find("layers")->items;
  REQUIRE(layers.size() == 2);
  CHECK(layers[0].find("name")->text == "blocks.0.attn");
  CHECK(layers[0].find("kind")->text == "self");
  REQUIRE(layers[0].find("weights")->items.size() == 2);
  CHECK(layers[0].find("encoding")->text == "float32");
  CHECK(layers[0].find("weights")->items[0].text.size() == (8 * 8 * 4 + 2) / 3 * 4);  // 64 float32 in base64
  const Value u8 = json::parse(post(s, "/api/analyze", R"({"input": {"text": "猫喜欢追逐老鼠"}, "weights": "uint8"})").body);
  CHECK(u8.find("layers")->items[0].find("encoding")->text == "uint8");
  CHECK(u8.find("layers")->items[0].find("weights")->items[0].text.size() == (8 * 8 + 2) / 3 * 4);  // 64 bytes
  const Value& answer = *v.find("answer");
  CHECK(answer.find("kind")->text == "fill");
  REQUIRE(answer.find("fills")->items.size() == 1);
  CHECK(answer.find("fills")->items[0].find("position")->number == 5);
  CHECK(answer.find("fills")->items[0].find("top")->items.size() == 5);
  CHECK(answer.find("positions")->items[5].find("target_token")->text == "老");
  CHECK(v.find("scored")->number == 1);
  const double p_target = answer.find("positions")->items[5].find("p_target")->number;
  CHECK(v.find("loss")->number == doctest::Approx(-std::log(p_target)));

  // explain: the same text as `qkv explain --json` on the same row
  data::Batch row = g.task->text_row("猫喜欢追逐老鼠", "text");
  row.targets(0, 5) = row.inputs(0, 5), row.inputs(0, 5) = g.task->mask_token();
  std::string expected = interp::explanation_json(interp::explain_query(*g.model, *g.task, row, 1, 0, 3));
  expected.pop_back();  // its newline
  const std::size_t at = r.body.find("\"explain\":") + 10;
  CHECK(r.body.substr(at, expected.size()) == expected);
  const app::StudioResponse only = post(s, "/api/explain",
                                        R"({"input": {"text": "猫喜欢追逐老鼠", "masks": [5]}, "query": {"layer": 1, "head": 0, "position": 3}})");
  CHECK(only.body.find(expected) != std::string::npos);
  CHECK(only.body.find("\"layers\"") == std::string::npos);

  // A head removed: the answer changes, and the intact model's loss comes along.
  const Value ab = json::parse(post(s, "/api/analyze", R"({"input": {"text": "猫喜欢追逐老鼠", "masks": [5]}, "ablate": {"heads": [[1, 0], [1, 1]]}})").body);
  CHECK(ab.find("intact")->find("loss")->number == v.find("loss")->number);
  CHECK(ab.find("loss")->number != v.find("loss")->number);
  CHECK(ab.find("ablated")->items.size() == 2);

  // Token ids, and a held-out example with its targets (a sort model: every position scored).
  const Value ids = json::parse(post(s, "/api/analyze", R"({"model": 1, "input": {"ids": [5, 1, 7]}})").body);
  CHECK(ids.find("tokens")->items.size() == 3);
  CHECK(ids.find("answer")->find("kind")->text == "labels");
  CHECK(ids.find("loss")->kind == Value::Kind::Null);
  const Value ex = json::parse(post(s, "/api/analyze", R"({"model": 1, "input": {"example": 3}})").body);
  CHECK(ex.find("scored")->number == 8);

  // Text outside the grammar is read as plain tokens, with a note saying so.
  const Value plain = json::parse(post(s, "/api/analyze", R"({"input": {"text": "鼠猫"}})").body);
  CHECK(plain.find("note")->text.find("'鼠猫'") == 0);
  CHECK(plain.find("note")->text.find("read as plain tokens") != std::string::npos);
  CHECK(plain.find("tokens")->items.size() == 2);
}

TEST_CASE("studio: bad requests get 400 (or 413, 415) naming the field, expected and found") {
  app::Studio s = fuzz::make_studio();
  auto bad = [&](const std::string& body, int status = 400, const std::string& path = "/api/analyze") {
    return error_of(post(s, path, body), status);
  };
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"inptu\": 1}") ==
        "inptu: unknown field; did you mean 'input'? (the body may have model, input, ablate, query, top_k, weights)");
  CHECK(bad("[1]") == "the body: expected an object, found an array of 1");
  CHECK(bad("{}") == "input: required (an object with text, ids or example)");
  CHECK(bad("{\"input\": {}}") == "input: give exactly one of text, ids or example; found none");
  CHECK(bad("{\"input\": {\"text\": \"我\", \"ids\": [1]}}") == "input: give exactly one of text, ids or example; found 2 of them");
  CHECK(bad("{\"input\": {\"text\": 3}}") == "input.text: expected a string, found the number 3");
  CHECK(bad("{\"input\": {\"text\": \"\"}}").find("input.text") == 0);
  CHECK(bad("{\"input\": {\"text\": \"我爱吃Ω\"}}").find("input.text") == 0);
  CHECK(bad("{\"input\": {\"text\": \"" + std::string(30, 'x') + "\"}}").find("input.text") == 0);
  CHECK(bad("{\"model\": 2, \"input\": {\"text\": \"我\"}}") == "model: expected a whole number in [0, 1], found 2");
  CHECK(bad("{\"model\": 1, \"input\": {\"text\": \"3 1\"}}").find("input.text: the model was trained on task sort, which has token ids") == 0);
  CHECK(bad("{\"model\": 1, \"input\": {\"ids\": [1, 8]}}") == "input.ids[1]: token id 8 is outside the vocabulary [0, 8)");
  CHECK(bad("{\"model\": 1, \"input\": {\"ids\": [1, 2, 3, 4, 5, 6, 7, 1, 2]}}") ==
        "input.ids: 9 tokens, more than the model's context of 8 (task.length)");
  CHECK(bad("{\"model\": 1, \"input\": {\"example\": 8}}") == "input.example 8: the validation set has 8 examples (0..7)");
  CHECK(bad("{\"model\": 1, \"input\": {\"ids\": [1], \"masks\": [0]}}").find("input.masks: the model was trained on task sort without masks") == 0);
  CHECK(bad("{\"input\": {\"text\": \"我爱吃苹果\", \"masks\": [9]}}") == "input.masks[0]: position 9 is past the row's 6 tokens");
  CHECK(bad("{\"input\": {\"text\": \"我爱吃苹果\", \"masks\": [1, 1]}}") == "input.masks[1]: position 1 is masked already");
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"ablate\": {\"heads\": [[0, 2]]}}") == "ablate.heads[0]: attention layer 0 has no head 2 (heads 0..1)");
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"ablate\": {\"heads\": [[0]]}}") == "ablate.heads[0]: expected [layer, head], found an array of 1");
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"ablate\": {\"heads\": [[0, 1], [0, 1]]}}") == "ablate.heads[1]: head 0.1 is listed twice");
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"ablate\": {\"mode\": \"half\"}}").find("ablate.mode: expected one of zero, mean, found 'half'") == 0);
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"query\": {\"layer\": 0, \"head\": 0, \"position\": 2}}") ==
        "query.position 2: blocks.0.attn reads 1 queries (0..0)");
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"query\": {\"layer\": 0}}") == "query.head: required (a whole number)");
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"top_k\": 0}") == "top_k: expected a whole number in [1, 50], found 0");
  CHECK(bad("{\"input\": {\"text\": \"我\"}, \"weights\": \"f16\"}") == "weights: expected float32 or uint8, found 'f16'");
  CHECK(bad("{\"input\": {\"text\": \"我\"}}", 400, "/api/explain") == "query: required (layer, head and position)");
  CHECK(bad("{\"input\"") .find("body: ") == 0);
  CHECK(error_of(post(s, "/api/analyze", "{}", "text/plain"), 415) ==
        "/api/analyze: expected a body of Content-Type application/json, found 'text/plain'");
  CHECK(error_of(post(s, "/api/analyze", std::string(70000, ' ')), 413).find("more than the 65536") != std::string::npos);

  // patching: inputs of different lengths, tokens that are not one token, answer == wrong
  CHECK(bad("{\"clean\": {\"text\": \"我爱吃苹果\"}, \"corrupt\": {\"text\": \"我爱吃\"}}", 400, "/api/patch").find(
            "corrupt: patching needs a clean and a corrupted input of the same length") == 0);
  CHECK(bad("{\"clean\": {\"text\": \"我爱[MASK]苹果\"}, \"corrupt\": {\"text\": \"我爱[MASK]牛奶\"}, \"answer\": \"苹果\", \"wrong\": \"喝\"}",
            400, "/api/patch") == "answer: '苹果' is 2 tokens for this model; give one token");
  CHECK(bad("{\"corrupt\": {\"text\": \"我\"}}", 400, "/api/patch") == "clean: required (an object with text, ids or example)");
  CHECK(bad("{\"examples\": 1025, \"model\": 1}", 400, "/api/heldout") == "examples: expected a whole number in [1, 1024], found 1025");
  CHECK(bad("{\"model\": 1, \"ablate\": {\"heads\": [[1, 0]]}}", 400, "/api/heldout") ==
        "ablate.heads[0]: the model has no attention layer 1 (layers 0..0)");
}

TEST_CASE("studio: held-out metrics and patching equal qkv ablate's and qkv patch's numbers") {
  app::Studio s = fuzz::make_studio();
  auto models = fuzz::studio_models();
  model::LoadedModel& sort = models[1]->loaded;
  const data::Batch test = data::rows(sort.data->test_set(), 0, 6);
  const Value h = json::parse(post(s, "/api/heldout", R"({"model": 1, "examples": 6, "ablate": {"heads": [[0, 1]]}})").body);
  const model::EvalMetrics intact = interp::ablated_metrics(*sort.model, test, {}, interp::AblationMode::Zero);
  const model::EvalMetrics without = interp::ablated_metrics(*sort.model, test, {{0, 1}}, interp::AblationMode::Zero);
  CHECK(h.find("intact")->find("loss")->number == intact.loss);
  CHECK(h.find("ablated")->find("loss")->number == without.loss);
  CHECK(h.find("ablated")->find("token_accuracy")->number == without.token_accuracy);
  // mean ablation: the means of the validation set, as qkv ablate --mode mean
  const auto means = interp::head_means(*sort.model, sort.data->eval_set());
  const model::EvalMetrics mean = interp::ablated_metrics(*sort.model, test, {{0, 0}}, interp::AblationMode::Mean, &means);
  const Value hm = json::parse(
      post(s, "/api/heldout", R"({"model": 1, "examples": 6, "ablate": {"heads": [[0, 0]], "mode": "mean"}})").body);
  CHECK(hm.find("ablated")->find("loss")->number == mean.loss);

  const std::vector<Index> a = {1, 2, 3, 4}, b = {1, 6, 3, 4};
  interp::PatchingOptions o;
  o.position = 1, o.answer = 2, o.wrong = 6;
  std::string expected = interp::patching_json(
      interp::patch_heads(*sort.model, *sort.task, data::ids_row(*sort.task, a, "a"), data::ids_row(*sort.task, b, "b"), o), *sort.task);
  expected.pop_back();
  const app::StudioResponse p = post(
      s, "/api/patch", R"({"model": 1, "clean": {"ids": [1, 2, 3, 4]}, "corrupt": {"ids": [1, 6, 3, 4]}, "position": 1, "answer": 2, "wrong": 6})");
  REQUIRE(p.status == 200);
  CHECK(p.body.find("\"patching\":" + expected) != std::string::npos);
}

TEST_CASE("studio: head scores and labels equal qkv heads' numbers, and the newest checkpoint needs --run") {
  app::Studio s = fuzz::make_studio();
  auto models = fuzz::studio_models();
  const app::StudioResponse r = post(s, "/api/heads", R"({"model": 0, "examples": 8})");
  REQUIRE(r.status == 200);
  interp::HeadsRequest request;
  request.examples = 8;
  CHECK(without_ms(r.body) + "}" == interp::to_json(interp::heads(models[0]->loaded, request)));
  const Value v = json::parse(r.body);
  CHECK(v.find("heads")->items.size() == 4);  // 2 layers x 2 heads
  CHECK(v.find("heads")->items[0].find("label")->kind == Value::Kind::String);
  CHECK(error_of(post(s, "/api/heads", R"({"examples": 0})"), 400) == "examples: expected a whole number in [1, 1024], found 0");
  CHECK(error_of(post(s, "/api/heads", R"({"exmaples": 8})"), 400).find("did you mean 'examples'") != std::string::npos);
  CHECK(error_of(post(s, "/api/reload", R"({"latest": true})"), 400) ==
        "latest: the newest checkpoint of a run needs qkv serve --run DIR");
  CHECK(error_of(post(s, "/api/reload", R"({"latest": 1})"), 400).find("latest") == 0);
}

TEST_CASE("studio: requests from parallel clients give the answers of the same requests one at a time") {
  app::Studio s = fuzz::make_studio();
  const std::vector<std::string> bodies = {
      R"({"input": {"text": "猫喜欢追逐老鼠", "masks": [5]}, "query": {"layer": 1, "head": 1, "position": 3}})",
      R"({"input": {"text": "我爱吃苹果"}, "ablate": {"heads": [[0, 0]]}})",
      R"({"input": {"text": "我爱吃苹果"}, "ablate": {"heads": [[1, 1], [0, 1]], "mode": "mean"}})",
      R"({"model": 1, "input": {"ids": [7, 3, 1, 0, 2]}, "ablate": {"heads": [[0, 1]]}})",
      R"({"model": 1, "input": {"example": 1}, "query": {"layer": 0, "head": 0, "position": 4}})"};
  std::vector<std::string> serial;
  for (auto& b : bodies) serial.push_back(without_ms(post(s, "/api/analyze", b).body));
  std::atomic<int> mismatches{0}, done{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int k = 0; k < 25; ++k) {
        const std::size_t i = std::size_t(c + k) % bodies.size();
        if (without_ms(post(s, "/api/analyze", bodies[i]).body) != serial[i]) ++mismatches;
        ++done;
      }
    });
  for (auto& t : clients) t.join();
  CHECK(done == 100);
  CHECK(mismatches == 0);
}

TEST_CASE("studio fuzz regressions: the corpus and saved inputs of fuzz_serve get a documented status, never a crash") {
  app::Studio s = fuzz::make_studio();
  std::vector<fs::path> files;
  for (const char* kind : {"regressions", "corpus"}) {
    const fs::path dir = fs::path(QKV_SOURCE_DIR) / "tests" / "fuzz" / kind / "serve";
    if (!fs::is_directory(dir)) continue;
    for (auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 10);
  for (const fs::path& f : files) {
    CAPTURE(f.filename().string());
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    CHECK_NOTHROW(fuzz::run_serve_input(s, reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
  }
}

}  // namespace qkv

namespace qkv {

TEST_CASE("studio: a compiled who/what model opens on 猫喜欢追逐老鼠 at 追逐, and the walk says the program's words") {
  const rasp::Program p = rasp::load_program(std::string(QKV_SOURCE_DIR) + "/programs/who_what_zh.rasp");
  const compile::CompiledModel c = compile::compile_program(p);
  std::vector<std::unique_ptr<app::ServedModel>> models;
  models.push_back(app::serve_model(model::load_model(c.checkpoint, "who_what_zh.h5", {}, false), "compiled"));
  app::StudioOptions o;
  o.allowed_hosts = {fuzz::kStudioHost};
  app::Studio s(std::move(models), o);
  const Value m = json::parse(get(s, "/api/models").body);
  const Value& suggestion = *m.find("models")->items.at(0).find("suggestion");
  CHECK(suggestion.find("text")->text == "猫喜欢追逐老鼠");
  CHECK(suggestion.find("query")->number == 3);  // BOS 猫 喜欢 追逐

  // The "who" head at 打 of 他打碎了花瓶: the library's explanation, its program words included.
  model::LoadedModel l = model::load_model(c.checkpoint, "who_what_zh.h5", {}, false);
  interp::ExplainRequest r;
  r.input.text = "他打碎了花瓶";
  r.layer = 9, r.head = 0, r.query = 2;
  const interp::QueryExplanation e = interp::explain(l, r).at(0);
  REQUIRE(e.program_words.size() == 4);
  CHECK(e.program_words[1].find("'打' holds agent = 1") != std::string::npos);
  CHECK(e.program_words[2].find("'他' holds rank = 1") != std::string::npos);
  std::string expected = interp::explanation_json(e);
  expected.pop_back();
  const app::StudioResponse only =
      post(s, "/api/explain", R"({"input": {"text": "他打碎了花瓶"}, "query": {"layer": 9, "head": 0, "position": 2}})");
  REQUIRE(only.status == 200);
  CHECK(only.body.find(expected) != std::string::npos);
}

}  // namespace qkv
