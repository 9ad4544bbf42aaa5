#pragma once
// The qkv subcommands, free of CLI11 (which is expensive to compile): main.cpp parses, these run.
// Each returns the process exit status: 0 ok, 1 runtime/file error, 2 bad config or arguments,
// 3 diverged, 4 ranks out of sync, 130 interrupted.

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::app {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume, out;
  int threads = 0;
  bool quiet = false;
  std::int64_t stop_after = 0;
};
int train(const TrainArgs& args);

int eval(const std::string& checkpoint, const std::vector<std::string>& overrides, int threads);
int inspect(const std::string& checkpoint);
int attention(const std::string& checkpoint, std::size_t example, const std::string& out);
int gradcheck();
/// Logits of the first `count` held-out examples (encoder models) as text: a line "N T V", N lines
/// of input tokens, then N*T lines of V logits (%.9g). For checking against other frameworks.
int logits(const std::string& checkpoint, std::size_t count, const std::string& out);
int info();

struct SweepArgs {
  std::string file;
  std::vector<std::string> overrides;
  std::string out;
  int jobs = 1;
  int threads = 0;
  bool dry_run = false;
};
int sweep(const SweepArgs& args);

}  // namespace qkv::app
