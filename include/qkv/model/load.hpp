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
  std::unique_ptr<data::Dataset> data;  ///< null when loaded without data
  std::unique_ptr<TaskModel> model;
};

/// Rebuild the model of `checkpoint` (read from `path`, named so in errors). `task_overrides`:
/// "task.key=value" only (ConfigError for other keys). Without `with_data` a text model does not
/// read its corpus (the task holds the checkpoint's vocabulary only) and no Dataset is made.
/// Throws ValueError when the weights do not fit the model the config describes.
LoadedModel load_model(const io::Checkpoint& checkpoint, const std::string& path,
                       const std::vector<std::string>& task_overrides = {}, bool with_data = true);
/// The same, reading the file first (io::load_checkpoint: checksum, version, finite values).
LoadedModel load_model(const std::string& path, const std::vector<std::string>& task_overrides = {},
                       bool with_data = true);

/// Token ids separated by spaces, each in [0, V); `what` names the option in errors.
std::vector<Index> parse_ids(const std::string& text, std::size_t V, const std::string& what);
}  // namespace qkv::model
