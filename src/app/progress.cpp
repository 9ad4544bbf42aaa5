#include "progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace qkv::app {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

Progress::Progress(std::int64_t total, bool enabled)
    : total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO)), start_(std::chrono::steady_clock::now()) {}

void Progress::update(std::int64_t step, double loss, double accuracy, double tokens_per_s) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (start_step_ < 0) {
    start_step_ = step;
    start_ = now;
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = step > start_step_ ? (step - start_step_) / elapsed : 0;
  const double eta = rate > 0 ? (total_ - step) / rate : NAN;
  char acc[16] = "   -  ";
  if (accuracy >= 0) std::snprintf(acc, sizeof acc, "%5.1f%%", 100 * accuracy);
  if (tty_) {
    const int width = 24, filled = int(width * double(step) / std::max<std::int64_t>(total_, 1));
    std::string bar(std::size_t(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] step %lld/%lld  loss %.4f  acc %s  %.0f tok/s  ETA %s \033[K", bar.c_str(),
                 (long long)step, (long long)total_, loss, acc, tokens_per_s, format_duration(eta).c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "step %lld/%lld  loss %.4f  acc %s  %.0f tok/s  ETA %s\n", (long long)step,
                 (long long)total_, loss, acc, tokens_per_s, format_duration(eta).c_str());
  }
  std::fflush(stderr);
}

void Progress::message(const std::string& text) {
  if (!enabled_) return;
  if (drawn_) std::fputs("\r\033[K", stderr);
  std::fprintf(stderr, "%s\n", text.c_str());
  drawn_ = false;
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && drawn_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace qkv::app
