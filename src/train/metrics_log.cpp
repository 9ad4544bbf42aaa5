#include "qkv/train/metrics_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "qkv/io/checkpoint.hpp"
#include "qkv/train/trainer.hpp"

namespace qkv::train {
namespace {

void write_row(std::ostream& f, const std::vector<double>& r) {
  for (std::size_t c = 0; c < r.size(); ++c) f << (c ? "," : "") << csv_number(r[c]);
  f << "\n";
}

}  // namespace

std::string csv_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

double MetricsLog::last(const std::string& column) const {
  auto it = std::find(columns_.begin(), columns_.end(), column);
  if (it == columns_.end() || rows_.empty()) return NAN;
  return rows_.back()[std::size_t(it - columns_.begin())];
}

std::vector<std::pair<std::string, std::vector<double>>> MetricsLog::history() const {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    std::vector<double> col;
    for (auto& r : rows_) col.push_back(r[c]);
    out.emplace_back(columns_[c], std::move(col));
  }
  return out;
}

void MetricsLog::restore(const std::vector<std::pair<std::string, std::vector<double>>>& history, const std::string& path) {
  rows_.clear();
  const std::size_t n = history.empty() ? 0 : history.front().second.size();
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<double> row(columns_.size(), NAN);
    for (auto& [name, values] : history) {
      auto it = std::find(columns_.begin(), columns_.end(), name);
      if (it == columns_.end())
        throw ValueError(path + ": metric column '" + name + "' does not belong to this model's metrics");
      row[std::size_t(it - columns_.begin())] = values.at(r);
    }
    rows_.push_back(std::move(row));
  }
}

void MetricsLog::write_csv(const std::string& path) const {
  std::ofstream f(path, std::ios::trunc);
  for (std::size_t c = 0; c < columns_.size(); ++c) f << (c ? "," : "") << columns_[c];
  f << "\n";
  for (auto& r : rows_) write_row(f, r);
  if (!f) throw io::IoError("cannot write " + path);
}

void MetricsLog::append_csv(const std::string& path) const {
  std::ofstream f(path, std::ios::app);
  write_row(f, rows_.back());
  if (!f) throw io::IoError("cannot append to " + path);
}

// ---- result.csv ----

void write_result_csv(const std::string& file, const RunResult& r, const MetricsLog& metrics, double tokens_per_s) {
  // The last diagnostics, averaged over attention layers.
  std::vector<std::pair<std::string, double>> diag = {{"entropy", 0}, {"max_weight", 0}, {"grad_q", 0}, {"grad_k", 0}, {"redundancy", 0}, {"qk_var", 0}};
  std::size_t layers = 0;
  for (auto& c : metrics.columns()) layers += c.size() > 8 && c.compare(c.size() - 8, 8, ".entropy") == 0;
  for (auto& [name, values] : metrics.history()) {
    if (values.empty()) continue;
    for (auto& [key, sum] : diag)
      if (name.size() > key.size() + 1 && name.compare(name.size() - key.size() - 1, key.size() + 1, "." + key) == 0)
        sum += values.back() / double(layers);
  }
  std::ofstream f(file);
  f << "status,steps,final_loss,final_token_acc,final_seq_acc,best_token_acc,best_seq_acc,steps_to_target,"
       "wall_s,tokens_per_s,train_token_acc";
  for (auto& [key, v] : diag) f << ",attn_" << key;
  f << "\n" << r.stop_reason << ',' << r.step;
  for (double v : {r.last.loss, r.last.token_accuracy, r.last.sequence_accuracy, r.best.token_accuracy,
                   r.best.sequence_accuracy, double(r.steps_to_target), r.wall_seconds, tokens_per_s,
                   metrics.last("train_token_acc")})
    f << ',' << csv_number(v);
  for (auto& [key, v] : diag) f << ',' << csv_number(v);
  f << "\n";
}

}  // namespace qkv::train
