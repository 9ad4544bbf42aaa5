#include "reliability/run_fixtures.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace qkv::test {
namespace fs = std::filesystem;

namespace {

bool is_wall_clock(const std::string& column) {
  return column == "tokens_per_s" || column == "elapsed_s" || column == "wall_s";
}

template <class T>
void hex(std::string& out, const T* data, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  const auto* b = reinterpret_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n * sizeof(T); ++i) {
    out += digits[b[i] >> 4];
    out += digits[b[i] & 15];
  }
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> parts;
  std::stringstream s(line);
  std::string p;
  while (std::getline(s, p, sep)) parts.push_back(p);
  return parts;
}

}  // namespace

std::string tiny_config(const std::string& out, int steps, int checkpoint_every, const std::string& optimizer) {
  return "seed: 11\n"
         "model: {d_model: 16, heads: 2, layers: 1, d_ff: 32}\n"
         "task: {name: sort, vocab: 8, length: 6, eval_size: 32}\n"
         "optimizer: " + optimizer + "\n"
         "schedule: {name: cosine, warmup_steps: 4}\n"
         "train: {steps: " + std::to_string(steps) + ", batch_size: 8, eval_every: 5, checkpoint_every: " +
         std::to_string(checkpoint_every) + ", log_every: 5, threads: 1}\n"
         "run: {out: " + out + "}\n";
}

std::string write_config(const std::string& dir, const std::string& yaml) {
  fs::create_directories(dir);
  const std::string path = dir + "/config.yaml";
  write_file(path, yaml);
  return path;
}

std::string deterministic_metrics(const std::string& run_dir) {
  std::stringstream in(read_file(run_dir + "/metrics.csv"));
  std::string line, out;
  std::vector<bool> keep;
  bool header = true;
  while (std::getline(in, line)) {
    auto cells = split(line, ',');
    if (header) {
      for (auto& c : cells) keep.push_back(!is_wall_clock(c));
      header = false;
    }
    for (std::size_t i = 0; i < cells.size(); ++i)
      if (i >= keep.size() || keep[i]) out += cells[i] + ",";
    out += "\n";
  }
  return out;
}

std::string checkpoint_fingerprint(const std::string& path) {
  io::Checkpoint c = io::load_checkpoint(path);
  std::string s = "step " + std::to_string(c.step) + " optimizer_step " + std::to_string(c.optimizer_step) + "\n";
  // The config, less run.out (equivalent runs write to different directories).
  for (auto& line : split(c.config_yaml, '\n'))
    if (line.rfind("  out:", 0) != 0) s += line + "\n";
  for (auto* dict : {&c.model, &c.optimizer})
    for (auto& [name, value] : *dict) {
      s += name + " ";
      hex(s, value.data(), value.size());
      s += "\n";
    }
  for (auto& [name, state] : c.rng) s += name + " " + std::to_string(state[0]) + "," + std::to_string(state[1]) + "\n";
  for (auto& [name, value] : c.scalars) {
    s += name + " ";
    hex(s, &value, 1);
    s += "\n";
  }
  for (auto& [name, column] : c.metrics) {
    if (is_wall_clock(name)) continue;
    s += name + " ";
    hex(s, column.data(), column.size());
    s += "\n";
  }
  return s;
}

std::vector<std::string> temp_files(const std::string& dir) {
  // The directory may change while it is listed (a running trainer renames files): list with
  // error codes, and retry a listing that failed.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<std::string> found;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, ec), end;
    for (; !ec && it != end; it.increment(ec))
      if (it->path().filename().string().find(".tmp-") != std::string::npos) found.push_back(it->path().string());
    if (!ec) return found;
    if (!fs::is_directory(dir)) return {};
  }
  return {};
}

}  // namespace qkv::test
