#include "qkv/train/metrics_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "qkv/tensor/tensor.hpp"

namespace qkv::train {

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

void MetricsLog::restore(const std::vector<std::pair<std::string, std::vector<double>>>& history, std::int64_t step,
                         const std::string& path) {
  const std::size_t n = history.empty() ? 0 : history.front().second.size();
  for (auto& [name, values] : history) {
    if (std::find(columns_.begin(), columns_.end(), name) == columns_.end())
      throw ValueError(path + ": metric column '" + name + "' does not belong to this model's metrics");
    if (values.size() != n)
      throw ValueError(path + ": /metrics/" + name + " has " + std::to_string(values.size()) + " rows, /metrics/" +
                       history.front().first + " " + std::to_string(n) + ": every column must have one row per evaluation");
  }
  // The step column: whole numbers, increasing, none past the checkpoint's step.
  for (auto& [name, values] : history) {
    if (name != "step") continue;
    for (std::size_t r = 0; r < n; ++r) {
      const double s = values[r], before = r ? values[r - 1] : 0;
      if (!(s == std::floor(s) && s > before && s <= double(step)))
        throw ValueError(path + ": /metrics/step[" + std::to_string(r) + "] is " + csv_number(s) +
                         ": expected a whole step after " + csv_number(before) + " and at most the checkpoint's step " +
                         std::to_string(step));
    }
  }
  std::vector<std::vector<double>> rows;
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<double> row(columns_.size(), NAN);
    for (auto& [name, values] : history)
      row[std::size_t(std::find(columns_.begin(), columns_.end(), name) - columns_.begin())] = values[r];
    rows.push_back(std::move(row));
  }
  rows_ = std::move(rows);
}

std::string MetricsLog::csv() const {
  std::string out;
  for (std::size_t c = 0; c < columns_.size(); ++c) out += (c ? "," : "") + columns_[c];
  out += "\n";
  for (auto& r : rows_) {
    for (std::size_t c = 0; c < r.size(); ++c) out += (c ? "," : "") + csv_number(r[c]);
    out += "\n";
  }
  return out;
}

}  // namespace qkv::train
