#pragma once
/// @file
/// Run configuration: YAML -> options structs, with errors that say where.
///
/// A config file is a mapping of sections (model, task, optimizer, schedule, train, run) plus a
/// top-level `seed`. Every section and key is optional; missing ones keep the defaults below.
/// Unknown keys, wrong types and impossible values are errors (ConfigError) naming the file,
/// line, `section.key`, what was expected and what was found. docs/config.md lists every key.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/optim/lr_schedule.hpp"
#include "qkv/optim/optimizer.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::config {

/// train.precision: the operands of the training step's products (kernels/bf16.hpp).
enum class TrainPrecision {
  Fp32,  ///< float32 everywhere
  /// bfloat16 operands and float32 accumulation in the products of linear layers, attention and
  /// the output layer (forward and backward); weights, optimizer state, norms, softmax, the loss
  /// and the gradients' reductions stay float32. Where bf16 does not pay on this CPU
  /// (kernels::bf16_support()), the run trains in float32 and says so (train::Session::notes()).
  Bf16
};
/// "fp32", "bf16".
const NameTable<TrainPrecision>& train_precision_names();

/// The `train` section: how the loop runs (the trainer's own settings).
struct TrainConfig {
  std::size_t steps = 2000;
  std::size_t batch_size = 64;  ///< B, the examples of one optimizer step (over all ranks)
  std::size_t accumulate = 1;   ///< gradient accumulation: micro-batches of batch_size / accumulate
  std::size_t eval_every = 100;
  std::size_t checkpoint_every = 500;
  std::size_t log_every = 10;
  double target_accuracy = 0.0;  ///< early stop at this held-out token accuracy; 0: off
  double label_smoothing = 0.0;
  int threads = 0;  ///< 0: all cores
  TrainPrecision precision = TrainPrecision::Fp32;
  bool diagnostics = true;
  /// Record training snapshots (interp/snapshots.hpp: every layer's and head's attention weights
  /// and head scores on held-out examples) into <run>/snapshots.h5 every this many steps, at step
  /// 0 and at the final step; 0: off.
  std::size_t snapshot_every = 0;
  /// N, the held-out examples the snapshots show: the first N of the validation set; >= 1 and at
  /// most task.eval_size.
  std::size_t snapshot_examples = 4;
};

/// The `run` section.
struct RunConfig {
  std::string out = "runs/default";  ///< the run directory (train/run_directory.hpp)
};

/// A run's whole configuration. Each section *is* the options struct of the layer it configures
/// (the YAML keys map onto its fields one to one; docs/config.md lists them): model ->
/// nn::TransformerOptions (nested: model.heads is model.attn.num_heads, model.d_ff is
/// model.ff.hidden, ...), task -> data::TaskOptions, optimizer -> optim::OptimizerOptions,
/// schedule -> optim::ScheduleOptions (its total_steps is train.steps).
struct Config {
  std::uint64_t seed = 1;
  nn::TransformerOptions model;
  data::TaskOptions task;
  optim::OptimizerOptions optimizer;
  optim::ScheduleOptions schedule;
  TrainConfig train;
  RunConfig run;
  std::string source;  ///< file name the config came from ("" if built in code)
};

/// A config error with its location. what() is "<file>:<line>: <section.key>: <message>";
/// for a command-line override it is "--set <section.key=value>: <section.key>: <message>"
/// (file "--set", line 0). line is 1-based; 0 when unknown. key is empty for file-level errors
/// (syntax, empty file), and then left out of what().
struct ConfigError : ValueError {
  ConfigError(std::string file, int line, std::string key, std::string message, std::string override_text = "");
  std::string file;
  int line = 0;
  std::string key;
  std::string message;        ///< the part after the location and key
  std::string override_text;  ///< "section.key=value" for --set errors
};

/// Read and validate a YAML file, then apply `--set` overrides ("section.key=value", the value
/// parsed as a YAML scalar; "seed=7" for the top-level seed) and validate again. The file must be
/// a regular file of at most 16 MiB; a checkpoint or another binary file is named as such. With
/// `memory_budget` > 0, a config whose training step would need more memory
/// (estimate_memory_bytes) is refused, blaming the size key set furthest above its default.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   std::size_t memory_budget = 0);
/// Same from text; `source_name` is the file name used in errors and stored in Config::source.
Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {}, std::size_t memory_budget = 0);
/// The config a checkpoint stores (its /config text), checked as parse_config does (without a
/// memory budget: check_memory is the caller's choice).
Config parse_stored_config(const std::string& yaml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides = {});
/// Apply overrides to an existing config (e.g. the defaults) and validate.
Config apply_overrides(Config config, const std::vector<std::string>& overrides);
/// Throw ConfigError for impossible values (each section's own validate(), the rules across
/// sections). Locations are config.source without a line, since a Config does not remember its
/// lines.
void validate(const Config& config);
/// The resolved config as YAML, every section and key; parse_config(to_yaml(c)) == c.
std::string to_yaml(const Config& config);
/// Rough peak bytes of one training step: the model's parameters (their shapes read from the
/// model itself, built without memory), gradients and Adam moments, the activations the tape
/// keeps for the task's own sequence layout (B x T x C per layer, B x H x T x T attention,
/// B x T x V logits), and the held-out and fixed training sets (16 bytes a token). Builds the
/// task (a text task reads its corpus).
std::size_t estimate_memory_bytes(const Config& config);
/// The part of estimate_memory_bytes known from the options alone, without building the task:
/// held-out and fixed training sets and learned positions. What loading a checkpoint's model
/// with its data costs at least.
std::size_t estimate_data_bytes(const Config& config);
/// ConfigError when estimate_memory_bytes(config) exceeds `budget` bytes (for a config that has
/// no file lines to blame, e.g. a checkpoint's).
void check_memory(const Config& config, std::size_t budget);

/// A sweep file (`qkv sweep`): a base config, overrides for every run, a grid and seeds.
///
///     base: ../sort.yaml        # the config every run starts from (relative to this file)
///     set: {train.steps: 600}   # overrides for every run
///     grid: {model.heads: [1, 2, 4]}
///     seeds: [1, 2, 3]
///     out: sweeps/heads         # sweep directory (default sweeps/<file stem>)
struct SweepFile {
  std::string path, base, out;                ///< base resolved against the file's directory
  std::vector<std::string> set;               ///< "section.key=value"
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;  ///< key -> values, in file order
  std::vector<std::uint64_t> seeds = {1, 2, 3};
};
/// Read a sweep file (a regular file of at most 16 MiB). ConfigError naming the file, the line and
/// the key for a syntax error, an unknown key, a missing base, a list or mapping where a scalar
/// belongs (and the reverse), an empty grid list, or a seed that is not a non-negative integer.
SweepFile load_sweep_file(const std::string& path);

/// Field-by-field equality (source excluded).
bool operator==(const Config& a, const Config& b);
inline bool operator!=(const Config& a, const Config& b) { return !(a == b); }
/// The keys of `sections` (e.g. {"seed", "model", "task"}; "seed" is the top-level key) whose
/// values differ, one line each: "model.heads: a 4, b 8" with the labels given.
std::vector<std::string> differences(const Config& a, const Config& b, const std::vector<std::string>& sections,
                                     const std::string& label_a, const std::string& label_b);
/// Every key of every section: (section.key, its type or choices, default), for the reference
/// in docs/config.md (a test checks that the document lists each one).
std::vector<std::pair<std::string, std::string>> reference();

}  // namespace qkv::config
