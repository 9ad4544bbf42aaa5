#pragma once
// Internal to src/io: the whole-file read shared by the checkpoint loader and the resealer.
#include <string>

namespace qkv::io::detail {
/// The bytes of the file at `path`, read with POSIX I/O. Throws IoError without the path
/// ("cannot open: <errno text>", "is a directory, not a checkpoint file", "cannot read: ...").
std::string read_whole_file(const std::string& path);
}  // namespace qkv::io::detail
