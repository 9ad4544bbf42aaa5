#include "qkv/runs/follow.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>

#include "qkv/io/files.hpp"
#include "qkv/io/json.hpp"

namespace qkv::runs {
namespace {

constexpr std::size_t kMaxMetricsBytes = 32 << 20;

std::int64_t file_stamp(const std::string& path, std::int64_t* size = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  if (size) *size = std::int64_t(st.st_size);
  return std::int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  for (std::size_t a = 0;;) {
    const std::size_t b = std::min(line.find(sep, a), line.size());
    out.push_back(line.substr(a, b - a));
    if (b == line.size()) break;
    a = b + 1;
  }
  return out;
}

void write_strings(json::Writer& w, const std::vector<std::string>& xs) {
  w.open('[');
  for (auto& x : xs) w.value(x);
  w.close(']');
}

}  // namespace

RunFollower::RunFollower(std::string dir) : dir_(std::move(dir)) {}

std::shared_ptr<const RunMetrics> RunFollower::metrics(std::string& note) const {
  const std::string path = dir_ + "/metrics.csv";
  std::string csv;
  try {
    csv = file_stamp(path) < 0 ? "" : io::read_file(path, kMaxMetricsBytes, "metrics");
  } catch (const io::IoError& e) {
    note = e.what();
    return nullptr;
  }
  std::vector<std::string> lines;
  for (const std::string& l : split(csv, '\n'))
    if (!l.empty()) lines.push_back(l);
  if (lines.empty()) {
    note = "no metrics.csv yet: the run has not evaluated";
    return nullptr;
  }
  const std::vector<std::string> header = split(lines.front(), ',');
  std::vector<std::size_t> keep;
  auto out = std::make_shared<RunMetrics>();
  for (std::size_t c = 0; c < header.size(); ++c)
    if (header[c].find('.') == std::string::npos) keep.push_back(c), out->columns.push_back(header[c]);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = split(lines[i], ',');
    if (cells.size() != header.size()) continue;  // a line being written (never with rename, but cheap to skip)
    std::vector<double> row;
    for (std::size_t c : keep) {
      char* end = nullptr;
      const double x = std::strtod(cells[c].c_str(), &end);
      row.push_back(cells[c].empty() || *end ? NAN : x);
    }
    out->rows.push_back(std::move(row));
  }
  note.clear();
  return out;
}

std::shared_ptr<const interp::Snapshots> RunFollower::snapshots(std::string& note, std::int64_t* version) {
  const std::string path = dir_ + "/snapshots.h5";
  std::int64_t size = 0;
  const std::int64_t stamp = file_stamp(path, &size);
  std::lock_guard<std::mutex> lock(mutex_);
  if (stamp < 0) {
    note = "no snapshots.h5 in the run yet (train.snapshot_every is 0, or the first snapshot is not written yet)";
    return snapshots_;
  }
  const std::int64_t key = stamp ^ (size << 1);
  if (key != stamp_) {
    // A file that fails its checksum keeps the last good snapshots on screen, with the error.
    try {
      snapshots_ = std::make_shared<const interp::Snapshots>(interp::load_snapshots(path));
      error_.clear();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    stamp_ = key;
  }
  note = error_;
  if (version) *version = stamp_;
  return snapshots_;
}

std::string run_json(RunFollower& run) {
  json::Writer w;
  w.open('{').member("dir", run.dir());
  std::string metrics_note, snapshots_note;
  w.key("metrics");
  if (const auto m = run.metrics(metrics_note)) {
    w.open('{').key("columns");
    write_strings(w, m->columns);
    w.key("rows").open('[');
    for (auto& row : m->rows) {
      w.open('[');
      for (double x : row) std::isnan(x) ? w.null() : w.value(x);
      w.close(']');
    }
    w.close(']').close('}');
  } else {
    w.null();
  }
  w.member("metrics_note", metrics_note);
  std::int64_t version = 0;
  const auto snaps = run.snapshots(snapshots_note, &version);
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
  w.member("snapshots_note", snapshots_note).close('}');
  return w.take();
}

std::string snapshot_json(const interp::Snapshots& s, std::size_t index, std::size_t example, const std::string& note) {
  const std::size_t N = s.inputs.shape()[0];
  const bool seq2seq = s.decoder_inputs.dimension() == 2 && s.decoder_inputs.size() > 0;
  auto labels = [](const std::vector<std::string>& all, const IndexArray& ids, std::size_t e) {
    const std::size_t T = ids.shape()[1];
    return std::vector<std::string>(all.begin() + long(e * T), all.begin() + long((e + 1) * T));
  };
  const std::vector<std::string> input = labels(s.input_labels, s.inputs, example);
  const std::vector<std::string> decoder = seq2seq ? labels(s.decoder_labels, s.decoder_inputs, example) : input;
  json::Writer w;
  w.open('{').member("index", index).member("step", std::int64_t(s.steps[index])).member("steps", s.size()).member("example", example);
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

}  // namespace qkv::runs
