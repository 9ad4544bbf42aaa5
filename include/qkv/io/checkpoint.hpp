#pragma once
/// @file
/// Checkpoints: one HDF5 file holding everything needed to resume a run exactly, readable by
/// h5py/h5dump. Layout (docs/checkpoint.md has the details):
///
///     /                    attributes format="qkv-checkpoint", format_version, qkv_version, step
///     /config              string: the resolved YAML config
///
/// Every string (attribute or dataset) is a fixed-length UTF-8 string of its own byte count.
///     /model/<dotted.name> float32 parameter tensors, in registration order
///     /optimizer           attribute step; /optimizer/<buffer>/<dotted.name> float32 tensors
///     /rng/<name>          uint64[2]: (seed, offset) of each generator
///     /train               float64 attributes (best_accuracy, data_position, ...)
///     /metrics/<column>    float64[n] logged history

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/io/hdf5.hpp"
#include "qkv/nn/module.hpp"

namespace qkv::io {

/// Bumped whenever the layout changes incompatibly; load_checkpoint refuses other versions.
/// 2: every string fixed-length (1: variable-length; scripts/convert_checkpoint.py converts 1 to 2).
inline constexpr int kCheckpointVersion = 2;
/// Value of the root attribute `format`.
inline constexpr const char* kCheckpointFormat = "qkv-checkpoint";

struct Checkpoint {
  std::int64_t step = 0;
  std::string config_yaml;  ///< the resolved config text (config::to_yaml)
  nn::StateDict<float> model;  ///< -> /model/<dotted.name>
  std::int64_t optimizer_step = 0;
  /// Names are "<buffer>/<dotted.name>" (e.g. "exp_avg/blocks.0.attn.w_q.weight") ->
  /// /optimizer/<buffer>/<dotted.name>. Read back grouped by buffer, in creation order.
  nn::StateDict<float> optimizer;
  std::vector<std::pair<std::string, std::array<std::uint64_t, 2>>> rng;  ///< -> /rng/<name> (seed, offset)
  std::vector<std::pair<std::string, double>> scalars;  ///< -> attributes of /train
  std::vector<std::pair<std::string, std::vector<double>>> metrics;  ///< -> /metrics/<column>
};

/// Write atomically: everything goes to "<path>.tmp-<pid>", which is flushed, closed and
/// fsync'ed, then rename()d over `path`. On any failure the temporary file is removed, a
/// previous file at `path` is untouched, and IoError says why (e.g. the directory does not exist,
/// is not writable, or the disk is full).
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

/// Read a checkpoint. Checks that the file is HDF5, that the integer root attribute format_version
/// == kCheckpointVersion (read before anything else; the error says found vs supported, and for 1
/// how to convert), then that the root attribute format is "qkv-checkpoint". Every error is an
/// IoError naming `path` and the missing or bad object; truncated or garbage files give errors,
/// never crashes. Strings are checked before they are read (h5::read_string_attribute): a
/// variable-length string is refused without being read.
Checkpoint load_checkpoint(const std::string& path);

/// Compare the model tensors of a checkpoint (`found`) with a model's state (`expected`): names
/// and shapes. Throws ValueError naming `path` and listing every missing, unexpected or
/// differently shaped tensor.
void check_compatible(const nn::StateDict<float>& expected, const nn::StateDict<float>& found,
                      const std::string& path);

/// A human-readable listing of any HDF5 file (for `qkv inspect`): every group and dataset by
/// full path with dtype and shape, min/max/mean/std of numeric datasets (the values of small
/// integer ones), every attribute, and the stored config text. Variable-length strings are shown
/// as unreadable, not read; a format_version other than kCheckpointVersion adds a note.
std::string inspect(const std::string& path);

namespace testing {
/// Test hook: called by save_checkpoint at its stages ("written": all objects written, file
/// still open; "renaming": temp file closed and synced, just before rename). Throwing from it
/// simulates a failure at that point. Pass nullptr to remove.
void set_save_hook(std::function<void(const std::string& stage)> hook);
}  // namespace testing

}  // namespace qkv::io
