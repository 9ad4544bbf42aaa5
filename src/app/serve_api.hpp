#pragma once
// The studio's requests (docs/studio.md): every endpoint of `qkv serve` as a function of the
// request, free of HTTP and sockets. serve.cpp puts it behind cpp-httplib; the tests and the fuzz
// target (tests/fuzz/fuzz_serve.cpp) call Studio::handle directly. The files by concern:
// serve_routes.cpp (routing, the models and the assets), serve_requests.cpp (the endpoints that
// run a model: the JSON read into the library's request structs, the answer the library's JSON);
// following a run is the library's (runs/follow.hpp).
//
// Concurrency: a model's hooks are state of its modules (an ablation or a recording hook is added
// for one request and removed after it), so a model instance runs one request at a time, under its
// mutex. Each checkpoint is served by two instances of its weights (ServedModel): one for the
// interactive requests, one for the slow held-out work, so that typing never waits behind a
// held-out evaluation. Requests on different checkpoints, the assets and the run's files run in
// parallel. The memory pool is thread-safe and the tape is per thread.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/interp/ablation.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/load.hpp"
#include "qkv/runs/follow.hpp"

namespace qkv::app {

/// One HTTP request as the studio sees it.
struct StudioRequest {
  std::string method;  ///< "GET", "POST", ...
  std::string path;    ///< "/api/analyze", without the query string
  std::vector<std::pair<std::string, std::string>> query;  ///< decoded query parameters, in order
  std::string content_type;  ///< of the body ("" when absent)
  std::string host;          ///< the Host header ("" when absent)
  std::string body;
};

struct StudioResponse {
  int status = 200;
  std::string content_type = "application/json; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  ///< besides Content-Type
};

struct StudioOptions {
  std::string run_dir;  ///< --run: its metrics.csv and snapshots.h5 are followed ("" = none)
  /// Host header values answered (e.g. "127.0.0.1:8080", "localhost:8080"); others get 403, a
  /// guard against DNS rebinding. Empty: any host (--host other than loopback).
  std::vector<std::string> allowed_hosts;
  std::size_t max_body = 64 * 1024;  ///< request bodies larger than this get 413
};

/// A request that cannot be served as asked, with its HTTP status: 404, 405, 413, 415 (a bad field
/// is a ValueError or a field error: 400).
class RequestError : public ValueError {
 public:
  explicit RequestError(const std::string& what, int status = 400) : ValueError(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

/// A checkpoint as the studio serves it: two instances of its weights over one task and one data.
/// `loaded` answers the interactive requests (analyze, explain, patch, attribute) under `mutex`;
/// `batch` does the slow held-out work (held-out metrics, the means of mean ablation) under
/// `batch_mutex`, so that typing never waits behind it. Locks are taken in the order mutex,
/// batch_mutex. Each instance keeps its AblationCache; the means are made on `batch` and shared.
struct ServedModel {
  std::mutex mutex;  ///< held while loaded.model runs: its hooks are per-call state of its modules
  model::LoadedModel loaded;
  interp::AblationCache cache;
  std::mutex batch_mutex;  ///< held while `batch` runs
  model::LoadedModel batch;
  interp::AblationCache batch_cache;
  bool with_data = false;  ///< held-out examples, mean ablation and held-out metrics available
  std::string data_note;   ///< why not, when not ("" otherwise)
};

/// A loaded model ready to serve: its batch instance made (the same weights), its test split made
/// (once, here, not lazily by concurrent requests). `data_note` says why there is no data, when
/// loaded.data is null.
std::unique_ptr<ServedModel> serve_model(model::LoadedModel loaded, std::string data_note = "");

/// Load the checkpoint at `path` to serve it: with its data (the held-out sets) when the corpus
/// can be read, else without it (data_note says why). Throws what loading throws otherwise.
std::unique_ptr<ServedModel> load_served(const std::string& path, bool want_data = true);

/// The summary /api/models gives of one model (`index` among the served ones), also what the page
/// qkv view saves holds: path, task, arch, objective, tokenizer, mask text, context, vocabulary,
/// layers, data, and the first input (`suggestion`) and pair to patch (`patch`) to show.
void model_summary(json::Writer& w, std::size_t index, const model::LoadedModel& l, bool with_data,
                   const std::string& data_note);

/// How `qkv serve --host HOST --port PORT` is exposed. On a loopback address (127.0.0.0/8,
/// localhost, ::1) the studio answers only Host headers naming it (127.0.0.1:PORT, localhost:PORT,
/// [::1]:PORT and HOST:PORT), a guard against DNS rebinding, and `warning` is empty; on any other
/// address any Host is answered and `warning` is the line printed on start: the page is open to
/// the network, with no login.
struct Exposure {
  std::vector<std::string> allowed_hosts;  ///< StudioOptions::allowed_hosts
  std::string warning;                     ///< "" on loopback
};
Exposure exposure(const std::string& host, int port);

class Studio {
 public:
  Studio(std::vector<std::unique_ptr<ServedModel>> models, StudioOptions options);
  /// The response to `request`; never throws: bad requests get 4xx with {"error": message naming
  /// the field}, failures 500 (io errors, internal errors) or 503 (out of memory).
  StudioResponse handle(const StudioRequest& request);
  std::size_t size() const { return models_.size(); }

 private:
  StudioResponse route(const StudioRequest& r);
  std::string models_json();
  std::string reload(const std::string& body);
  std::string snapshot_json(const StudioRequest& r);
  ServedModel& model_of(const json::Fields& f);
  // The endpoints that run a model (serve_requests.cpp): parse, call the library, answer its JSON.
  std::string analyze(const std::string& body, bool explain_only);
  std::string heldout(const std::string& body);
  std::string patch(const std::string& body);
  std::string attribute(const std::string& body);
  std::string path(const std::string& body);
  std::string lens(const std::string& body);
  std::string heads(const std::string& body);

  std::vector<std::unique_ptr<ServedModel>> models_;
  StudioOptions options_;
  std::unique_ptr<runs::RunFollower> run_;
};

}  // namespace qkv::app
