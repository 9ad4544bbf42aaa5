#pragma once
/// @file
/// Private to src/io: HDF5 stays behind qkv/io/checkpoint.hpp, so that no public header needs
/// HDF5's include path.
/// Small RAII layer over the HDF5 C API: owned identifiers, groups that remember creation
/// order, string/number attributes (checked before they are read), n-d datasets, and errors that
/// carry HDF5's own reason.
/// Every failing call throws IoError; nothing is printed (HDF5's automatic error printing is
/// switched off by quiet(), which every entry point calls).

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qkv/io/io_error.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::io {

namespace h5 {

/// Switch off HDF5's printing of error stacks (idempotent).
void quiet();
/// The innermost messages of HDF5's current error stack (e.g. "unable to open file ...
/// errno = 2, error message = 'No such file or directory'"); "" if the stack is empty.
std::string last_error();

/// An owned HDF5 identifier, closed by the matching H5*close. Move-only.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  /// Takes `id`; throws IoError("<what>: <last_error()>") if id < 0.
  Handle(hid_t id, Closer close, const std::string& what);
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  /// Close now and report failure (the destructor ignores errors; a file's final close is
  /// where HDF5 writes its metadata, so the writer must check it).
  void close(const std::string& what);

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

/// Throws IoError("<what>: <last_error()>") when status < 0.
void check(herr_t status, const std::string& what);

/// Open `image` (the bytes of an HDF5 file) read-only, from memory, as HDF5's core driver: HDF5
/// reads these bytes and never the disk (`name` is only what its messages call the file). The
/// image moves into HDF5's keeping and is freed when the file and every property list holding it
/// are closed; HDF5 makes no copy of it (file-image callbacks, as H5LTopen_file_image with
/// H5LT_FILE_IMAGE_DONT_COPY). Throws IoError("<what>: <last_error()>") when HDF5 cannot open it.
Handle open_image(std::string image, const std::string& name, const std::string& what);

/// A child group whose links and attributes keep creation order (so names read back in the
/// order they were written).
Handle create_group(hid_t parent, const std::string& name);
/// Open a child group / dataset; throws IoError naming `path` if it is missing or not that kind.
Handle open_group(hid_t parent, const std::string& name, const std::string& path);
Handle open_dataset(hid_t parent, const std::string& name, const std::string& path);

enum class Kind { Group, Dataset, Other };
/// Children of a group in creation order when tracked, else in name order.
std::vector<std::pair<std::string, Kind>> children(hid_t group);
/// Attribute names of an object in creation order when tracked, else in name order.
std::vector<std::string> attribute_names(hid_t object);
/// Whether `object` has attribute `name`; throws IoError naming `path` when HDF5 cannot decode
/// the object's attributes (a damaged file), rather than answering "no".
bool has_attribute(hid_t object, const std::string& name, const std::string& path);

/// The longest string qkv reads back (a config text is a few KiB); the writer refuses longer ones.
inline constexpr std::size_t kMaxStringBytes = std::size_t(64) << 20;

/// Scalar attributes. A string is stored as a FIXED-length string of its own byte count (at least
/// 1), NUL-padded, UTF-8 (h5py reads it as numpy bytes). Never variable-length: HDF5 1.10 reads
/// damaged variable-length strings with 4 GiB allocations and overlapping memcpy (docs/reliability.md).
void write_attribute(hid_t object, const std::string& name, const std::string& value);
void write_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_attribute(hid_t object, const std::string& name, double value);
/// Read a scalar attribute; `path` names the object in errors. Every check happens before HDF5
/// reads or converts a byte: strings must be one fixed-length string (a variable-length string is
/// refused, never read) of at most kMaxStringBytes and at most the file's size; numbers must be
/// one integer of 1 to 8 bytes (read_int) or one integer or 4/8-byte float (read_double).
/// Trailing NUL padding is dropped (for NULLTERM strings: everything from the first NUL).
std::string read_string_attribute(hid_t object, const std::string& name, const std::string& path);
std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& path);
double read_double_attribute(hid_t object, const std::string& name, const std::string& path);

/// A scalar fixed-length string dataset (stored like a string attribute).
void write_string_dataset(hid_t parent, const std::string& name, const std::string& value);
/// Reads a scalar fixed-length string dataset, with the checks of read_string_attribute plus
/// dataset_info's stored-bytes check; a variable-length string is refused, never read.
std::string read_string_dataset(hid_t dataset, const std::string& path);

/// What a datatype is, for error messages: "a variable-length string", "a fixed-length string of
/// 14 bytes", "an integer of 8 bytes", "a float of 4 bytes", "a compound", ...
std::string type_text(hid_t type);

/// An n-d dataset of `shape` (rank 0: scalar dataspace) stored as `file_type`, written from
/// `data` in `mem_type` (row-major).
void write_dataset(hid_t parent, const std::string& name, hid_t file_type, hid_t mem_type, const Shape& shape,
                   const void* data);

/// What a dataset holds.
struct DatasetInfo {
  Shape shape;
  H5T_class_t type_class = H5T_NO_CLASS;
  std::size_t type_size = 0;
  bool is_signed = false;
  bool is_bool = false;  ///< h5py's boolean (an 8-bit enum FALSE = 0, TRUE = 1): type_class H5T_INTEGER
  std::string dtype;  ///< "float32", "float64", "int64", "uint64", "bool", "string", ...
};
/// Shape and type. Also checks that the dataset is contiguous or compact and that its stored bytes
/// cover the shape, so a damaged size gives an IoError rather than a huge allocation by the
/// caller or a read past HDF5's own buffer; chunked and virtual datasets are refused.
DatasetInfo dataset_info(hid_t dataset, const std::string& path);
/// True for h5py's (and PyTables') boolean type: a 1-byte enum of FALSE = 0 and TRUE = 1.
bool is_bool_enum(hid_t type);
/// Read the whole dataset converted to `mem_type` (a boolean dataset to 0 / 1; other values in
/// one are an IoError) into `out` (numel(shape) elements).
void read_dataset(hid_t dataset, hid_t mem_type, void* out, const std::string& path);

}  // namespace h5
}  // namespace qkv::io
