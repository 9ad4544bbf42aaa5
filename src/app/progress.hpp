#pragma once
/// @file
/// Progress on stderr: a one-line bar redrawn in place on a terminal, plain lines otherwise.

#include <chrono>
#include <cstdint>
#include <string>

namespace qkv::app {

class Progress {
 public:
  Progress(std::int64_t total_steps, bool enabled);
  /// Redraw (terminal) or print a line: step, loss, accuracy, tokens/s, ETA.
  void update(std::int64_t step, double loss, double accuracy, double tokens_per_s);
  /// A message on its own line (the bar is redrawn after it).
  void message(const std::string& text);
  void finish();

 private:
  std::int64_t total_;
  bool enabled_, tty_;
  bool drawn_ = false;
  std::int64_t start_step_ = -1;
  std::chrono::steady_clock::time_point start_;
};

/// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

}  // namespace qkv::app
