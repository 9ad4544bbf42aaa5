// The studio's routing (docs/studio.md, "The API"): the Host check, methods and content types,
// the page and its assets, the models and their suggestions, reloading, and the run followed. The
// endpoints that run a model are in serve_requests.cpp. Every request body is parsed by the strict
// parser of qkv/io/json.hpp; an unknown field, a wrong type or a value out of range is a 400 naming
// the field.
#include "serve_api.hpp"

#include <algorithm>
#include <cmath>
#include <new>
#include <optional>

#include "loaded.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/model/input.hpp"

namespace qkv::app {

// The studio's page and its assets, compiled in (serve_assets.cpp, generated from share/studio/).
const std::string& studio_html();
const std::string& studio_js();
const std::string& studio_css();

namespace {

using json::Fields;
using json::Value;

// The sentences a learner sees first, with the query the textbooks ask about: "追" (chase) in
// 猫喜欢追逐老鼠 looks for who chases and what. The first one the model can read is suggested.
// A program's model (qkv compile) reads them too when they are made of its tokens (who_what_zh.rasp:
// a token per word); the query is then the token that starts with the verb.
struct Suggestion {
  const char* text;
  std::size_t query;  // 追, chase, 吃, eat
  data::TokenizerKind tokenizer;
  const char* verb;
};
const Suggestion kSuggestions[] = {{"猫喜欢追逐老鼠", 3, data::TokenizerKind::Char, "追"},
                                   {"我爱吃苹果", 2, data::TokenizerKind::Char, "吃"},
                                   {"the cat likes to chase mice .", 4, data::TokenizerKind::Word, "chase"},
                                   {"i love to eat apples .", 3, data::TokenizerKind::Word, "eat"}};

// A first pair to patch, with the answer of each: the verb hidden and its object changed (吃 goes
// with 苹果, 喝 with 牛奶: which heads carry the object to the verb?); for decoders the next
// character after the first of the object's (苹 -> 果, 香 -> 蕉).
struct PatchPair {
  const char *clean, *corrupt, *answer, *wrong;
};
const PatchPair kMaskedPairs[] = {{"我爱[MASK]苹果", "我爱[MASK]牛奶", "吃", "喝"},
                                  {"i love to [MASK] apples .", "i love to [MASK] milk .", "eat", "drink"}};
const PatchPair kPrefixPairs[] = {{"我爱吃苹", "我爱吃香", "果", "蕉"}, {"i love to eat", "i love to drink", "", ""}};

// The row the model reads for `text` (as the studio reads typed text), or nullopt when it cannot.
std::optional<data::Batch> read_row(const model::LoadedModel& l, const std::string& text) {
  try {
    model::InputRequest r;
    r.text = text;
    r.plain_text = true;
    return model::input_row(l, r).row;
  } catch (const ValueError&) {
    return std::nullopt;
  }
}

StudioResponse error_response(int status, const std::string& message) {
  StudioResponse out;
  out.status = status;
  json::Writer w;
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
  // The batch instance: the same config, task and data, its own copy of the weights.
  s->batch.path = s->loaded.path, s->batch.cfg = s->loaded.cfg, s->batch.task = s->loaded.task, s->batch.data = s->loaded.data;
  Generator gen(0);
  s->batch.model = model::make_model(s->loaded.cfg, *s->loaded.task, gen);
  s->batch.model->module().load_state_dict(s->loaded.model->module().state_dict());
  s->batch.model->module().eval();
  s->loaded.model->module().eval();
  return s;
}

std::unique_ptr<ServedModel> load_served(const std::string& path, bool want_data) {
  if (!want_data) return serve_model(load(path, {}, false), "which was not loaded");
  std::string data_note;
  Loaded l = load_with_data(path, data_note);
  return serve_model(std::move(l), data_note);
}

Studio::Studio(std::vector<std::unique_ptr<ServedModel>> models, StudioOptions options)
    : models_(std::move(models)), options_(std::move(options)) {
  if (models_.empty()) throw ValueError("qkv serve: no checkpoint to serve");
  if (!options_.run_dir.empty()) run_ = std::make_unique<runs::RunFollower>(options_.run_dir);
}

ServedModel& Studio::model_of(const json::Fields& f) {
  const Value* v = f.get("model");
  return *models_[v ? json::whole(*v, f.path("model"), 0, models_.size() - 1) : 0];
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
                                 {"/api/heldout", "POST"}, {"/api/patch", "POST"},   {"/api/reload", "POST"},
                                 {"/api/heads", "POST"},   {"/api/attribute", "POST"}, {"/api/path", "POST"},
                                 {"/api/lens", "POST"}};
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
  else if (p == "/api/run") out.body = run_ ? runs::run_json(*run_) : "{\"dir\":\"\",\"metrics\":null,\"snapshots\":null,\"note\":\"no --run directory was given\"}";
  else if (p == "/api/snapshot") out.body = snapshot_json(r);
  else if (p == "/api/analyze") out.body = analyze(r.body, false);
  else if (p == "/api/explain") out.body = analyze(r.body, true);
  else if (p == "/api/heldout") out.body = heldout(r.body);
  else if (p == "/api/patch") out.body = patch(r.body);
  else if (p == "/api/heads") out.body = heads(r.body);
  else if (p == "/api/attribute") out.body = attribute(r.body);
  else if (p == "/api/path") out.body = path(r.body);
  else if (p == "/api/lens") out.body = lens(r.body);
  else out.body = reload(r.body);
  return out;
}

void model_summary(json::Writer& w, std::size_t index, const model::LoadedModel& l, bool with_data,
                   const std::string& data_note) {
  const data::Task& task = *l.task;
  const nn::TransformerOptions& o = l.cfg.model;
  w.open('{').member("index", index).member("path", l.path).member("task", task.name());
  w.member("arch", nn::arch_names().name(o.arch)).member("d_model", o.d_model);
  w.member("objective", task.masked() ? "masked" : task.next_token() ? "causal" : "labels");
  // Text: a tokenizer's, or a program's tokens (qkv compile; read by the longest token at each place).
  const bool program = task.name() == "program";
  w.member("text", task.tokenizer() != nullptr || program).member("seq2seq", task.seq2seq());
  w.member("tokenizer", task.tokenizer() ? data::name(task.tokenizer()->kind()) : "");
  w.member("mask_text", task.mask_token() >= 0 ? data::kMaskText : "");
  w.member("context", task.input_length()).member("input_vocab", task.input_vocab()).member("classes", task.num_classes());
  w.member("with_data", with_data).member("data_note", data_note);
  w.member("examples", with_data ? l.data->eval_set().size() : 0);
  w.member("test_examples", with_data ? l.data->test_set().size() : 0);
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
      if (!read_row(l, sg.text)) continue;
      w.member("text", sg.text).member("query", sg.query);
      found = true;
      break;
    }
  if (!found && program)
    for (const Suggestion& sg : kSuggestions) {
      const std::optional<data::Batch> row = found ? std::nullopt : read_row(l, sg.text);
      for (std::size_t t = 0; row && t < row->inputs.size() && !found; ++t)
        if (task.token_label(row->inputs.data()[t]).rfind(sg.verb, 0) == 0) {
          w.member("text", sg.text).member("query", t);
          found = true;
        }
    }
  if (!found && with_data && l.data->eval_set().size() > 0) w.member("example", std::size_t(0)).member("query", std::size_t(0));
  w.close('}');
  // A first pair to patch (kMaskedPairs, kPrefixPairs); for token ids, two held-out examples.
  w.key("patch").open('{');
  if (task.tokenizer()) {
    for (const PatchPair& pp : task.masked() ? kMaskedPairs : kPrefixPairs) {
      try {
        model::InputRequest a, b;
        a.text = pp.clean, b.text = pp.corrupt;
        a.plain_text = b.plain_text = true;
        if (model::input_row(l, a).row.inputs.shape()[1] != model::input_row(l, b).row.inputs.shape()[1]) continue;
        for (const char* t : {pp.answer, pp.wrong})
          if (*t) model::token_class(task, t, false, "patch");
      } catch (const ValueError&) {
        continue;
      }
      w.member("clean", pp.clean).member("corrupt", pp.corrupt).member("answer", pp.answer).member("wrong", pp.wrong);
      break;
    }
  } else if (with_data && l.data->eval_set().size() >= 2 && task.seq2seq()) {
    w.member("clean", "example 0").member("corrupt", "example 1");  // a source and a target: examples only
  } else if (with_data && l.data->eval_set().size() >= 2) {
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

std::string Studio::models_json() {
  json::Writer w;
  w.open('{').key("models").open('[');
  for (std::size_t i = 0; i < models_.size(); ++i) {
    ServedModel& s = *models_[i];
    std::lock_guard<std::mutex> lock(s.mutex);
    model_summary(w, i, s.loaded, s.with_data, s.data_note);
  }
  w.close(']');
  w.member("run", !options_.run_dir.empty());
  w.close('}');
  return w.take();
}

std::string Studio::reload(const std::string& body) {
  const Value v = json::parse(body);
  Fields f(v, "", {"model", "latest"});
  ServedModel& s = model_of(f);
  std::string path;
  bool data = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    path = s.loaded.path, data = s.with_data;
  }
  // latest: the run's newest checkpoint, last.h5 (written at every train.checkpoint_every and at
  // the end; best.h5 may be older), in place of the model's own file. The path is --run's, never
  // the request's.
  if (const Value* latest = f.get("latest"); latest && json::boolean(*latest, "latest")) {
    if (options_.run_dir.empty()) throw RequestError("latest: the newest checkpoint of a run needs qkv serve --run DIR");
    path = options_.run_dir + "/last.h5";
  }
  if (path.empty()) throw RequestError("model: this model was built in memory, not loaded from a checkpoint: nothing to reload");
  // Loaded whole and verified (checksum, version, finite weights) before anything is replaced: a
  // file being rewritten is either the old one or the new one (checkpoints are renamed into
  // place), and a damaged one leaves the served model as it was.
  std::unique_ptr<ServedModel> fresh = load_served(path, data);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    std::lock_guard<std::mutex> batch(s.batch_mutex);
    s.loaded = std::move(fresh->loaded);
    s.batch = std::move(fresh->batch);
    s.with_data = fresh->with_data, s.data_note = fresh->data_note;
    s.cache = {}, s.batch_cache = {};
  }
  json::Writer w;
  w.open('{').member("reloaded", path).close('}');
  return w.take();
}

std::string Studio::snapshot_json(const StudioRequest& r) {
  if (!run_) throw RequestError("/api/snapshot: no --run directory was given to qkv serve", 404);
  std::string note;
  const auto snaps = run_->snapshots(note);
  if (!snaps) throw RequestError("/api/snapshot: " + note, 404);
  const std::size_t S = snaps->size(), N = snaps->inputs.shape()[0];
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
  return runs::snapshot_json(*snaps, index, example, note);
}

}  // namespace qkv::app
