// qkv view: a self-contained HTML page of every attention head on one input (docs/viewer.md).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/viewer.hpp"
#include "qkv/io/files.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::app {
namespace {

namespace fs = std::filesystem;

// The run directory's snapshots.h5 for a checkpoint in it (run/best.h5) or in its checkpoints/
// folder (run/checkpoints/step_100.h5); "" when there is none.
std::string default_snapshots(const std::string& checkpoint) {
  fs::path dir = fs::path(checkpoint).parent_path();
  if (dir.filename() == "checkpoints") dir = dir.parent_path();
  const fs::path p = dir / "snapshots.h5";
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

}  // namespace

int view(const ViewArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    if (a.no_snapshots && !a.snapshots.empty()) throw ValueError("--snapshots and --no-snapshots: choose one");
    io::check_output_path(a.out, {a.checkpoint, a.snapshots}, "--out");
    Loaded l = load_for(a.checkpoint, a.input);
    const model::InputRequest input = input_request(a.input, &l);
    const data::Batch row = model::input_row(l, input).row;

    // Snapshots named on the command line must load; the run directory's are shown when they do.
    interp::Snapshots snapshots;
    bool have = false;
    const std::string path = a.no_snapshots ? "" : !a.snapshots.empty() ? a.snapshots : default_snapshots(a.checkpoint);
    if (!path.empty()) {
      try {
        snapshots = interp::load_snapshots(path);
        have = true;
      } catch (const std::exception& e) {
        if (!a.snapshots.empty()) throw;
        std::fprintf(stderr, "qkv: the run's snapshots are left out: %s\n", e.what());
      }
    }
    interp::ViewerContent content;
    content.title = a.checkpoint + " - " + model::describe(input);
    content.snapshots = have ? &snapshots : nullptr;
    // With the data at hand the labels are those of `qkv heads` (the first 64 test examples), so
    // the page and the table agree; a page of --text shows the scores of that one input.
    std::vector<interp::HeadScores> scores;
    if (l.data) {
      scores = interp::head_scores(*l.model, *l.task, l.data->test_set(), {});
      content.scores = &scores;
    }
    try {
      io::write_file_atomic(a.out, interp::viewer_page(interp::viewer_json(*l.model, *l.task, l.cfg.model, row, content)));
    } catch (const ValueError& e) {
      if (!have || !a.snapshots.empty()) throw;
      // The run directory's snapshots belong to another model (the checkpoint was copied there?).
      std::fprintf(stderr, "qkv: the run's snapshots are left out: %s: %s\n", path.c_str(), e.what());
      content.snapshots = nullptr;
      io::write_file_atomic(a.out, interp::viewer_page(interp::viewer_json(*l.model, *l.task, l.cfg.model, row, content)));
      have = false;
    }
    std::printf("wrote %s (%zu attention layers%s); open it in a browser\n", a.out.c_str(),
                model::attention_layers(*l.model).size(),
                have ? (", " + std::to_string(snapshots.size()) + " training snapshots from " + path).c_str() : "");
    return 0;
  });
}

}  // namespace qkv::app
