#pragma once
/// @file
/// The metric history of a run: named columns, one row per evaluation, mirrored to metrics.csv
/// and stored in checkpoints under /metrics.

#include <cstdint>
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
  /// Replace the rows by the history of a checkpoint of step `step`; throws ValueError naming
  /// `path` (and leaves the log as it was) for a column that is not one of this log's, columns of
  /// different lengths, or a step column that is not whole, increasing and at most `step`.
  void restore(const std::vector<std::pair<std::string, std::vector<double>>>& history, std::int64_t step,
               const std::string& path);
  /// The whole log as CSV: a header of the column names, then one line per row ("%.9g").
  std::string csv() const;

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<double>> rows_;
};

/// "%.9g".
std::string csv_number(double v);

}  // namespace qkv::train
