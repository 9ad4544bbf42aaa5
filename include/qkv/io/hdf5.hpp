#pragma once
/// @file
/// Small RAII layer over the HDF5 C API: owned identifiers, groups that remember creation
/// order, string/number attributes, n-d datasets, and errors that carry HDF5's own reason.
/// Every failing call throws IoError; nothing is printed (HDF5's automatic error printing is
/// switched off by quiet(), which every entry point calls).

#include <hdf5.h>

#include <string>
#include <utility>
#include <vector>

#include "qkv/tensor/tensor.hpp"

namespace qkv::io {

/// A file that cannot be written or read, or whose contents are not what qkv expects.
struct IoError : Error {
  using Error::Error;
};

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
bool has_attribute(hid_t object, const std::string& name);

/// Scalar attributes. Strings are variable-length UTF-8 (h5py reads them as str).
void write_attribute(hid_t object, const std::string& name, const std::string& value);
void write_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_attribute(hid_t object, const std::string& name, double value);
/// Read a scalar attribute; `path` names the object in errors.
std::string read_string_attribute(hid_t object, const std::string& name, const std::string& path);
std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& path);
double read_double_attribute(hid_t object, const std::string& name, const std::string& path);

/// A scalar variable-length UTF-8 string dataset.
void write_string_dataset(hid_t parent, const std::string& name, const std::string& value);
/// Reads a scalar string dataset (variable or fixed length).
std::string read_string_dataset(hid_t dataset, const std::string& path);

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
  std::string dtype;  ///< "float32", "float64", "int64", "uint64", "string", ...
};
/// Shape and type; for contiguous storage also checks that the stored bytes cover the shape, so a
/// damaged size gives an IoError rather than a huge allocation by the caller.
DatasetInfo dataset_info(hid_t dataset, const std::string& path);
/// Read the whole dataset converted to `mem_type` into `out` (numel(shape) elements).
void read_dataset(hid_t dataset, hid_t mem_type, void* out, const std::string& path);

}  // namespace h5
}  // namespace qkv::io
