// qkv view: the studio, saved (docs/viewer.md): the studio's own page, script and style written into
// one HTML file with the studio's answers embedded, so that the one script that draws the studio
// draws this page too, with no server and no network.
#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <filesystem>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/interp/analyze.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/snapshots.hpp"
#include "qkv/io/files.hpp"
#include "qkv/runs/follow.hpp"
#include "qkv/tensor/parallel.hpp"
#include "serve_api.hpp"

namespace qkv::app {

// The studio's page and its assets, compiled in (serve_assets.cpp, generated from share/studio/).
const std::string& studio_html();
const std::string& studio_js();
const std::string& studio_css();

namespace {

namespace fs = std::filesystem;

// Where studio.html loads its style and script, and the line of studio.js after which the script
// is split in two elements: the first installs the error handlers, so that they also report a
// syntax error in the second.
constexpr const char* kStyleTag = "<link rel=\"stylesheet\" href=\"/studio.css\">";
constexpr const char* kScriptTag = "<script src=\"/studio.js\" defer></script>";
constexpr const char* kSplitLine = "// ==== qkv view: the page's script starts here";
// No network: the saved page may run its own inline script and style only.
constexpr const char* kPolicy =
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; img-src data: blob:\">";
// Above this many weights (every head of every layer, Tq x Tk each) the page holds them as bytes
// round(255 w) instead of float32: 4 MB of weights, 16 MB as float32.
constexpr std::size_t kExactWeights = std::size_t(4) << 20;

// `text` with its one `what` replaced by `with`; an internal error when `what` is not there once.
std::string replace_once(const std::string& text, const std::string& what, const std::string& with) {
  const std::size_t at = text.find(what);
  if (at == std::string::npos || text.find(what, at + 1) != std::string::npos)
    throw std::logic_error("the studio's page: expected '" + what + "' exactly once in share/studio/");
  return text.substr(0, at) + with + text.substr(at + what.size());
}

// An asset goes into the page as the text of an element that ends at `end` (e.g. "</script"),
// matched without regard to case: it must not hold it, nor "<!--" in a script.
void check_inline(const std::string& text, const std::string& end, const char* name) {
  std::string lower = text;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find(end) != std::string::npos || (end == "</script" && lower.find("<!--") != std::string::npos))
    throw std::logic_error(std::string("the studio's page: ") + name + " holds '" + end + "' or '<!--' and cannot be inlined");
}

// The run directory's snapshots.h5 for a checkpoint in it (run/best.h5) or in its checkpoints/
// folder (run/checkpoints/step_100.h5); "" when there is none.
std::string default_snapshots(const std::string& checkpoint) {
  fs::path dir = fs::path(checkpoint).parent_path();
  if (dir.filename() == "checkpoints") dir = dir.parent_path();
  const fs::path p = dir / "snapshots.h5";
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

// The input as the page asks /api/analyze for it.
void write_input(json::Writer& w, const model::InputRequest& in) {
  w.open('{');
  if (in.text) w.member("text", *in.text).member("mask_text", in.mask_text);
  if (in.ids) {
    w.key("ids").open('[');
    for (Index id : *in.ids) w.value(std::int64_t(id));
    w.close(']');
  }
  if (in.example) w.member("example", *in.example);
  w.close('}');
}

// The training snapshots the page shows, with the run's metrics when the file is a run's
// snapshots.h5: "run" (/api/run's answer, or null) and "snapshots" (/api/snapshot's answer for
// every step of held-out example 0, or null). Snapshots named on the command line must load and
// fit the model; the run directory's are left out, with a message, when they do not.
void write_snapshots(json::Writer& w, const ViewArgs& a, model::TaskModel& model, std::string& said) {
  const std::string path = a.no_snapshots ? "" : !a.snapshots.empty() ? a.snapshots : default_snapshots(a.checkpoint);
  std::shared_ptr<const interp::Snapshots> snaps;
  std::unique_ptr<runs::RunFollower> run;
  try {
    if (!path.empty() && fs::path(path).filename() == "snapshots.h5") {
      run = std::make_unique<runs::RunFollower>(fs::path(path).parent_path().string());
      std::string note;
      snaps = run->snapshots(note);
      if (!snaps) throw io::IoError(path + ": " + note);
    } else if (!path.empty()) {
      snaps = std::make_shared<const interp::Snapshots>(interp::load_snapshots(path));
    }
    if (snaps) interp::check_snapshots_fit(*snaps, model);
  } catch (const std::exception& e) {
    if (!a.snapshots.empty()) throw;
    std::fprintf(stderr, "qkv: the run's snapshots are left out: %s\n", e.what());
    snaps = nullptr, run = nullptr;
  }
  w.key("run");
  run && snaps ? w.raw(runs::run_json(*run)) : w.null();
  w.key("snapshots");
  if (!snaps || snaps->size() == 0) {
    w.null();
    return;
  }
  w.open('[');
  for (std::size_t i = 0; i < snaps->size(); ++i) w.raw(runs::snapshot_json(*snaps, i, 0, ""));
  w.close(']');
  said = ", " + std::to_string(snaps->size()) + " training snapshots from " + path;
}

}  // namespace

std::string offline_page(const std::string& data) {
  const std::string& js = studio_js();
  const std::size_t split = js.find(kSplitLine);
  if (split == std::string::npos) throw std::logic_error(std::string("the studio's page: no '") + kSplitLine + "' in studio.js");
  check_inline(js, "</script", "studio.js");
  check_inline(studio_css(), "</style", "studio.css");
  check_inline(data, "</script", "the data");  // json::quote writes "</" and "<!--" escaped
  std::string page = replace_once(studio_html(), kStyleTag, std::string(kPolicy) + "\n<style>\n" + studio_css() + "</style>");
  return replace_once(page, kScriptTag,
                      "<script>\n" + js.substr(0, split) + "</script>\n<script id=\"qkv-data\" type=\"application/json\">" +
                          data + "</script>\n<script>\n" + js.substr(split) + "</script>");
}

int view(const ViewArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    if (a.no_snapshots && !a.snapshots.empty()) throw ValueError("--snapshots and --no-snapshots: choose one");
    io::check_output_path(a.out, {a.checkpoint, a.snapshots}, "--out");
    // With the data when it can be had: the head labels are those of `qkv heads` (the first 64 test
    // examples), which need it.
    std::string data_note;
    Loaded l = load_with_data(a.checkpoint, data_note);
    interp::AnalyzeRequest request;
    request.input = input_request(a.input, &l);
    const interp::AnalyzeResult analysis = interp::analyze(l, request);
    std::size_t weights = 0;
    for (auto& layer : analysis.layers) weights += layer.weights.size();
    const auto encoding = weights > kExactWeights ? interp::WeightEncoding::Uint8 : interp::WeightEncoding::Float32;

    json::Writer w;
    w.open('{').member("format", "qkv-studio-page").member("version", 1);
    w.member("title", a.checkpoint + " - " + model::describe(request.input)).key("input");
    write_input(w, request.input);
    w.key("models").open('{').key("models").open('[');
    model_summary(w, 0, l, l.data != nullptr, l.data ? "" : data_note.empty() ? "which the task does not have" : data_note);
    w.close(']').member("run", false).close('}');
    w.key("analysis").raw(interp::to_json(analysis, *l.task, encoding));
    w.key("heads");
    std::string heads_note;
    if (l.data) {
      w.raw(interp::to_json(interp::heads(l, {})));
    } else {
      w.null();
      heads_note = "head scores and labels need the model's test split, " + data_note;
    }
    w.member("heads_note", heads_note);
    std::string said;
    write_snapshots(w, a, *l.model, said);
    w.close('}');
    io::write_file_atomic(a.out, offline_page(w.take()));
    std::printf("wrote %s (%zu attention layers%s); open it in a browser\n", a.out.c_str(), analysis.layers.size(),
                said.c_str());
    return 0;
  });
}

}  // namespace qkv::app
