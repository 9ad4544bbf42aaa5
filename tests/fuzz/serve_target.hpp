#pragma once
// The body of the studio's fuzz target (tests/fuzz/fuzz_serve.cpp), shared with the doctest that
// replays its corpus and saved crash inputs (tests/studio/test_serve.cpp).
//
// Input layout: byte 0 picks the endpoint (and the method), byte 1 the Content-Type and the Host
// header; the rest is the body (POST) or the query string (GET, "k=v&k=v"). Contract: for ANY
// input, Studio::handle returns a response and never throws; the status is one the API documents
// (200, 204, 400, 403, 404, 405, 413, 415); the body of an error is a JSON object with "error".
// A 500 (an internal error) or 503 is a bug here: the models are built in memory, nothing is read
// from a file.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/serve_api.hpp"
#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::fuzz {

/// A model served from memory: the config `overrides`, weights from seed 1, with its data.
inline std::unique_ptr<app::ServedModel> memory_model(const std::vector<std::string>& overrides) {
  model::LoadedModel l;
  l.cfg = config::parse_config("{}", "studio-test.yaml", overrides);
  l.task = data::make_task(l.cfg.task);
  Generator gen(1);
  l.model = model::make_model(l.cfg, *l.task, gen);
  l.data = std::make_unique<data::Dataset>(l.task, 7, l.cfg.task.eval_size);
  return app::serve_model(std::move(l));
}

/// Two small models: a masked encoder of the Chinese grammar (text, masks) and a sort encoder (ids).
inline std::vector<std::unique_ptr<app::ServedModel>> studio_models() {
  std::vector<std::unique_ptr<app::ServedModel>> m;
  m.push_back(memory_model({"model.arch=encoder", "model.d_model=16", "model.heads=2", "model.layers=2", "model.d_ff=32",
                            "model.positional=learned", "task.name=grammar", "task.language=zh",
                            "task.objective=masked", "task.length=32", "task.eval_size=8"}));
  m.push_back(memory_model({"model.arch=encoder", "model.d_model=16", "model.heads=2", "model.layers=1", "model.d_ff=32",
                            "task.name=sort", "task.vocab=8", "task.length=8", "task.eval_size=8"}));
  return m;
}

/// The Host header the studio answers (allowed_hosts) in these tests.
inline const char* kStudioHost = "127.0.0.1:8080";

inline app::Studio make_studio() {
  app::StudioOptions o;
  o.allowed_hosts = {kStudioHost};
  return app::Studio(studio_models(), o);
}

/// The request the bytes describe (layout above).
inline app::StudioRequest studio_request(const std::uint8_t* data, std::size_t size) {
  static const char* const routes[][2] = {
      {"POST", "/api/analyze"}, {"POST", "/api/explain"}, {"POST", "/api/patch"}, {"POST", "/api/heldout"},
      {"GET", "/api/models"},   {"GET", "/api/run"},      {"GET", "/api/snapshot"}, {"GET", "/"},
      {"POST", "/api/reload"},  {"GET", "/api/analyze"},  {"POST", "/nowhere"},    {"PUT", "/api/patch"}};
  constexpr std::size_t kRoutes = sizeof(routes) / sizeof(routes[0]);
  app::StudioRequest r;
  const std::uint8_t a = size > 0 ? data[0] : 0, b = size > 1 ? data[1] : 0;
  r.method = routes[a % kRoutes][0];
  r.path = routes[a % kRoutes][1];
  r.content_type = (b & 3) == 0 ? "application/json" : (b & 3) == 1 ? "application/json; charset=utf-8" : (b & 3) == 2 ? "text/plain" : "";
  r.host = (b & 4) ? "evil.example:8080" : kStudioHost;
  const std::string rest = size > 2 ? std::string(reinterpret_cast<const char*>(data) + 2, size - 2) : std::string();
  if (r.method == "GET") {
    for (std::size_t from = 0; from < rest.size();) {
      const std::size_t amp = std::min(rest.find('&', from), rest.size());
      const std::string item = rest.substr(from, amp - from);
      const std::size_t eq = item.find('=');
      r.query.emplace_back(item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1));
      from = amp + 1;
    }
  } else {
    r.body = rest;
  }
  return r;
}

/// One fuzz input through the handler; throws std::logic_error when the contract is broken.
inline void run_serve_input(app::Studio& studio, const std::uint8_t* data, std::size_t size) {
  const app::StudioRequest r = studio_request(data, size);
  const app::StudioResponse out = studio.handle(r);
  static const int allowed[] = {200, 204, 400, 403, 404, 405, 413, 415};
  bool ok = false;
  for (int s : allowed) ok = ok || s == out.status;
  if (!ok) throw std::logic_error("studio: status " + std::to_string(out.status) + " for " + r.method + " " + r.path + ": " + out.body);
  if (out.status >= 400 && out.body.find("\"error\":") != 1)
    throw std::logic_error("studio: an error without {\"error\": ...}: " + out.body);
}

}  // namespace qkv::fuzz
