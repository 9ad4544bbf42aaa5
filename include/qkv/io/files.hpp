#pragma once
/// @file
/// Files in and out, with one discipline for every command and program: inputs are regular files
/// read whole with a size limit; outputs are checked before any work and written atomically, so
/// a file a user saved is never replaced by accident nor left half-written. Errors are IoError
/// naming the path and the operating system's reason.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/io/io_error.hpp"

namespace qkv::io {

/// The largest checkpoint (and snapshots file) read: 8 GiB. Larger files are refused unread.
inline constexpr std::size_t kMaxCheckpointBytes = std::size_t(8) << 30;
/// The largest text file read as a config, a sweep or a request: 16 MiB.
inline constexpr std::size_t kMaxTextFileBytes = std::size_t(16) << 20;

/// `path` names an existing regular file that can be read; else IoError
/// "<what> <path>: <reason>" (no such file, permission denied, "is a directory, not a file",
/// "is not a regular file (a device, a pipe or a socket)"). `what` says what the file is for
/// ("checkpoint", "config").
void check_input_file(const std::string& path, const std::string& what);

/// Physical memory of this machine in bytes (sysconf), 0 if unknown: the budget a caller passes
/// to the checks that refuse work that cannot fit (config::load_config, model::load_model).
std::size_t physical_memory_bytes();

/// The bytes of the regular file at `path` (check_input_file first), at most `max_bytes` of them:
/// IoError "<what> <path>: N bytes, more than the M this reads" otherwise, before reading it.
std::string read_file(const std::string& path, std::size_t max_bytes, const std::string& what);

/// Before any work: can `path` be written as the output of a command? Throws IoError naming
/// `flag` (e.g. "--out") and `path` when it is empty, a directory, an existing file that is not a
/// regular file (a device, a pipe), the same file as one of `inputs` (compared by device and
/// inode, so other spellings and links are caught), or when its directory does not exist or is
/// not a directory.
void check_output_path(const std::string& path, const std::vector<std::string>& inputs, const std::string& flag);

/// Write `bytes` to `path` atomically: a temporary file "<path>.tmp-<pid>-<n>" in the same
/// directory, flushed and fsync'ed, then renamed over `path`. A reader sees the old file or the
/// new one, never a mix; on failure the temporary file is removed, `path` is untouched, and
/// IoError says "cannot write <path>: <reason>" (the disk is full, the directory is not
/// writable, ...). Refuses (IoError) to replace a directory or a file that is not regular.
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace qkv::io
