#pragma once
/// @file
/// The metric history of a run: named columns, one row per evaluation, mirrored to metrics.csv
/// (rewritten whole at start and on resume, appended to after each evaluation) and stored in
/// checkpoints under /metrics.

#include <string>
#include <utility>
#include <vector>

namespace qkv::train {

class MetricsLog {
 public:
  void set_columns(std::vector<std::string> columns) { columns_ = std::move(columns); }
  const std::vector<std::string>& columns() const { return columns_; }
  std::size_t rows() const { return rows_.size(); }
  /// One row, a value per column.
  void add(const std::vector<double>& row) { rows_.push_back(row); }
  /// The last value of `column` (NaN when the log is empty or has no such column).
  double last(const std::string& column) const;
  /// Columns with their values, for a checkpoint.
  std::vector<std::pair<std::string, std::vector<double>>> history() const;
  /// Replace the rows by a checkpoint's history; throws ValueError naming `path` for a column
  /// that is not one of this log's.
  void restore(const std::vector<std::pair<std::string, std::vector<double>>>& history, const std::string& path);
  /// Rewrite the whole CSV (at start and on resume, so rows past a checkpoint disappear).
  void write_csv(const std::string& path) const;
  /// Append the last row.
  void append_csv(const std::string& path) const;

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<double>> rows_;
};

/// "%.9g".
std::string csv_number(double v);

}  // namespace qkv::train
