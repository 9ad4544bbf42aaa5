#pragma once
/// @file
/// A trained model back from its checkpoint: the config, the task (with the stored vocabulary of
/// a text model), optionally the data, and the weights; and the one-row inputs instruments read.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/model/compiled.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::model {

/// A text task's tokenizer and vocabulary into the checkpoint (nothing for other tasks).
void save_vocabulary(const data::Task& task, io::Checkpoint& checkpoint);
/// The tokenizer a checkpoint stores (nullopt when it is not a text model's); throws IoError
/// naming `path` for a malformed vocabulary.
std::optional<data::Tokenizer> stored_tokenizer(const io::Checkpoint& checkpoint, const std::string& path);
/// Resuming a text model: the corpus must give the checkpoint's vocabulary (ValueError otherwise).
void check_vocabulary(const data::Task& task, const io::Checkpoint& checkpoint, const std::string& path);

/// A trained model rebuilt from a checkpoint, in eval mode.
struct LoadedModel {
  std::string path;  ///< the checkpoint it came from
  config::Config cfg;
  std::shared_ptr<data::Task> task;
  std::shared_ptr<data::Dataset> data;  ///< null when loaded without data (shared by copies of the model)
  std::shared_ptr<TaskModel> model;  ///< shared by copies of a LoadedModel (views with and without data)
  /// A compiled program's model (qkv compile): its program, residual labels and operations; null
  /// for trained models.
  std::shared_ptr<const CompiledInfo> compiled;
};

/// How load_model reads a checkpoint.
struct LoadOptions {
  std::vector<std::string> task_overrides;  ///< "task.key=value" only (ConfigError for other keys)
  /// Without data a text model does not read its corpus (the task holds the checkpoint's
  /// vocabulary only) and no Dataset is made.
  bool with_data = true;
  /// Bytes the model may take (its parameters and position table) plus, with data, its held-out
  /// sets (config::estimate_data_bytes); more is refused before anything is allocated. 0: no limit.
  /// Front ends pass io::physical_memory_bytes().
  std::size_t memory_budget = 0;
};

/// Rebuild the model of `checkpoint` (read from `path`, named so in errors). The model's parameter
/// shapes are worked out first without allocating (nn::MetaGuard) and compared with the
/// checkpoint's (ValueError listing what differs), then the memory budget is checked (ConfigError
/// at the key "task.length" or "task.eval_size" of `path`:/config), and only then is anything built.
LoadedModel load_model(const io::Checkpoint& checkpoint, const std::string& path, const LoadOptions& options);
/// The same, reading the file first: io::check_input_file, then io::load_checkpoint (header,
/// checksum and version verified before HDF5 parses a byte, finite values).
LoadedModel load_model(const std::string& path, const LoadOptions& options);
/// Shorthands: load_model(checkpoint, path, {task_overrides, with_data}) and the same from a file.
LoadedModel load_model(const io::Checkpoint& checkpoint, const std::string& path,
                       const std::vector<std::string>& task_overrides = {}, bool with_data = true);
LoadedModel load_model(const std::string& path, const std::vector<std::string>& task_overrides = {},
                       bool with_data = true);

/// `l` (loaded without data) with its data, as load_model with data makes it: the task built with
/// its corpus (a text model's read with the stored vocabulary) and the Dataset of the run's seed.
/// The model is shared, `l` is unchanged. ConfigError (at task.eval_size) when the held-out sets
/// would need more than `memory_budget` bytes (0: no limit).
LoadedModel with_data(const LoadedModel& l, std::size_t memory_budget = 0);

/// Bytes of the model `cfg` describes for `task` (float32 parameters plus a sinusoidal position
/// table), worked out without allocating.
std::size_t model_bytes(const config::Config& cfg, const data::Task& task);

/// Token ids separated by spaces, each in [0, V); `what` names the option in errors.
std::vector<Index> parse_ids(const std::string& text, std::size_t V, const std::string& what);
}  // namespace qkv::model
