// The studio's endpoints that run a model (docs/studio.md, "The API"): each reads its JSON body
// into the library's request struct (the JSON's own checks: types, sizes, unknown fields), calls
// the library and answers the library's JSON. A field error of the library is a 400 naming the
// field by its path in the request body.
#include <chrono>

#include "qkv/autograd/tape.hpp"
#include "qkv/interp/analyze.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/attribution.hpp"
#include "qkv/interp/lens.hpp"
#include "qkv/interp/path_patching.hpp"
#include "qkv/interp/patching.hpp"
#include "serve_api.hpp"

namespace qkv::app {
namespace {

using json::Fields;
using json::Value;

constexpr std::size_t kMaxTextBytes = 16 * 1024;
constexpr std::size_t kMaxHeldout = 1024;
constexpr std::size_t kAnyIndex = std::size_t(1) << 40;  // whole numbers the library then checks

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// Run `f`; a field error of the library becomes a 400 naming the field as the body spells it:
// `renames` maps a library field (or, with a trailing '.', every field below it) to its path.
template <class F>
auto answered(const std::vector<std::pair<std::string, std::string>>& renames, F&& f) {
  try {
    return f();
  } catch (const OptionError& e) {
    if (e.owner != "request") throw;
    auto path = [&](const std::string& field) { return renamed_field(field, renames); };
    throw RequestError(e.report(path));
  }
}

// input: {"text": S, "mask_text": S, "masks": [P...]} | {"ids": [I...], "masks": [...]} | {"example": N}
model::InputRequest read_input(const Value& v, const std::string& path) {
  Fields f(v, path, {"text", "ids", "example", "mask_text", "masks"});
  model::InputRequest in;
  in.plain_text = true;  // grammar text outside the grammar is shown as plain tokens, with a note
  if (const Value* t = f.get("text")) in.text = json::string(*t, f.path("text"), kMaxTextBytes);
  if (const Value* m = f.get("mask_text")) {
    if (!f.get("text")) throw RequestError(f.path("mask_text") + ": goes with text only");
    in.mask_text = json::string(*m, f.path("mask_text"), 64);
  }
  if (const Value* ids = f.get("ids")) {
    const auto& items = json::array(*ids, f.path("ids"), kMaxTextBytes);
    in.ids.emplace();
    for (std::size_t i = 0; i < items.size(); ++i)
      in.ids->push_back(Index(json::whole(items[i], f.path("ids") + "[" + std::to_string(i) + "]", 0, kAnyIndex)));
  }
  if (const Value* e = f.get("example")) in.example = json::whole(*e, f.path("example"), 0, kAnyIndex);
  if (const Value* m = f.get("masks")) {
    const auto& items = json::array(*m, f.path("masks"), kMaxTextBytes);
    for (std::size_t i = 0; i < items.size(); ++i)
      in.masks.push_back(json::whole(items[i], f.path("masks") + "[" + std::to_string(i) + "]", 0, kAnyIndex));
  }
  return in;
}

// ablate: {"heads": [[L, H], ...], "mode": "zero" | "mean"}
struct Ablation {
  std::vector<interp::HeadRef> heads;
  interp::AblationMode mode = interp::AblationMode::Zero;
  bool given = false;
};
Ablation read_ablation(const Fields& top) {
  Ablation a;
  const Value* v = top.get("ablate");
  if (!v) return a;
  a.given = true;
  Fields f(*v, top.path("ablate"), {"heads", "mode"});
  if (const Value* md = f.get("mode"))
    a.mode = interp::ablation_mode_names().parse(json::string(*md, f.path("mode"), 64), f.path("mode"));
  if (const Value* h = f.get("heads")) {
    const auto& items = json::array(*h, f.path("heads"), 4096);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string at = f.path("heads") + "[" + std::to_string(i) + "]";
      const auto& pair = json::array(items[i], at, 2);
      if (pair.size() != 2) throw RequestError(at + ": expected [layer, head], found an array of " + std::to_string(pair.size()));
      a.heads.push_back({json::whole(pair[0], at + "[0]", 0, kAnyIndex), json::whole(pair[1], at + "[1]", 0, kAnyIndex)});
    }
  }
  return a;
}

// Mean ablation's means, made on the batch instance and shared with the interactive one's cache
// (the caller holds s.mutex).
void share_means(ServedModel& s) {
  if (s.cache.means || !s.with_data) return;
  std::lock_guard<std::mutex> batch(s.batch_mutex);
  interp::cached_means(s.batch, s.batch_cache);
  s.cache.means = s.batch_cache.means;
}

// The body's "ablate" object, when it was given (a field of it, when one is named).
const std::vector<std::pair<std::string, std::string>> kAblateFields = {{"heads", "ablate.heads"}, {"mode", "ablate.mode"}};

}  // namespace

std::string Studio::analyze(const std::string& body, bool explain_only) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", explain_only ? std::vector<std::string>{"model", "input", "ablate", "query"}
                               : std::vector<std::string>{"model", "input", "ablate", "query", "top_k", "weights"});
  ServedModel& s = model_of(f);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!f.get("input")) throw RequestError("input: required (an object with text, ids or example)");
  interp::AnalyzeRequest request;
  request.input = read_input(*f.get("input"), "input");
  const Ablation ab = read_ablation(f);
  request.ablate = ab.heads;
  request.mode = ab.mode;
  if (const Value* k = f.get("top_k")) request.top_k = json::whole(*k, "top_k", 0, kAnyIndex);
  std::optional<interp::ExplainRequest> query;
  if (const Value* q = f.get("query")) {
    Fields qf(*q, "query", {"layer", "head", "position"});
    for (const char* k : {"layer", "head", "position"})
      if (!qf.get(k)) throw RequestError(qf.path(k) + ": required (a whole number)");
    query.emplace();
    query->input = request.input;
    query->layer = json::whole(*qf.get("layer"), "query.layer", 0, kAnyIndex);
    query->head = json::whole(*qf.get("head"), "query.head", 0, kAnyIndex);
    query->query = json::whole(*qf.get("position"), "query.position", 0, kAnyIndex);
  }
  // float32: the weights exactly as the model computed them; uint8: round(255 w), as the pages
  // draw them, a quarter of the bytes.
  interp::WeightEncoding encoding = interp::WeightEncoding::Float32;
  if (const Value* wt = f.get("weights")) {
    const std::string& kind = json::string(*wt, "weights", 64);
    if (kind != "float32" && kind != "uint8") throw RequestError("weights: expected float32 or uint8, found '" + kind + "'");
    if (kind == "uint8") encoding = interp::WeightEncoding::Uint8;
  }
  if (explain_only && !query) throw RequestError("query: required (layer, head and position)");
  if (ab.mode == interp::AblationMode::Mean && !ab.heads.empty()) {
    if (!s.with_data)
      throw RequestError("ablate.mode: mean ablation replaces a head by its mean output over the validation set, "
                         "which needs the model's data, " + s.data_note);
    share_means(s);
  }
  std::string out = "{";
  if (!explain_only) {
    const interp::AnalyzeResult r = answered({{"ablate", "ablate.heads"}, {"mode", "ablate.mode"}},
                                             [&] { return interp::analyze(s.loaded, request, &s.cache); });
    std::string one = interp::to_json(r, *s.loaded.task, encoding);
    out += one.substr(1, one.size() - 2) + ",";
  }
  out += "\"explain\":";
  if (query) {
    // The same ablation as the grid: explain sees the heads the page removed.
    const std::vector<Array<float>>* means = ab.mode == interp::AblationMode::Mean ? s.cache.means.get() : nullptr;
    interp::HeadAblation ablation(*s.loaded.model, ab.heads, ab.heads.empty() ? interp::AblationMode::Zero : ab.mode, means);
    const auto e = answered({{"layer", "query.layer"}, {"head", "query.head"}, {"query", "query.position"}},
                            [&] { return interp::explain(s.loaded, *query); });
    std::string one = interp::explanation_json(e.front());
    while (!one.empty() && one.back() == '\n') one.pop_back();
    out += one;
  } else {
    out += "null";
  }
  out += ",\"ms\":" + json::number(elapsed_ms(start)) + "}";
  return out;
}

std::string Studio::heldout(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "ablate", "examples"});
  ServedModel& s = model_of(f);
  // On the batch instance: typing on this model goes on meanwhile.
  std::lock_guard<std::mutex> lock(s.batch_mutex);
  if (!s.with_data) throw RequestError("held-out metrics need the model's test split, " + s.data_note);
  const Ablation ab = read_ablation(f);
  const data::Batch& test_set = s.batch.data->test_set();
  if (test_set.size() == 0) throw RequestError("the model's test split is empty");
  interp::AblateRequest request;
  request.heads = ab.heads;  // as `qkv ablate CKPT --heads ... --examples N`: the first N test examples
  request.mode = ab.mode;
  request.examples = std::min<std::size_t>(64, test_set.size());
  if (const Value* e = f.get("examples")) request.examples = json::whole(*e, "examples", 1, kMaxHeldout);
  const interp::AblateResult r = answered(kAblateFields, [&] { return interp::ablate(s.batch, request, &s.batch_cache); });
  std::string one = interp::to_json(r);
  one.pop_back();
  return one + ",\"ms\":" + json::number(elapsed_ms(start)) + "}";
}

namespace {

// The position and the answer and wrong tokens.
template <class Request>
void read_target(const Fields& f, Request& request) {
  if (const Value* p = f.get("position")) request.position = json::whole(*p, "position", 0, kAnyIndex);
  bool numbers = false, texts = false;
  for (const char* k : {"answer", "wrong"}) {
    const Value* t = f.get(k);
    if (!t) continue;
    const bool number = t->kind == Value::Kind::Number;
    (number ? numbers : texts) = true;
    (std::string(k) == "answer" ? request.answer : request.wrong) = number ? t->text : json::string(*t, k, 256);
  }
  if (numbers && texts) throw RequestError("wrong: give answer and wrong both as class ids (numbers) or both as tokens (strings)");
  request.ids = numbers;
}

// The fields every two-run request has: the inputs, the position and the tokens (class ids as
// numbers, or tokens as strings, not both).
template <class Request>
void read_two_runs(const Fields& f, Request& request) {
  for (const char* k : {"clean", "corrupt"})
    if (!f.get(k)) throw RequestError(std::string(k) + ": required (an object with text, ids or example)");
  request.clean = read_input(*f.get("clean"), "clean");
  request.corrupt = read_input(*f.get("corrupt"), "corrupt");
  read_target(f, request);
}

// {"<key>": the library's JSON, "ms": ...}.
std::string answer_with_ms(const char* key, std::string one, std::chrono::steady_clock::time_point start) {
  while (!one.empty() && one.back() == '\n') one.pop_back();
  return std::string("{\"") + key + "\":" + one + ",\"ms\":" + json::number(elapsed_ms(start)) + "}";
}

}  // namespace

std::string Studio::patch(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "clean", "corrupt", "position", "answer", "wrong", "point"});
  ServedModel& s = model_of(f);
  std::lock_guard<std::mutex> lock(s.mutex);
  interp::PatchRequest request;
  read_two_runs(f, request);
  if (const Value* p = f.get("point")) request.point = json::string(*p, "point", 64);
  const interp::PatchingResult r = answered({}, [&] { return interp::patch(s.loaded, request); });
  return answer_with_ms("patching", interp::patching_json(r, *s.loaded.task), start);
}

std::string Studio::attribute(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "clean", "corrupt", "position", "answer", "wrong", "method", "steps", "noise"});
  ServedModel& s = model_of(f);
  std::lock_guard<std::mutex> lock(s.mutex);
  interp::AttributeRequest request;
  read_two_runs(f, request);
  if (const Value* m = f.get("method"))
    request.method = interp::attribution_method_names().parse(json::string(*m, "method", 32), "method");
  if (const Value* n = f.get("steps")) request.steps = json::whole(*n, "steps", 1, 1000);
  if (const Value* n = f.get("noise")) request.noise = json::boolean(*n, "noise");
  const interp::AttributionResult r = answered({}, [&] { return interp::attribute(s.loaded, request); });
  return answer_with_ms("attribution", interp::to_json(r, *s.loaded.task), start);
}

std::string Studio::path(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "clean", "corrupt", "position", "answer", "wrong", "sender", "receivers"});
  ServedModel& s = model_of(f);
  std::lock_guard<std::mutex> lock(s.mutex);
  interp::PathPatchRequest request;
  read_two_runs(f, request);
  const Value* sender = f.get("sender");
  if (!sender) throw RequestError("sender: required ([layer, head])");
  const std::vector<Value>& pair = json::array(*sender, "sender", 2);
  if (pair.size() != 2) throw RequestError("sender: expected [layer, head]");
  request.sender = {json::whole(pair[0], "sender[0]", 0, kAnyIndex), json::whole(pair[1], "sender[1]", 0, kAnyIndex)};
  if (const Value* list = f.get("receivers")) {
    const std::vector<Value>& items = json::array(*list, "receivers", 4096);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string at = "receivers[" + std::to_string(i) + "]";
      request.receivers.push_back(answered({}, [&] { return interp::parse_receiver(json::string(items[i], at, 32), at); }));
    }
  }
  const interp::PathPatchResult r = answered({}, [&] { return interp::path_patch(s.loaded, request); });
  return answer_with_ms("path", interp::to_json(r, *s.loaded.task), start);
}

std::string Studio::lens(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "input", "position", "answer", "wrong", "top_k"});
  ServedModel& s = model_of(f);
  std::lock_guard<std::mutex> lock(s.mutex);
  interp::LensRequest request;
  if (!f.get("input")) throw RequestError("input: required (an object with text, ids or example)");
  request.input = read_input(*f.get("input"), "input");
  read_target(f, request);
  if (const Value* k = f.get("top_k")) request.top_k = json::whole(*k, "top_k", 1, 50);
  const interp::LensResult r = answered({}, [&] { return interp::logit_lens(s.loaded, request); });
  return answer_with_ms("lens", interp::to_json(r, *s.loaded.task), start);
}

std::string Studio::heads(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "examples"});
  ServedModel& s = model_of(f);
  // On the batch instance, as the held-out metrics: typing on this model goes on meanwhile.
  std::lock_guard<std::mutex> lock(s.batch_mutex);
  if (!s.with_data) throw RequestError("head scores and labels need the model's test split, " + s.data_note);
  interp::HeadsRequest request;  // as `qkv heads CKPT --examples N`: the first N test examples
  if (const Value* e = f.get("examples")) request.examples = json::whole(*e, "examples", 1, kMaxHeldout);
  const interp::HeadsResult r = answered({}, [&] { return interp::heads(s.batch, request); });
  std::string one = interp::to_json(r);
  one.pop_back();
  return one + ",\"ms\":" + json::number(elapsed_ms(start)) + "}";
}

}  // namespace qkv::app
