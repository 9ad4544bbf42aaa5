#pragma once
/// @file
/// Checkpoints: one HDF5 file holding everything needed to resume a run exactly, readable by
/// h5py/h5dump. Layout (docs/checkpoint.md has the details):
///
///     bytes 0..511         HDF5 user block (skipped by HDF5, h5py, h5dump) holding qkv's text
///                          header: magic, format_version, file length, CRC-64/XZ of bytes 512..end
///     /                    attributes format="qkv-checkpoint", format_version, qkv_version, step
///     /config              string: the resolved YAML config
///
/// Every string (attribute or dataset) is a fixed-length UTF-8 string of its own byte count.
///     /model/<dotted.name> float32 parameter tensors, in registration order
///     /optimizer           attribute step; /optimizer/<buffer>/<dotted.name> float32 tensors
///     /rng/<name>          uint64[2]: (seed, offset) of each generator
///     /train               float64 attributes (best_accuracy, data_position, ...)
///     /metrics/<column>    float64[n] logged history
///     /data                text models only: attribute tokenizer ("byte" | "char"), dataset
///                          vocab (uint32 code points of the char vocabulary, in id order)
///     /compiled            compiled programs only (qkv compile): one string dataset per entry of
///                          Checkpoint::compiled (model/compiled.hpp reads them)

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/io/io_error.hpp"
#include "qkv/tensor/state_dict.hpp"

namespace qkv::io {

/// Bumped whenever the layout changes incompatibly; load_checkpoint refuses other versions.
/// 2: every string fixed-length, and a 512-byte header with a whole-file checksum (1: variable-length
/// strings, no header; scripts/convert_checkpoint.py converts 1 to 2).
inline constexpr int kCheckpointVersion = 2;
/// Value of the root attribute `format`, and the first line of the header.
inline constexpr const char* kCheckpointFormat = "qkv-checkpoint";
/// Size of the HDF5 user block that holds the header; the HDF5 file proper starts after it.
inline constexpr std::size_t kCheckpointHeaderBytes = 512;

/// CRC-64/XZ (also called CRC-64/GO-ECMA): ECMA-182 polynomial 0x42F0E1EBA9EA3693, reflected,
/// initial value and final xor all ones; the same checksum as xz's `--check=crc64` and Python's
/// `lzma` CRC64 check. checkpoint_checksum("123456789", 9) == 0x995DC9BBDF1939FA.
std::uint64_t checkpoint_checksum(const void* data, std::size_t size);

/// The 512-byte header for a file of `file_bytes` bytes (header included) whose bytes after the
/// header have checksum `crc`. Text lines, then NUL padding:
///
///     qkv-checkpoint
///     format_version 2
///     bytes <file_bytes, decimal>
///     crc64-xz <crc, 16 lowercase hex digits>
///     # one comment line: what the checksum covers, how to reseal
std::string checkpoint_header(std::uint64_t file_bytes, std::uint64_t crc);

/// Checks the header of a whole file `image` (the file named `path`, for messages) before any
/// HDF5 call: the magic line, the header's format_version, the length ("truncated: N bytes,
/// header says M") and the checksum ("checksum mismatch: ..."). Throws IoError (not prefixed
/// with the path: callers add it); a file without the header gets "not a qkv checkpoint (no qkv
/// header in the first 512 bytes)" plus a hint when it is an HDF5 file.
void verify_checkpoint_image(const std::string& image, const std::string& path);

/// Recomputes the header of the file at `path` in place (atomically: temp file, fsync, rename),
/// for a checkpoint edited on purpose (e.g. with h5py, which keeps the user block) or a crafted
/// test input. A file that starts with the HDF5 signature instead (no user block) gets a header
/// block put in front; HDF5 finds its superblock at byte 512 and reads it as before. Anything
/// else is refused with an IoError. Trusts the file: it does not open it with HDF5.
void seal_checkpoint_file(const std::string& path);

struct Checkpoint {
  std::int64_t step = 0;
  std::string config_yaml;  ///< the resolved config text (config::to_yaml)
  StateDict<float> model;  ///< -> /model/<dotted.name>
  std::int64_t optimizer_step = 0;
  /// Names are "<buffer>/<dotted.name>" (e.g. "exp_avg/blocks.0.attn.w_q.weight") ->
  /// /optimizer/<buffer>/<dotted.name>. Read back grouped by buffer, in creation order.
  StateDict<float> optimizer;
  std::vector<std::pair<std::string, std::array<std::uint64_t, 2>>> rng;  ///< -> /rng/<name> (seed, offset)
  std::vector<std::pair<std::string, double>> scalars;  ///< -> attributes of /train
  std::vector<std::pair<std::string, std::vector<double>>> metrics;  ///< -> /metrics/<column>
  /// Text models: the tokenizer ("byte" or "char") -> attribute tokenizer of /data, and the char
  /// vocabulary's code points -> /data/vocab (uint32; empty for byte). "" (no /data): not a text model.
  std::string tokenizer;
  std::vector<std::uint32_t> vocab;
  /// Compiled programs: named texts -> /compiled/<name> (fixed-length strings, in this order);
  /// empty (no /compiled) for every other model. model::compiled_info reads them.
  std::vector<std::pair<std::string, std::string>> compiled;
};

/// Write atomically: everything goes to "<path>.tmp-<pid>", which is flushed, closed and
/// fsync'ed, then rename()d over `path`. On any failure the temporary file is removed, a
/// previous file at `path` is untouched, and IoError says why (e.g. the directory does not exist,
/// is not writable, or the disk is full).
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

/// Read a checkpoint. Reads the whole file once with POSIX I/O and verifies its header and checksum
/// (verify_checkpoint_image) before HDF5 sees a byte, then opens the verified bytes from memory
/// (HDF5 core driver), so nothing can change between the check and the parse. Then checks that
/// the integer root attribute format_version == kCheckpointVersion (read before anything else; the error says found vs supported, and for 1
/// how to convert), then that the root attribute format is "qkv-checkpoint". Every error is an
/// IoError naming `path` and the missing or bad object; truncated or garbage files give errors,
/// never crashes. Strings are checked before they are read (h5::read_string_attribute): a
/// variable-length string is refused without being read.
Checkpoint load_checkpoint(const std::string& path);

/// Compare the model tensors of a checkpoint (`found`) with a model's state (`expected`): names
/// and shapes. Throws ValueError naming `path` and listing every missing, unexpected or
/// differently shaped tensor.
void check_compatible(const StateDict<float>& expected, const StateDict<float>& found,
                      const std::string& path);

/// A human-readable listing of any HDF5 file (for `qkv inspect`): every group and dataset by
/// full path with dtype and shape, min/max/mean/std of numeric datasets (the values of small
/// integer ones), every attribute, and the stored config text. Variable-length strings are shown
/// as unreadable, not read; a format_version other than kCheckpointVersion adds a note.
/// With `verify` (the default) the file must pass verify_checkpoint_image first, as for
/// load_checkpoint; `verify = false` lists any HDF5 file (e.g. a version-1 checkpoint, which has
/// no header) and must only be used on trusted files: HDF5 1.10.8 can crash on crafted ones.
std::string inspect(const std::string& path, bool verify = true);

/// A boolean mask from any HDF5 file, e.g. one written with h5py for qkv: dataset `dataset`
/// ("pad" or "masks/pad", rank <= 4) holding h5py booleans (numpy bool, stored as a 1-byte enum
/// FALSE = 0, TRUE = 1) or integers that are all 0 or 1; the values are taken as they are (pass
/// the result to KeyPaddingMask::ignore_where or AttentionMask::attend_where to say what they
/// mean). No qkv header is needed, so the file must be trusted, as for inspect(path, false).
/// Throws IoError naming the file, the dataset and what was found (another type, a value
/// other than 0 / 1, a missing dataset).
Mask load_mask(const std::string& path, const std::string& dataset);

}  // namespace qkv::io
