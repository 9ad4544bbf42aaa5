#pragma once
// Internal to src/io: the whole-file read shared by the checkpoint loader and the resealer.
#include <string>

namespace qkv::io::detail {
/// The bytes of the regular file at `path` (at most kMaxCheckpointBytes), read with POSIX I/O.
/// Throws IoError without the path ("cannot open: <errno text>", "is a directory, not a file",
/// "is not a regular file ...", "N bytes, more than the M this reads", "cannot read: ...").
std::string read_whole_file(const std::string& path);
}  // namespace qkv::io::detail
