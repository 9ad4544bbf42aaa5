// qkv serve: the studio, a local web application over the engine (docs/studio.md). This file is
// the HTTP side only (cpp-httplib): every request goes to Studio::handle (serve_api.hpp).
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/tensor/parallel.hpp"
#include "runtime.hpp"
#include "serve_api.hpp"
#include "qkv/io/json.hpp"

namespace qkv::app {
namespace {

std::string url_host(const std::string& host) { return host.find(':') != std::string::npos ? "[" + host + "]" : host; }

// What httplib answers by itself (a body over the limit, a malformed request line) gets a JSON
// body too, as the studio's own errors have.
std::string httplib_error(int status) {
  const char* what = status == 413   ? "the request body is larger than the 65536 bytes a request may send"
                     : status == 414 ? "the request line is too long"
                     : status == 400 ? "a malformed HTTP request"
                                     : "the request could not be served";
  json::Writer w;
  w.open('{').member("error", what).member("status", status).close('}');
  return w.take();
}

}  // namespace

int serve(const ServeArgs& a) {
  return guarded([&] {
    set_num_threads(a.threads > 0 ? a.threads : 1);
    // A client that goes away mid-answer must not end the server (cpp-httplib sends with
    // MSG_NOSIGNAL on Linux; this covers any other write).
    std::signal(SIGPIPE, SIG_IGN);
    if (!a.run.empty() && !std::filesystem::is_directory(a.run))
      throw ValueError("--run " + a.run + ": not a directory (give the run directory of a qkv train, e.g. runs/induction)");
    std::vector<std::unique_ptr<ServedModel>> models;
    for (const std::string& path : a.checkpoints) {
      models.push_back(load_served(path));
      const ServedModel& s = *models.back();
      std::printf("loaded %s: %s, %s, %zu attention layers%s\n", path.c_str(), s.loaded.task->name().c_str(),
                  nn::arch_names().name(s.loaded.cfg.model.arch), model::attention_layers(*s.loaded.model).size(),
                  s.with_data ? "" : " (typed input only)");
      if (!s.with_data)
        std::fprintf(stderr, "qkv serve: %s: held-out examples, mean ablation and held-out metrics are off: they need the "
                     "model's data, %s\n", path.c_str(), s.data_note.c_str());
    }

    httplib::Server server;
    // httplib's default also sets SO_REUSEPORT, with which a second server binds the same port and
    // the kernel splits the connections between the two: a port in use must be an error instead.
    server.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    // The answer is written as headers then body: without TCP_NODELAY the body waits for the
    // client's delayed acknowledgement (40 ms on Linux) on every request of a kept-alive connection.
    server.set_tcp_nodelay(true);
    const int port = a.port == 0 ? server.bind_to_any_port(a.host) : server.bind_to_port(a.host, a.port) ? a.port : -1;
    if (port < 0)
      throw io::IoError("cannot listen on " + a.host + " port " + std::to_string(a.port) + " (" + std::strerror(errno) +
                        "): is the port taken by another program, or the address not one of this machine's? "
                        "--port 0 picks a free port");
    StudioOptions options;
    options.run_dir = a.run;
    const Exposure exposed = exposure(a.host, port);
    options.allowed_hosts = exposed.allowed_hosts;
    Studio studio(std::move(models), options);

    server.set_payload_max_length(options.max_body);
    server.set_read_timeout(10, 0);
    server.set_write_timeout(10, 0);
    server.set_keep_alive_timeout(5);
    server.set_keep_alive_max_count(1000);
    auto handler = [&studio](const httplib::Request& req, httplib::Response& res) {
      StudioRequest r;
      r.method = req.method;
      r.path = req.path;
      for (auto& [k, v] : req.params) r.query.emplace_back(k, v);
      r.content_type = req.get_header_value("Content-Type");
      r.host = req.get_header_value("Host");
      r.body = req.body;
      StudioResponse out = studio.handle(r);
      res.status = out.status;
      for (auto& [k, v] : out.headers) res.set_header(k, v);
      res.set_content(out.body, out.content_type);
      if (out.status >= 500) std::fprintf(stderr, "qkv serve: %s %s: %s\n", r.method.c_str(), r.path.c_str(), out.body.c_str());
    };
    server.Get(".*", handler);
    server.Post(".*", handler);
    server.Put(".*", handler);
    server.Delete(".*", handler);
    server.Patch(".*", handler);
    server.Options(".*", handler);
    server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) res.set_content(httplib_error(res.status), "application/json; charset=utf-8");
    });

    std::printf("qkv studio: http://%s:%d/  (%zu checkpoint%s%s; Ctrl-C stops it)\n", url_host(a.host).c_str(), port,
                studio.size(), studio.size() == 1 ? "" : "s", a.run.empty() ? "" : (", following " + a.run).c_str());
    std::fflush(stdout);
    if (!exposed.warning.empty()) std::fprintf(stderr, "qkv serve: %s\n", exposed.warning.c_str());

    InterruptScope interrupt;
    std::atomic<bool> done{false};
    std::thread watcher([&] {
      while (!done) {
        if (InterruptScope::requested()) {
          server.stop();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    const bool ok = server.listen_after_bind();
    done = true;
    watcher.join();
    if (InterruptScope::requested()) {
      std::printf("qkv studio: stopped\n");
      return 0;
    }
    if (!ok) throw io::IoError("the server stopped: " + std::string(std::strerror(errno)));
    return 0;
  });
}

}  // namespace qkv::app
