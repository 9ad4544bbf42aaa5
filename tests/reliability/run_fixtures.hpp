#pragma once
// Tiny end-to-end training runs through the qkv binary, and comparisons of what they leave.

#include <string>
#include <vector>

#include "qkv/io/checkpoint.hpp"
#include "reliability/process.hpp"

namespace qkv::test {

/// A tiny sort-task config (1 layer, d_model 16, 6 tokens) writing to `out`; `extra` is appended
/// inside the train section (e.g. "  steps: 40\n"), overriding nothing else. Trains in well under
/// a second.
std::string tiny_config(const std::string& out, int steps = 40, int checkpoint_every = 2,
                        const std::string& optimizer = "{lr: 0.01}");

/// Writes `yaml` to `dir`/config.yaml and returns its path.
std::string write_config(const std::string& dir, const std::string& yaml);

/// metrics.csv without the wall-clock columns (tokens_per_s, elapsed_s): what must be identical
/// between two runs of the same config and seed.
std::string deterministic_metrics(const std::string& run_dir);

/// Everything in a checkpoint that must be bitwise identical between equivalent runs, as one
/// string of hex bytes per tensor and value (wall-clock metric columns left out). Throws the
/// loader's IoError if the file does not load.
std::string checkpoint_fingerprint(const std::string& path);

/// Names of files under `dir` (recursively) containing ".tmp-": leftovers of interrupted saves.
std::vector<std::string> temp_files(const std::string& dir);

}  // namespace qkv::test
