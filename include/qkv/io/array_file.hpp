#pragma once
/// @file
/// A file of named arrays and strings, for formats of other layers (training snapshots): groups
/// by path, datasets of int64, float32 or float64 numbers or of fixed-length UTF-8 strings, and
/// string or integer attributes. On disk an HDF5 file (h5py reads it) behind a 512-byte text
/// header in the HDF5 user block, checked before HDF5 parses a byte:
///
///     <format>
///     version <N>
///     bytes <file length>
///     crc64-xz <CRC-64/XZ of bytes 512 to the end>
///
/// Written atomically (temporary file, fsync, rename); read whole with a size limit.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "qkv/io/io_error.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::io {

/// Strings of any shape, row-major (stored fixed-length: the longest string's bytes).
struct StringArray {
  Shape shape;
  std::vector<std::string> values;
};

/// One dataset's contents.
using ArrayValue = std::variant<Array<std::int64_t>, Array<float>, Array<double>, StringArray>;

struct ArrayFile {
  std::string format;        ///< the header's first line and the root attribute "format"
  std::int64_t version = 1;  ///< the header's version and the root attribute "version"
  /// Datasets by path ("steps", "layers/0/weights"), in writing order; groups are made as paths
  /// need them.
  std::vector<std::pair<std::string, ArrayValue>> datasets;
  /// Attributes: (object path, "" for the root; name; value).
  struct Attribute {
    std::string object, name;
    std::variant<std::string, std::int64_t> value;
  };
  std::vector<Attribute> attributes;

  /// The dataset at `path`, or nullptr.
  const ArrayValue* find(const std::string& path) const;
  /// The dataset at `path` holding a T; IoError "/<path>: missing" or "/<path>: expected <what>,
  /// found <its type and shape>" otherwise.
  template <class T>
  const T& get(const std::string& path, const std::string& what) const;
  /// A string attribute; IoError naming the object and attribute when missing or not a string.
  std::string string_attribute(const std::string& object, const std::string& name) const;
  /// The groups directly below `path` ("layers" -> "0", "1", ...), in writing order.
  std::vector<std::string> children(const std::string& path) const;
};

/// "int64 (2, 3)", "strings (4)" ...: a dataset's type and shape, for messages.
std::string describe(const ArrayValue& value);

/// The longest string written or read back: 4096 bytes.
inline constexpr std::size_t kMaxArrayStringBytes = 4096;

/// Write `file` to `path` atomically. IoError naming the path and the reason (a string longer
/// than kMaxArrayStringBytes, a path used twice, the disk full, ...).
void save_array_file(const std::string& path, const ArrayFile& file);
/// Read a file save_array_file wrote: the header (format `format`, version `version`), length
/// and checksum first, then every dataset and attribute. IoError "<path>: <what>" naming the
/// object that is damaged or of another type.
ArrayFile load_array_file(const std::string& path, const std::string& format, std::int64_t version);

extern template const Array<std::int64_t>& ArrayFile::get(const std::string&, const std::string&) const;
extern template const Array<float>& ArrayFile::get(const std::string&, const std::string&) const;
extern template const Array<double>& ArrayFile::get(const std::string&, const std::string&) const;
extern template const StringArray& ArrayFile::get(const std::string&, const std::string&) const;

}  // namespace qkv::io
