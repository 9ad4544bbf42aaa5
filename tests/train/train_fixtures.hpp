#pragma once
// Small configs that train in about a second, for trainer and CLI tests.

#include <string>
#include <vector>

#include "qkv/config/config.hpp"
#include "test_util.hpp"

namespace qkv::test {

/// A tiny sort run: vocab 8, length 8, width 32, 2 heads, 1 layer.
inline config::Config tiny_config(const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"model.d_model=32", "model.heads=2", "model.layers=1", "model.d_ff=64",
                                        "task.vocab=8", "task.length=8", "task.eval_size=128", "train.batch_size=32",
                                        "train.steps=40", "train.eval_every=10", "train.checkpoint_every=20",
                                        "train.log_every=10", "train.threads=1", "schedule.warmup_steps=5",
                                        "optimizer.lr=0.003", "run.out=" + out};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return config::parse_config("{}", "tiny.yaml", overrides);
}

/// Run a shell command, returning its exit status (stdout/stderr captured into `output`).
int run_command(const std::string& command, std::string* output = nullptr);

}  // namespace qkv::test
