// The studio's endpoints (docs/studio.md, "The API"). Every request body is parsed by the strict
// parser of serve_json.hpp and read field by field; an unknown field, a wrong type or a value out
// of range is a 400 naming the field. The model runs in eval mode without recording a tape; the
// hooks an endpoint adds (ablation, recording) are removed before it returns.
#include "serve_api.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <new>

#include "loaded.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/interp/ablation.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/io/files.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "serve_json.hpp"

namespace qkv::app {

// The studio's page and its assets, compiled in (serve_assets.cpp, generated from share/studio/).
const std::string& studio_html();
const std::string& studio_js();
const std::string& studio_css();

namespace {

using json::Fields;
using json::RequestError;
using json::Value;
using json::Writer;

constexpr std::size_t kMaxTopK = 50;
constexpr std::size_t kMaxHeldout = 1024;
constexpr std::size_t kMaxTextBytes = 16 * 1024;
constexpr std::size_t kMaxMetricsBytes = 32 << 20;

// The sentences a learner sees first, with the query the textbooks ask about: "追" (chase) in
// 猫喜欢追逐老鼠 looks for who chases and what. The first one the model can read is suggested.
struct Suggestion {
  const char* text;
  std::size_t query;  // 追, chase, 吃, eat
  data::TokenizerKind tokenizer;
};
const Suggestion kSuggestions[] = {{"猫喜欢追逐老鼠", 3, data::TokenizerKind::Char},
                                   {"我爱吃苹果", 2, data::TokenizerKind::Char},
                                   {"the cat likes to chase mice .", 4, data::TokenizerKind::Word},
                                   {"i love to eat apples .", 3, data::TokenizerKind::Word}};

// A first pair to patch, with the answer of each: the verb hidden and its object changed (吃 goes
// with 苹果, 喝 with 牛奶: which heads carry the object to the verb?); for decoders the next
// character after the first of the object's (苹 -> 果, 香 -> 蕉).
struct PatchPair {
  const char *clean, *corrupt, *answer, *wrong;
};
const PatchPair kMaskedPairs[] = {{"我爱[MASK]苹果", "我爱[MASK]牛奶", "吃", "喝"},
                                  {"i love to [MASK] apples .", "i love to [MASK] milk .", "eat", "drink"}};
const PatchPair kPrefixPairs[] = {{"我爱吃苹", "我爱吃香", "果", "蕉"}, {"i love to eat", "i love to drink", "", ""}};

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}


std::string class_label(const data::Task& task, Index id) {
  return id == task.mask_token() ? std::string(data::kMaskText) : task.token_label(id);
}

std::size_t model_index(const Fields& f, std::size_t n) {
  const Value* v = f.get("model");
  return v ? json::whole(*v, f.path("model"), 0, n - 1) : 0;
}

// The row for text, as the CLI reads it (Task::text_row). The grammar task reads only sentences
// of its grammar (it analyses them into words and relations); other text of its vocabulary is
// still something the model can read, so the studio shows it as plain tokens and says so.
data::Batch text_row(const data::Task& task, const std::string& text, const std::string& what,
                     const std::string& mask_text, std::string& note) {
  try {
    return task.text_row(text, what, mask_text);
  } catch (const ValueError& e) {
    if (task.name() != "grammar" || !task.tokenizer()) throw;
    data::Batch row =
        data::ids_row(task, data::encode_with_masks(*task.tokenizer(), text, task.mask_token(), mask_text, what), what);
    std::string why = e.what();
    if (why.rfind(what + ": ", 0) == 0) why = why.substr(what.size() + 2);
    note = why + "; read as plain tokens, without the grammar's analysis";
    return row;
  }
}

struct Input {
  data::Batch row;
  std::string note;  // how the input was read, when not as asked ("" otherwise)
};

// input: {"text": S, "mask_text": S, "masks": [P...]} | {"ids": [I...], "masks": [...]} | {"example": N}
Input read_input(const ServedModel& s, const Value& v, const std::string& path) {
  Fields f(v, path, {"text", "ids", "example", "mask_text", "masks"});
  const data::Task& task = *s.loaded.task;
  const int given = (f.get("text") ? 1 : 0) + (f.get("ids") ? 1 : 0) + (f.get("example") ? 1 : 0);
  if (given != 1)
    throw RequestError(path + ": give exactly one of text, ids or example; found " +
                       (given ? std::to_string(given) + " of them" : std::string("none")));
  if (f.get("mask_text") && !f.get("text")) throw RequestError(f.path("mask_text") + ": goes with text only");
  Input in;
  if (const Value* t = f.get("text")) {
    const std::string& text = json::string(*t, f.path("text"), kMaxTextBytes);
    std::string mask_text = data::kMaskText;
    if (const Value* m = f.get("mask_text")) mask_text = json::string(*m, f.path("mask_text"), 64);
    in.row = text_row(task, text, f.path("text"), mask_text, in.note);
  } else if (const Value* ids = f.get("ids")) {
    const auto& items = json::array(*ids, f.path("ids"), kMaxTextBytes);
    std::vector<Index> tokens;
    for (std::size_t i = 0; i < items.size(); ++i)
      tokens.push_back(Index(json::whole(items[i], f.path("ids") + "[" + std::to_string(i) + "]", 0, task.input_vocab() - 1)));
    in.row = data::ids_row(task, tokens, f.path("ids"));
  } else {
    if (!s.with_data) throw RequestError(f.path("example") + ": held-out examples need the model's data, " + s.data_note);
    const data::Batch& eval = s.loaded.data->eval_set();
    if (eval.size() == 0) throw RequestError(f.path("example") + ": the model's held-out set is empty");
    const std::size_t e = json::whole(*f.get("example"), f.path("example"), 0, eval.size() - 1);
    in.row = data::rows(eval, e, e + 1);
  }
  if (const Value* m = f.get("masks")) {
    const Index mask = task.mask_token();
    if (mask < 0)
      throw RequestError(f.path("masks") + ": the model was trained on task " + task.name() +
                         " without masks (task.objective: causal); masks are for masked language models");
    if (f.get("example")) throw RequestError(f.path("masks") + ": goes with text or ids, not a held-out example");
    const std::size_t T = in.row.inputs.shape()[1];
    const auto& items = json::array(*m, f.path("masks"), T);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string at = f.path("masks") + "[" + std::to_string(i) + "]";
      const std::size_t p = json::whole(items[i], at, 0, T - 1);
      const Index id = in.row.inputs(0, p);
      if (id == mask) throw RequestError(at + ": position " + std::to_string(p) + " is masked already");
      if (id == task.pad_token()) throw RequestError(at + ": position " + std::to_string(p) + " is padding");
      in.row.targets(0, p) = id;  // the token hidden is the answer the loss scores
      in.row.inputs(0, p) = mask;
    }
  }
  return in;
}

// ablate: {"heads": [[L, H], ...], "mode": "zero" | "mean"}
struct Ablation {
  std::vector<interp::HeadRef> heads;
  interp::AblationMode mode = interp::AblationMode::Zero;
  std::shared_ptr<const std::vector<Array<float>>> means;  // mean ablation with heads removed
};

// The means of mean ablation, made once on the batch instance as qkv ablate makes them (over the
// validation set). The caller holds batch_mutex.
std::shared_ptr<const std::vector<Array<float>>> means_locked(ServedModel& s) {
  {
    std::lock_guard<std::mutex> lock(s.means_mutex);
    if (s.means) return s.means;
  }
  auto m = std::make_shared<const std::vector<Array<float>>>(interp::head_means(*s.batch, s.loaded.data->eval_set()));
  std::lock_guard<std::mutex> lock(s.means_mutex);
  return s.means = m;
}

// ablate: {"heads": [[L, H], ...], "mode": "zero" | "mean"}, for model `m` (one of s's instances,
// whose lock the caller holds: batch_mutex when `batch_locked`, else mutex).
Ablation read_ablation(ServedModel& s, model::TaskModel& m, const Fields& top, bool batch_locked) {
  Ablation a;
  const Value* v = top.get("ablate");
  if (!v) return a;
  const std::string path = top.path("ablate");
  Fields f(*v, path, {"heads", "mode"});
  if (const Value* md = f.get("mode"))
    a.mode = interp::ablation_mode_names().parse(json::string(*md, f.path("mode"), 64), f.path("mode"));
  const auto per_layer = interp::heads_per_layer(m);
  if (const Value* h = f.get("heads")) {
    std::size_t total = 0;
    for (std::size_t n : per_layer) total += n;
    const auto& items = json::array(*h, f.path("heads"), total);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string at = f.path("heads") + "[" + std::to_string(i) + "]";
      const auto& pair = json::array(items[i], at, 2);
      if (pair.size() != 2) throw RequestError(at + ": expected [layer, head], found an array of " + std::to_string(pair.size()));
      const std::size_t layer = json::whole(pair[0], at + "[0]", 0, per_layer.size() - 1);
      const std::size_t head = json::whole(pair[1], at + "[1]", 0, per_layer[layer] - 1);
      const interp::HeadRef r{layer, head};
      if (std::find(a.heads.begin(), a.heads.end(), r) != a.heads.end())
        throw RequestError(at + ": head " + interp::head_name(r) + " is listed twice");
      a.heads.push_back(r);
    }
  }
  if (a.mode == interp::AblationMode::Mean && !a.heads.empty()) {
    if (!s.with_data)
      throw RequestError(f.path("mode") + ": mean ablation replaces a head by its mean output over the validation set, "
                         "which needs the model's data, " + s.data_note);
    if (batch_locked) {
      a.means = means_locked(s);
    } else {
      std::lock_guard<std::mutex> batch(s.batch_mutex);
      a.means = means_locked(s);
    }
  }
  return a;
}

void write_ablation(Writer& w, const Ablation& a) {
  w.key("ablated").open('[');
  for (auto& h : a.heads) w.open('[').value(h.layer).value(h.head).close(']');
  w.close(']');
  w.member("mode", interp::ablation_mode_names().name(a.mode));
}

void write_strings(Writer& w, const std::vector<std::string>& xs) {
  w.open('[');
  for (auto& x : xs) w.value(x);
  w.close(']');
}

// The log of softmax's denominator at every position of logits (1, T, C), in double:
// p(c at t) = exp(z[t, c] - lse[t]). One pass of exponentials per position serves the
// predictions' probabilities, the loss and the top tokens.
std::vector<double> log_sum_exp(const Array<float>& logits) {
  const std::size_t T = logits.shape()[1], C = logits.shape()[2];
  std::vector<double> lse(T);
  for (std::size_t t = 0; t < T; ++t) {
    const float* z = logits.data() + t * C;
    const double top = *std::max_element(z, z + C);
    double sum = 0;
    for (std::size_t c = 0; c < C; ++c) sum += std::exp(double(z[c]) - top);
    lse[t] = top + std::log(sum);
  }
  return lse;
}

// The k most likely classes at position t (ties by id), with their probabilities.
void write_top(Writer& w, const data::Task& task, const Array<float>& logits, const std::vector<double>& lse,
               std::size_t t, std::size_t k) {
  const std::size_t C = logits.shape()[2];
  const float* z = logits.data() + t * C;
  std::vector<std::size_t> order(C);
  for (std::size_t c = 0; c < C; ++c) order[c] = c;
  k = std::min(k, C);
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                    [&](std::size_t a, std::size_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  w.open('[');
  for (std::size_t r = 0; r < k; ++r)
    w.open('{').member("id", order[r]).member("token", class_label(task, Index(order[r])))
        .member("p", std::exp(double(z[order[r]]) - lse[t])).close('}');
  w.close(']');
}

// Mean cross-entropy and token accuracy of the predictions over the scored positions (targets
// not kIgnore), as model::evaluate scores a batch.
struct Score {
  double loss = 0, accuracy = 0;
  std::size_t scored = 0;
};
Score score_row(const data::Batch& row, const Array<float>& logits, const IndexArray& predicted, const std::vector<double>& lse) {
  const std::size_t T = logits.shape()[1], C = logits.shape()[2];
  Score s;
  std::size_t right = 0;
  for (std::size_t t = 0; t < T; ++t) {
    const Index target = row.targets(0, t);
    if (target == data::kIgnore || target < 0 || std::size_t(target) >= C) continue;
    s.loss += lse[t] - double(logits.data()[t * C + std::size_t(target)]);
    ++s.scored, right += predicted(0, t) == target;
  }
  if (s.scored) s.loss /= double(s.scored), s.accuracy = double(right) / double(s.scored);
  return s;
}
Score score_row(model::TaskModel& m, const data::Batch& row, const Array<float>& logits) {
  return score_row(row, logits, m.predict(row, logits), log_sum_exp(logits));
}

void write_score(Writer& w, const Score& s) {
  if (s.scored) w.member("loss", s.loss).member("scored", s.scored).member("token_accuracy", s.accuracy);
  else w.key("loss").null().member("scored", std::size_t(0)).key("token_accuracy").null();
}

// The model's answer for `row` from its logits (1, T, C): every output position's prediction
// (TaskModel::predict, as qkv eval scores it) with its probability and target; the fills of a
// masked model's masks; a decoder's distribution of the next token; the loss and accuracy over
// the scored positions (targets not kIgnore).
void write_answer(Writer& w, model::TaskModel& m, const data::Task& task, const data::Batch& row, const Array<float>& logits,
                  std::size_t top_k) {
  const std::size_t T = logits.shape()[1], C = logits.shape()[2];
  const IndexArray predicted = m.predict(row, logits);
  const std::vector<double> lse = log_sum_exp(logits);
  const Index mask = task.mask_token();
  const bool masked = mask >= 0, next = m.decoder() != nullptr;
  auto p = [&](std::size_t t, Index c) { return std::exp(double(logits.data()[t * C + std::size_t(c)]) - lse[t]); };
  w.key("answer").open('{').member("kind", masked ? "fill" : next ? "next" : "labels");
  w.key("positions").open('[');
  for (std::size_t t = 0; t < T; ++t) {
    const Index pred = predicted(0, t), target = row.targets(0, t);
    w.open('{').member("position", t).member("prediction", std::int64_t(pred)).member("token", class_label(task, pred));
    w.member("p", p(t, pred));
    if (target != data::kIgnore && target >= 0 && std::size_t(target) < C) {
      w.member("target", std::int64_t(target)).member("target_token", class_label(task, target));
      w.member("p_target", p(t, target)).member("right", pred == target);
    }
    w.close('}');
  }
  w.close(']');
  if (masked) {
    w.key("fills").open('[');
    for (std::size_t t = 0; t < std::min<std::size_t>(T, row.inputs.shape()[1]); ++t) {
      if (row.inputs(0, t) != mask) continue;
      w.open('{').member("position", t).key("top");
      write_top(w, task, logits, lse, t, top_k);
      w.close('}');
    }
    w.close(']');
  }
  if (next) {
    w.key("next").open('{').member("position", T - 1).key("top");
    write_top(w, task, logits, lse, T - 1, top_k);
    w.close('}');
  }
  w.close('}');
  write_score(w, score_row(row, logits, predicted, lse));
}

void write_metrics(Writer& w, const model::EvalMetrics& e) {
  w.open('{').member("loss", e.loss).member("token_accuracy", e.token_accuracy).member("sequence_accuracy", e.sequence_accuracy);
  w.close('}');
}

// query: {"layer": L, "head": H, "position": I}
struct Query {
  std::size_t layer = 0, head = 0, position = 0;
};
Query read_query(model::TaskModel& m, const data::Batch& row, const Value& v, const std::string& path) {
  Fields f(v, path, {"layer", "head", "position"});
  const auto layers = model::attention_layers(m);
  Query q;
  for (const char* k : {"layer", "head", "position"})
    if (!f.get(k)) throw RequestError(f.path(k) + ": required (a whole number)");
  q.layer = json::whole(*f.get("layer"), f.path("layer"), 0, layers.size() - 1);
  const auto* mha = layers[q.layer].second;
  q.head = json::whole(*f.get("head"), f.path("head"), 0, mha->num_heads() - 1);
  const std::size_t Tq = m.attention_tokens(*mha, row).first->shape()[1];
  q.position = json::whole(*f.get("position"), f.path("position"), 0, Tq - 1);
  return q;
}

std::int64_t file_stamp(const std::string& path, std::int64_t* size = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  if (size) *size = std::int64_t(st.st_size);
  return std::int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

StudioResponse error_response(int status, const std::string& message) {
  StudioResponse out;
  out.status = status;
  Writer w;
  w.open('{').member("error", message).member("status", status).close('}');
  out.body = w.take();
  return out;
}

}  // namespace

Exposure exposure(const std::string& host, int port) {
  Exposure e;
  const std::string p = ":" + std::to_string(port);
  const bool loopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
  if (!loopback) {
    e.warning = "--host " + host + ": the studio is open to the network: anyone who can reach this machine on port " +
                std::to_string(port) + " can use it and run the models (there is no login)";
    return e;
  }
  for (const char* name : {"127.0.0.1", "localhost", "[::1]"}) e.allowed_hosts.push_back(name + p);
  if (host != "127.0.0.1" && host != "localhost" && host != "::1") e.allowed_hosts.push_back(host + p);
  return e;
}

std::unique_ptr<ServedModel> serve_model(model::LoadedModel loaded, std::string data_note) {
  auto s = std::make_unique<ServedModel>();
  s->loaded = std::move(loaded);
  s->with_data = s->loaded.data != nullptr;
  s->data_note = s->with_data ? "" : data_note.empty() ? "which the task does not have" : std::move(data_note);
  if (s->with_data) s->loaded.data->test_set();
  Generator gen(0);
  s->batch = model::make_model(s->loaded.cfg, *s->loaded.task, gen);
  s->batch->module().load_state_dict(s->loaded.model->module().state_dict());
  s->batch->module().eval();
  s->loaded.model->module().eval();
  return s;
}

std::unique_ptr<ServedModel> load_served(const std::string& path, bool want_data) {
  if (!want_data) return serve_model(load(path, {}, false), "which was not loaded");
  try {
    return serve_model(load(path, {}, true));
  } catch (const config::ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    // A text model whose corpus is not on this machine still reads typed text.
    return serve_model(load(path, {}, false), std::string("which could not be loaded (") + e.what() + ")");
  }
}

Index token_class(const data::Task& task, std::size_t classes, const std::string& token, bool ids, const std::string& what) {
  Index c = -1;
  if (ids || !task.tokenizer()) {
    if (token.empty() || token.size() > 9 || token.find_first_not_of("0123456789") != std::string::npos)
      throw ValueError(what + ": expected a class id, a whole number in [0, " + std::to_string(classes - 1) + "], found '" +
                       token + "'");
    c = Index(std::stoll(token));
  } else {
    const std::vector<Index> t = task.tokenizer()->encode(token, false, what);
    if (t.size() != 1)
      throw ValueError(what + ": '" + token + "' is " + std::to_string(t.size()) + " tokens for this model; give one token");
    c = t[0];
  }
  if (c < 0 || std::size_t(c) >= classes)
    throw ValueError(what + ": '" + token + "' is class " + std::to_string(c) + ", outside the model's " +
                     std::to_string(classes) + " classes (0.." + std::to_string(classes - 1) + ")");
  return c;
}

Studio::Studio(std::vector<std::unique_ptr<ServedModel>> models, StudioOptions options)
    : models_(std::move(models)), options_(std::move(options)) {
  if (models_.empty()) throw ValueError("qkv serve: no checkpoint to serve");
}

StudioResponse Studio::handle(const StudioRequest& r) {
  StudioResponse out;
  auto error = [&](int status, const std::string& message) { out = error_response(status, message); };
  try {
    if (!options_.allowed_hosts.empty() &&
        std::find(options_.allowed_hosts.begin(), options_.allowed_hosts.end(), r.host) == options_.allowed_hosts.end()) {
      error(403, "Host '" + r.host + "' is not this server's: it answers requests for " +
                     join_names(options_.allowed_hosts) + " only (a guard against DNS rebinding)");
    } else {
      out = route(r);
    }
  } catch (const RequestError& e) {
    error(e.status(), e.what());
  } catch (const io::IoError& e) {
    error(500, e.what());
  } catch (const std::bad_alloc&) {
    error(503, "out of memory while answering " + r.path);
  } catch (const ValueError& e) {  // also ShapeError, OptionError: input the model cannot take
    error(400, e.what());
  } catch (const std::exception& e) {
    error(500, std::string("internal error: ") + e.what());
  }
  out.headers.emplace_back("X-Content-Type-Options", "nosniff");
  out.headers.emplace_back("Cache-Control", "no-store");
  out.headers.emplace_back("Referrer-Policy", "no-referrer");
  out.headers.emplace_back("X-Frame-Options", "DENY");
  return out;
}

StudioResponse Studio::route(const StudioRequest& r) {
  StudioResponse out;
  struct Route {
    const char* path;
    const char* method;
  };
  static const Route routes[] = {{"/", "GET"},           {"/studio.js", "GET"},    {"/studio.css", "GET"},
                                 {"/favicon.ico", "GET"}, {"/api/models", "GET"},   {"/api/run", "GET"},
                                 {"/api/snapshot", "GET"}, {"/api/analyze", "POST"}, {"/api/explain", "POST"},
                                 {"/api/heldout", "POST"}, {"/api/patch", "POST"},   {"/api/reload", "POST"}};
  const Route* found = nullptr;
  for (auto& x : routes)
    if (r.path == x.path) found = &x;
  if (!found) {
    std::vector<std::string> names;
    for (auto& x : routes) names.push_back(x.path);
    throw RequestError("no such page: " + r.path.substr(0, 200) + did_you_mean(r.path, names) + " (the studio serves " +
                           join_names(names) + ")",
                       404);
  }
  const bool get = std::string(found->method) == "GET";
  if (r.method != found->method && !(get && r.method == "HEAD")) {
    out = error_response(405, r.path + ": expected method " + found->method + ", found " + r.method.substr(0, 20));
    out.headers.emplace_back("Allow", get ? "GET, HEAD" : "POST");
    return out;
  }
  if (!get) {
    std::string type = r.content_type.substr(0, r.content_type.find(';'));
    while (!type.empty() && type.back() == ' ') type.pop_back();
    for (char& c : type) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (type != "application/json")
      throw RequestError(r.path + ": expected a body of Content-Type application/json, found '" +
                             r.content_type.substr(0, 100) + "'",
                         415);
    if (r.body.size() > options_.max_body)
      throw RequestError(r.path + ": a body of " + std::to_string(r.body.size()) + " bytes, more than the " +
                             std::to_string(options_.max_body) + " a request may send",
                         413);
  }
  if (r.path != "/api/snapshot")
    for (auto& [k, v] : r.query)
      throw RequestError(r.path + ": unknown query parameter '" + k.substr(0, 100) + "' (" + r.path + " takes none)");

  const std::string p = r.path;
  if (p == "/" || p == "/studio.js" || p == "/studio.css") {
    out.content_type = p == "/"            ? "text/html; charset=utf-8"
                       : p == "/studio.js" ? "text/javascript; charset=utf-8"
                                           : "text/css; charset=utf-8";
    out.body = p == "/" ? studio_html() : p == "/studio.js" ? studio_js() : studio_css();
    // Nothing but this server's own script and style runs in the page, and nothing is fetched
    // from anywhere else.
    out.headers.emplace_back("Content-Security-Policy",
                             "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                             "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    return out;
  }
  if (p == "/favicon.ico") {
    out.status = 204;
    out.content_type = "image/x-icon";
    return out;
  }
  if (p == "/api/models") out.body = models_json();
  else if (p == "/api/run") out.body = run_json();
  else if (p == "/api/snapshot") out.body = snapshot_json(r);
  else if (p == "/api/analyze") out.body = analyze(r.body, false);
  else if (p == "/api/explain") out.body = analyze(r.body, true);
  else if (p == "/api/heldout") out.body = heldout(r.body);
  else if (p == "/api/patch") out.body = patch(r.body);
  else out.body = reload(r.body);
  return out;
}

std::string Studio::models_json() {
  Writer w;
  w.open('{').key("models").open('[');
  for (std::size_t i = 0; i < models_.size(); ++i) {
    ServedModel& s = *models_[i];
    std::lock_guard<std::mutex> lock(s.mutex);
    const model::LoadedModel& l = s.loaded;
    const data::Task& task = *l.task;
    const nn::TransformerOptions& o = l.cfg.model;
    w.open('{').member("index", i).member("path", l.path).member("task", task.name());
    w.member("arch", nn::arch_names().name(o.arch)).member("d_model", o.d_model);
    w.member("objective", task.masked() ? "masked" : task.next_token() ? "causal" : "labels");
    w.member("text", task.tokenizer() != nullptr).member("seq2seq", task.seq2seq());
    w.member("tokenizer", task.tokenizer() ? data::name(task.tokenizer()->kind()) : "");
    w.member("mask_text", task.mask_token() >= 0 ? data::kMaskText : "");
    w.member("context", task.input_length()).member("input_vocab", task.input_vocab()).member("classes", task.num_classes());
    w.member("with_data", s.with_data).member("data_note", s.data_note);
    w.member("examples", s.with_data ? l.data->eval_set().size() : 0);
    w.member("test_examples", s.with_data ? l.data->test_set().size() : 0);
    w.key("layers").open('[');
    for (auto& [name, mha] : model::attention_layers(*l.model))
      w.open('{').member("name", name).member("kind", model::attention_kind_name(l.model->attention_kind(*mha)))
          .member("heads", mha->num_heads()).member("head_dim", mha->head_dim()).member("value_dim", mha->value_dim())
          .close('}');
    w.close(']');
    // The first input a learner sees: the textbook's sentence when the model can read it.
    w.key("suggestion").open('{');
    bool found = false;
    if (task.tokenizer())
      for (const Suggestion& sg : kSuggestions) {
        if (sg.tokenizer != task.tokenizer()->kind()) continue;
        try {
          std::string note;
          text_row(task, sg.text, "suggestion", data::kMaskText, note);
        } catch (const ValueError&) {
          continue;
        }
        w.member("text", sg.text).member("query", sg.query);
        found = true;
        break;
      }
    if (!found && s.with_data && l.data->eval_set().size() > 0) w.member("example", std::size_t(0)).member("query", std::size_t(0));
    w.close('}');
    // A first pair to patch (kMaskedPairs, kPrefixPairs); for token ids, two held-out examples.
    w.key("patch").open('{');
    if (task.tokenizer()) {
      for (const PatchPair& pp : task.masked() ? kMaskedPairs : kPrefixPairs) {
        std::string note;
        try {
          const data::Batch a = text_row(task, pp.clean, "patch", data::kMaskText, note);
          const data::Batch b = text_row(task, pp.corrupt, "patch", data::kMaskText, note);
          if (a.inputs.shape()[1] != b.inputs.shape()[1]) continue;
          for (const char* t : {pp.answer, pp.wrong})
            if (*t) token_class(task, task.num_classes(), t, false, "patch");
        } catch (const ValueError&) {
          continue;
        }
        w.member("clean", pp.clean).member("corrupt", pp.corrupt).member("answer", pp.answer).member("wrong", pp.wrong);
        break;
      }
    } else if (s.with_data && l.data->eval_set().size() >= 2 && task.seq2seq()) {
      w.member("clean", "example 0").member("corrupt", "example 1");  // a source and a target: examples only
    } else if (s.with_data && l.data->eval_set().size() >= 2) {
      for (std::size_t e = 0; e < 2; ++e) {
        const IndexArray& in = l.data->eval_set().inputs;
        std::string ids;
        for (std::size_t t = 0; t < in.shape()[1]; ++t) ids += (t ? " " : "") + std::to_string(in(e, t));
        w.member(e ? "corrupt" : "clean", ids);
      }
    }
    w.close('}');
    w.close('}');
  }
  w.close(']');
  w.member("run", !options_.run_dir.empty());
  w.close('}');
  return w.take();
}

std::string Studio::analyze(const std::string& body, bool explain_only) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", explain_only ? std::vector<std::string>{"model", "input", "ablate", "query"}
                               : std::vector<std::string>{"model", "input", "ablate", "query", "top_k", "weights"});
  ServedModel& s = *models_[model_index(f, models_.size())];
  std::lock_guard<std::mutex> lock(s.mutex);
  model::TaskModel& m = *s.loaded.model;
  const data::Task& task = *s.loaded.task;
  if (!f.get("input")) throw RequestError("input: required (an object with text, ids or example)");
  const Input in = read_input(s, *f.get("input"), "input");
  const Ablation ab = read_ablation(s, m, f, false);
  std::size_t top_k = 5;
  if (const Value* k = f.get("top_k")) top_k = json::whole(*k, "top_k", 1, kMaxTopK);
  std::optional<Query> query;
  if (const Value* q = f.get("query")) query = read_query(m, in.row, *q, "query");
  // float32: the weights exactly as the model computed them; uint8: round(255 w), as the viewer
  // stores them, a quarter of the bytes (what the page draws its grid from).
  bool bytes = false;
  if (const Value* wt = f.get("weights")) {
    const std::string& kind = json::string(*wt, "weights", 64);
    if (kind != "float32" && kind != "uint8")
      throw RequestError("weights: expected float32 or uint8, found '" + kind + "'");
    bytes = kind == "uint8";
  }
  if (explain_only && !query) throw RequestError("query: required (layer, head and position)");

  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(m.module());
  std::optional<Score> intact;
  if (!explain_only && !ab.heads.empty()) {
    std::string key;
    for (const IndexArray* a : {&in.row.inputs, &in.row.targets, &in.row.decoder_inputs})
      key.append(reinterpret_cast<const char*>(a->data()), a->size() * sizeof(Index)).push_back('|');
    if (key != s.intact_key) {
      const Score sc = score_row(m, in.row, m.logits(in.row).value());
      s.intact_key = key, s.intact_score = {sc.loss, sc.accuracy, double(sc.scored)};
    }
    intact = Score{s.intact_score[0], s.intact_score[1], std::size_t(s.intact_score[2])};
  }
  interp::HeadAblation ablation(m, ab.heads, ab.heads.empty() ? interp::AblationMode::Zero : ab.mode, ab.means.get());
  Writer w;
  w.open('{');
  if (!explain_only) {
    Array<float> logits;
    nn::ActivationCache<float> cache =
        nn::run_with_cache(m.module(), [&] { logits = m.logits(in.row).value(); }, {"*.hook_pattern"});
    w.key("tokens");
    write_strings(w, interp::token_labels(task, in.row.inputs, 0));
    w.key("ids").open('[');
    for (std::size_t t = 0; t < in.row.inputs.shape()[1]; ++t) w.value(std::int64_t(in.row.inputs(0, t)));
    w.close(']');
    w.member("note", in.note);
    write_ablation(w, ab);
    w.key("layers").open('[');
    for (auto& [name, mha] : model::attention_layers(m)) {
      const Array<float>& pattern = cache[name + ".hook_pattern"];  // (1, H, Tq, Tk)
      const std::size_t H = pattern.shape()[1], Tq = pattern.shape()[2], Tk = pattern.shape()[3];
      const auto [queries, keys] = m.attention_tokens(*mha, in.row);
      w.open('{').member("name", name).member("kind", model::attention_kind_name(m.attention_kind(*mha)));
      w.key("query_tokens");
      write_strings(w, interp::token_labels(task, *queries, 0));
      w.key("key_tokens");
      write_strings(w, interp::token_labels(task, *keys, 0));
      w.member("encoding", bytes ? "uint8" : "float32").key("weights").open('[');
      for (std::size_t h = 0; h < H; ++h) {
        const float* p = pattern.data() + h * Tq * Tk;
        w.value(bytes ? json::base64_bytes(p, Tq * Tk) : json::base64_floats(p, Tq * Tk));
      }
      w.close(']').close('}');
    }
    w.close(']');
    write_answer(w, m, task, in.row, logits, top_k);
    if (intact) {  // what the removed heads cost on this input
      w.key("intact").open('{');
      write_score(w, *intact);
      w.close('}');
    }
  }
  if (query) {
    const interp::QueryExplanation e = interp::explain_query(m, task, in.row, query->layer, query->head, query->position);
    std::string one = interp::explanation_json(e);
    while (!one.empty() && one.back() == '\n') one.pop_back();
    w.key("explain").raw(one);
  } else {
    w.key("explain").null();
  }
  w.member("ms", elapsed_ms(start));
  w.close('}');
  return w.take();
}

std::string Studio::heldout(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "ablate", "examples"});
  ServedModel& s = *models_[model_index(f, models_.size())];
  // On the batch instance: typing on this model goes on meanwhile.
  std::lock_guard<std::mutex> lock(s.batch_mutex);
  const Ablation ab = read_ablation(s, *s.batch, f, true);
  if (!s.with_data) throw RequestError("held-out metrics need the model's test split, " + s.data_note);
  const data::Batch& test_set = s.loaded.data->test_set();
  if (test_set.size() == 0) throw RequestError("the model's test split is empty");
  std::size_t n = std::min<std::size_t>(64, test_set.size());
  if (const Value* e = f.get("examples")) n = json::whole(*e, "examples", 1, std::min(kMaxHeldout, test_set.size()));
  // As `qkv ablate CKPT --heads ... --examples N`: the first N test examples.
  const data::Batch test = data::rows(test_set, 0, n);
  auto cached = s.intact_heldout.find(n);
  if (cached == s.intact_heldout.end())
    cached = s.intact_heldout.emplace(n, interp::ablated_metrics(*s.batch, test, {}, interp::AblationMode::Zero, nullptr)).first;
  Writer w;
  w.open('{').member("examples", n);
  write_ablation(w, ab);
  w.key("intact");
  write_metrics(w, cached->second);
  w.key("with_ablation");
  if (ab.heads.empty()) w.null();
  else write_metrics(w, interp::ablated_metrics(*s.batch, test, ab.heads, ab.mode, ab.means.get()));
  w.member("ms", elapsed_ms(start));
  w.close('}');
  return w.take();
}

std::string Studio::patch(const std::string& body) {
  const auto start = std::chrono::steady_clock::now();
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "clean", "corrupt", "position", "answer", "wrong"});
  ServedModel& s = *models_[model_index(f, models_.size())];
  std::lock_guard<std::mutex> lock(s.mutex);
  const data::Task& task = *s.loaded.task;
  for (const char* k : {"clean", "corrupt"})
    if (!f.get(k)) throw RequestError(std::string(k) + ": required (an object with text, ids or example)");
  const Input clean = read_input(s, *f.get("clean"), "clean");
  const Input corrupt = read_input(s, *f.get("corrupt"), "corrupt");
  interp::PatchingOptions o;
  const std::size_t classes = task.num_classes();
  if (const Value* p = f.get("position")) o.position = json::whole(*p, "position", 0, 1 << 20);
  for (const char* k : {"answer", "wrong"}) {
    const Value* t = f.get(k);
    if (!t) continue;
    std::string token;
    if (t->kind == Value::Kind::Number) token = t->text;
    else token = json::string(*t, k, 256);
    (std::string(k) == "answer" ? o.answer : o.wrong) =
        token_class(task, classes, token, t->kind == Value::Kind::Number, k);
  }
  const interp::PatchingResult result = interp::patch_heads(*s.loaded.model, task, clean.row, corrupt.row, o);
  Writer w;
  w.open('{').key("clean_tokens");
  write_strings(w, interp::token_labels(task, clean.row.inputs, 0));
  w.key("corrupt_tokens");
  write_strings(w, interp::token_labels(task, corrupt.row.inputs, 0));
  w.member("clean_note", clean.note).member("corrupt_note", corrupt.note);
  std::string one = interp::patching_json(result, task);
  while (!one.empty() && one.back() == '\n') one.pop_back();
  w.key("patching").raw(one);
  w.member("ms", elapsed_ms(start));
  w.close('}');
  return w.take();
}

std::string Studio::reload(const std::string& body) {
  const Value v = json::parse(body);
  Fields f(v, "", {"model"});
  ServedModel& s = *models_[model_index(f, models_.size())];
  std::string path;
  bool data = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    path = s.loaded.path, data = s.with_data;
  }
  if (path.empty()) throw RequestError("model: this model was built in memory, not loaded from a checkpoint: nothing to reload");
  // Loaded whole and verified (checksum, version, finite weights) before anything is replaced: a
  // file being rewritten is either the old one or the new one (checkpoints are renamed into
  // place), and a damaged one leaves the served model as it was.
  std::unique_ptr<ServedModel> fresh = load_served(path, data);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    std::lock_guard<std::mutex> batch(s.batch_mutex);
    std::lock_guard<std::mutex> means(s.means_mutex);
    s.loaded = std::move(fresh->loaded);
    s.batch = std::move(fresh->batch);
    s.with_data = fresh->with_data, s.data_note = fresh->data_note;
    s.means.reset();
    s.intact_heldout.clear();
    s.intact_key.clear();
  }
  Writer w;
  w.open('{').member("reloaded", path).close('}');
  return w.take();
}

std::shared_ptr<const interp::Snapshots> Studio::snapshots(std::string& note, std::int64_t* version) {
  const std::string path = options_.run_dir + "/snapshots.h5";
  std::int64_t size = 0;
  const std::int64_t stamp = file_stamp(path, &size);
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (stamp < 0) {
    note = "no snapshots.h5 in the run yet (train.snapshot_every is 0, or the first snapshot is not written yet)";
    return snapshots_;
  }
  const std::int64_t key = stamp ^ (size << 1);
  if (key != snapshots_stamp_) {
    // The trainer replaces the file atomically (rename), so a read sees a whole file; one that
    // fails its checksum anyway keeps the last good snapshots on screen, with the error.
    try {
      snapshots_ = std::make_shared<const interp::Snapshots>(interp::load_snapshots(path));
      snapshots_error_.clear();
    } catch (const std::exception& e) {
      snapshots_error_ = e.what();
    }
    snapshots_stamp_ = key;
  }
  note = snapshots_error_;
  if (version) *version = snapshots_stamp_;
  return snapshots_;
}

std::string Studio::run_json() {
  Writer w;
  w.open('{');
  if (options_.run_dir.empty()) {
    w.member("dir", "").key("metrics").null().key("snapshots").null().member("note", "no --run directory was given");
    w.close('}');
    return w.take();
  }
  w.member("dir", options_.run_dir);
  // metrics.csv: the columns of the whole run (not the per-layer diagnostics), written atomically
  // by the trainer at every evaluation.
  const std::string csv_path = options_.run_dir + "/metrics.csv";
  std::string metrics_note;
  w.key("metrics");
  std::string csv;
  try {
    csv = file_stamp(csv_path) < 0 ? "" : io::read_file(csv_path, kMaxMetricsBytes, "metrics");
  } catch (const io::IoError& e) {
    metrics_note = e.what();
  }
  if (csv.empty()) {
    w.null();
    if (metrics_note.empty()) metrics_note = "no metrics.csv yet: the run has not evaluated";
  } else {
    std::vector<std::string> lines;
    for (std::size_t a = 0; a < csv.size();) {
      const std::size_t b = std::min(csv.find('\n', a), csv.size());
      if (b > a) lines.push_back(csv.substr(a, b - a));
      a = b + 1;
    }
    auto split = [](const std::string& line) {
      std::vector<std::string> out;
      for (std::size_t a = 0;;) {
        const std::size_t b = std::min(line.find(',', a), line.size());
        out.push_back(line.substr(a, b - a));
        if (b == line.size()) break;
        a = b + 1;
      }
      return out;
    };
    const std::vector<std::string> header = split(lines.front());
    std::vector<std::size_t> keep;
    for (std::size_t c = 0; c < header.size(); ++c)
      if (header[c].find('.') == std::string::npos) keep.push_back(c);
    w.open('{').key("columns").open('[');
    for (std::size_t c : keep) w.value(header[c]);
    w.close(']').key("rows").open('[');
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const std::vector<std::string> cells = split(lines[i]);
      if (cells.size() != header.size()) continue;  // a line being written (never with rename, but cheap to skip)
      w.open('[');
      for (std::size_t c : keep) {
        char* end = nullptr;
        const double x = std::strtod(cells[c].c_str(), &end);
        if (cells[c].empty() || *end) w.null();
        else w.value(x);
      }
      w.close(']');
    }
    w.close(']').close('}');
  }
  w.member("metrics_note", metrics_note);
  std::string note;
  std::int64_t version = 0;
  const auto snaps = snapshots(note, &version);
  w.key("snapshots");
  if (!snaps) {
    w.null();
  } else {
    w.open('{').member("version", version).key("steps").open('[');
    for (auto s : snaps->steps) w.value(std::int64_t(s));
    w.close(']').member("examples", snaps->inputs.shape()[0]).key("score_names");
    write_strings(w, snaps->score_names);
    w.key("layers").open('[');
    for (auto& layer : snaps->layers)
      w.open('{').member("name", layer.name).member("kind", model::attention_kind_name(layer.kind))
          .member("heads", layer.weights.shape()[2]).close('}');
    w.close(']').close('}');
  }
  w.member("snapshots_note", note);
  w.close('}');
  return w.take();
}

std::string Studio::snapshot_json(const StudioRequest& r) {
  if (options_.run_dir.empty()) throw RequestError("/api/snapshot: no --run directory was given to qkv serve", 404);
  std::string note;
  const auto snaps = snapshots(note);
  if (!snaps) throw RequestError("/api/snapshot: " + note, 404);
  const interp::Snapshots& s = *snaps;
  const std::size_t S = s.size(), N = s.inputs.shape()[0];
  if (S == 0) throw RequestError("/api/snapshot: the snapshots file holds no step yet", 404);
  std::size_t index = S - 1, example = 0;
  for (auto& [k, v] : r.query) {
    Value number;
    number.kind = Value::Kind::Number;
    number.text = v;
    if (k == "step") index = json::whole(number, "step", 0, S - 1);
    else if (k == "example") example = json::whole(number, "example", 0, N - 1);
    else throw RequestError("/api/snapshot: unknown query parameter '" + k.substr(0, 100) + "' (it takes step and example)");
  }
  const bool seq2seq = s.decoder_inputs.dimension() == 2 && s.decoder_inputs.size() > 0;
  auto labels = [](const std::vector<std::string>& all, const IndexArray& ids, std::size_t e) {
    const std::size_t T = ids.shape()[1];
    return std::vector<std::string>(all.begin() + long(e * T), all.begin() + long((e + 1) * T));
  };
  const std::vector<std::string> input = labels(s.input_labels, s.inputs, example);
  const std::vector<std::string> decoder = seq2seq ? labels(s.decoder_labels, s.decoder_inputs, example) : input;
  Writer w;
  w.open('{').member("index", index).member("step", std::int64_t(s.steps[index])).member("steps", S).member("example", example);
  w.key("layers").open('[');
  for (const interp::SnapshotLayer& layer : s.layers) {
    const auto& sh = layer.weights.shape();  // (S, N, H, Tq, Tk)
    const std::size_t H = sh[2], Tq = sh[3], Tk = sh[4], K = s.score_names.size();
    const bool dq = seq2seq && layer.kind != model::AttentionKind::Self, dk = seq2seq && layer.kind == model::AttentionKind::Causal;
    w.open('{').member("name", layer.name).member("kind", model::attention_kind_name(layer.kind));
    w.key("query_tokens");
    write_strings(w, dq ? decoder : input);
    w.key("key_tokens");
    write_strings(w, dk ? decoder : input);
    w.key("weights").open('[');
    for (std::size_t h = 0; h < H; ++h)
      w.value(json::base64_floats(layer.weights.data() + (((index * N + example) * H + h) * Tq) * Tk, Tq * Tk));
    w.close(']').key("scores").open('[');
    for (std::size_t h = 0; h < H; ++h) {
      w.open('{');
      for (std::size_t k = 0; k < K; ++k) {
        const double x = layer.scores.data()[(index * H + h) * K + k];
        if (std::isfinite(x)) w.member(s.score_names[k], x);
      }
      w.close('}');
    }
    w.close(']').close('}');
  }
  w.close(']').member("note", note).close('}');
  return w.take();
}

}  // namespace qkv::app
