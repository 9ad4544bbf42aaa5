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

#include "qkv/tensor/tensor.hpp"

namespace qkv::config {

/// The network.
struct ModelConfig {
  std::string arch = "encoder";  ///< encoder | encoder_decoder
  std::size_t d_model = 64;      ///< C
  std::size_t heads = 4;         ///< H
  std::size_t head_dim = 0;      ///< D; 0: d_model / heads
  std::size_t layers = 2;
  std::size_t d_ff = 256;  ///< feed-forward hidden width
  double dropout = 0.0;
  double attn_dropout = 0.0;
  std::string activation = "gelu";  ///< gelu | relu
  bool norm_first = true;           ///< pre-norm (true) or post-norm blocks
  std::string positional = "sinusoidal";  ///< sinusoidal | learned
  std::string attention = "fused";        ///< fused | composite
  double scale = 0.0;  ///< score scale; 0: 1/sqrt(D); otherwise this value (1 = no scaling)
};

/// The synthetic task.
struct TaskConfig {
  std::string name = "sort";  ///< copy | reverse | sort | recall | seq2seq_reverse | seq2seq_sort
  std::size_t vocab = 16;     ///< V
  std::size_t length = 32;    ///< sequence length
  std::size_t pairs = 8;      ///< recall: key-value pairs per sequence
  std::size_t queries = 0;    ///< recall: queries per sequence (0: task default)
  std::size_t eval_size = 512;  ///< held-out examples
  std::size_t train_size = 0;   ///< 0: a fresh sample every step
};

struct OptimizerConfig {
  std::string name = "adamw";  ///< sgd | adam | adamw
  double lr = 1e-3;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;   ///< sgd
  double dampening = 0.0;  ///< sgd
  bool nesterov = false;   ///< sgd
  bool decay_bias_and_norm = false;  ///< apply weight decay to biases and norm gains too
  double clip_grad_norm = 1.0;       ///< 0: off
};

/// Learning-rate schedule (after linear warmup).
struct ScheduleConfig {
  std::string name = "cosine";  ///< constant | cosine | step
  std::size_t warmup_steps = 100;
  std::size_t step_size = 1000;  ///< step: multiply by gamma every step_size steps
  double min_lr = 0.0;           ///< cosine: final learning rate
  double gamma = 0.5;            ///< step: decay factor
};

struct TrainConfig {
  std::size_t steps = 2000;
  std::size_t batch_size = 64;  ///< B
  std::size_t eval_every = 100;
  std::size_t checkpoint_every = 500;
  std::size_t log_every = 10;
  double target_accuracy = 0.0;  ///< early stop at this held-out token accuracy; 0: off
  double label_smoothing = 0.0;
  int threads = 0;  ///< 0: all cores
  bool diagnostics = true;
};

struct RunConfig {
  std::string out = "runs/default";  ///< output directory (created by the trainer, not here)
};

struct Config {
  std::uint64_t seed = 1;
  ModelConfig model;
  TaskConfig task;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
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
/// parsed as a YAML scalar; "seed=7" for the top-level seed) and validate again.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
/// Same from text; `source_name` is the file name used in errors and stored in Config::source.
Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});
/// Apply overrides to an existing config (e.g. the defaults) and validate.
Config apply_overrides(Config config, const std::vector<std::string>& overrides);
/// Throw ConfigError for impossible values (sizes, rates, enums, memory, run.out). Locations
/// are line 0 of config.source, since a Config does not remember its lines.
void validate(const Config& config);
/// The resolved config as YAML, every section and key; parse_config(to_yaml(c)) == c.
std::string to_yaml(const Config& config);
/// Rough peak bytes of one training step: parameters, gradients, Adam moments, and the
/// activations the tape keeps (B x T x C per layer, B x H x T x T attention, B x T x V logits).
std::size_t estimate_memory_bytes(const Config& config);
/// Physical memory of this machine in bytes (sysconf), 0 if unknown.
std::size_t physical_memory_bytes();

/// Field-by-field equality (source excluded).
bool operator==(const Config& a, const Config& b);
inline bool operator!=(const Config& a, const Config& b) { return !(a == b); }

}  // namespace qkv::config
