#include "hdf5.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

namespace qkv::io::h5 {

void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string last_error() {
  // Walk from the API call down to the innermost cause; the two innermost descriptions carry
  // the useful part (e.g. the errno text for a failed open or write).
  std::vector<std::string> descs;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        if (e->desc && *e->desc) static_cast<std::vector<std::string>*>(data)->push_back(e->desc);
        return 0;
      },
      &descs);
  H5Eclear2(H5E_DEFAULT);
  if (descs.empty()) return "";
  std::string out = descs.front();
  if (descs.size() > 1) out += " (" + descs.back() + ")";
  return out;
}

Handle::Handle(hid_t id, Closer close, const std::string& what) : id_(id), close_(close) {
  if (id < 0) {
    id_ = -1;
    throw IoError(what + ": " + last_error());
  }
}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0) close_(id_);
    id_ = std::exchange(o.id_, -1);
    close_ = o.close_;
  }
  return *this;
}

Handle::~Handle() {
  if (id_ >= 0) close_(id_);
}

void Handle::close(const std::string& what) {
  hid_t id = std::exchange(id_, -1);
  if (id >= 0) check(close_(id), what);
}

void check(herr_t status, const std::string& what) {
  if (status < 0) throw IoError(what + ": " + last_error());
}

namespace {

// The image HDF5 reads. HDF5 asks for a buffer of the image's size when the image is set on a
// property list, when the list is copied and when the file opens; each time it is handed these
// bytes (`users` counts them, image_free gives them back), and the "copy" that follows is of the
// buffer onto itself. The lists hold the struct itself through udata_copy and udata_free
// (`refs`); the core driver keeps using the bytes after its property list is closed, until the
// file closes, without a reference of its own. So the bytes go when neither count is left, as in
// H5LT's file images. Nothing writes (read-only), so nothing reallocates.
struct SharedImage {
  std::string bytes;
  int refs = 1;   // udata references: ours at first, then the property lists'
  int users = 0;  // buffers handed out and not given back
};

void release_if_unused(SharedImage* im) {
  if (im->refs == 0 && im->users == 0) delete im;
}
void* image_malloc(std::size_t size, H5FD_file_image_op_t, void* udata) {
  auto* im = static_cast<SharedImage*>(udata);
  if (size != im->bytes.size()) return nullptr;
  ++im->users;
  return im->bytes.data();
}
void* image_memcpy(void* dest, const void* src, std::size_t size, H5FD_file_image_op_t, void*) {
  if (dest != src) std::memcpy(dest, src, size);  // H5Pget_file_image into a buffer of the caller's
  return dest;
}
void* image_realloc(void*, std::size_t, H5FD_file_image_op_t, void*) { return nullptr; }
herr_t image_free(void*, H5FD_file_image_op_t, void* udata) {
  auto* im = static_cast<SharedImage*>(udata);
  --im->users;
  release_if_unused(im);
  return 0;
}
void* udata_copy(void* udata) {
  ++static_cast<SharedImage*>(udata)->refs;
  return udata;
}
herr_t udata_free(void* udata) {
  auto* im = static_cast<SharedImage*>(udata);
  --im->refs;
  release_if_unused(im);
  return 0;
}

}  // namespace

Handle open_image(std::string image, const std::string& name, const std::string& what) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate");
  check(H5Pset_fapl_core(fapl, std::size_t(1) << 20, false), "core driver");
  auto* shared = new SharedImage{std::move(image)};
  H5FD_file_image_callbacks_t callbacks{image_malloc, image_memcpy, image_realloc, image_free,
                                        udata_copy,   udata_free,   shared};
  herr_t status = H5Pset_file_image_callbacks(fapl, &callbacks);
  if (status >= 0) status = H5Pset_file_image(fapl, shared->bytes.data(), shared->bytes.size());
  hid_t file = status >= 0 ? H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl) : H5I_INVALID_HID;
  const std::string reason = file < 0 ? last_error() : "";
  fapl = Handle();     // the property list gives back what it holds
  udata_free(shared);  // and so do we: from here the open file alone keeps the image
  if (status < 0) throw IoError("cannot hand the file image to HDF5: " + reason);
  if (file < 0) throw IoError(what + ": " + reason);
  return Handle(file, H5Fclose, what);
}

Handle create_group(hid_t parent, const std::string& name) {
  Handle gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "H5Pcreate");
  check(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "link creation order");
  check(H5Pset_attr_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "attribute creation order");
  return Handle(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose,
                "cannot create group '" + name + "'");
}

namespace {

bool link_exists(hid_t parent, const std::string& name) {
  htri_t e = H5Lexists(parent, name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

H5I_type_t object_type(hid_t parent, const std::string& name) {
  hid_t obj = H5Oopen(parent, name.c_str(), H5P_DEFAULT);
  if (obj < 0) {
    H5Eclear2(H5E_DEFAULT);
    return H5I_BADID;
  }
  H5I_type_t t = H5Iget_type(obj);
  H5Oclose(obj);
  return t;
}

// Creation order if the object's creation property list tracks it; name order otherwise.
template <class GetPlist>
H5_index_t index_for(hid_t object, GetPlist get_plist, bool links) {
  hid_t plist = get_plist(object);
  if (plist < 0) {
    H5Eclear2(H5E_DEFAULT);
    return H5_INDEX_NAME;
  }
  unsigned flags = 0;
  herr_t s = links ? H5Pget_link_creation_order(plist, &flags) : H5Pget_attr_creation_order(plist, &flags);
  H5Pclose(plist);
  if (s < 0) H5Eclear2(H5E_DEFAULT);
  return s >= 0 && (flags & H5P_CRT_ORDER_TRACKED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
}

hid_t object_create_plist(hid_t object) {
  switch (H5Iget_type(object)) {
    case H5I_GROUP: return H5Gget_create_plist(object);
    case H5I_DATASET: return H5Dget_create_plist(object);
    case H5I_FILE: return H5Fget_create_plist(object);
    default: return -1;
  }
}

// A fixed-length string type of `bytes` bytes (HDF5 needs at least 1), NUL-padded, UTF-8.
Handle string_type(std::size_t bytes) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  check(H5Tset_size(t, std::max<std::size_t>(bytes, 1)), "H5Tset_size");
  check(H5Tset_strpad(t, H5T_STR_NULLPAD), "H5Tset_strpad");
  check(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

Handle scalar_space() { return Handle(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate"); }

hsize_t file_size_of(hid_t object, const std::string& what) {
  Handle file(H5Iget_file_id(object), H5Fclose, "cannot find the file of " + what);
  hsize_t size = 0;
  check(H5Fget_filesize(file, &size), "cannot read the size of the file of " + what);
  return size;
}

// Everything a string read depends on, checked from the metadata alone. A variable-length string
// is refused here, so HDF5's vlen conversion (H5T__conv_vlen), which trusts the lengths stored in
// the file (4 GiB allocations and an overlapping memcpy on damaged files, found by
// tests/fuzz/fuzz_checkpoint), never runs on a file qkv reads.
std::size_t checked_string_size(hid_t object, hid_t type, hid_t space, const std::string& what) {
  if (H5Tget_class(type) != H5T_STRING) throw IoError(what + ": expected a fixed-length string, found " + type_text(type));
  const htri_t variable = H5Tis_variable_str(type);
  if (variable < 0) throw IoError(what + ": cannot read its string type: " + last_error());
  if (variable > 0)
    throw IoError(what + " is a variable-length string; expected a fixed-length string (qkv writes every string "
                         "fixed-length and does not read variable-length ones, which HDF5 1.10 can crash on)");
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n != 1) throw IoError(what + ": expected one string, found " + std::to_string(n) + " elements");
  const std::size_t size = H5Tget_size(type);
  const hsize_t file_size = file_size_of(object, what);
  if (size == 0 || size > kMaxStringBytes || size > file_size)
    throw IoError(what + ": damaged string: it declares " + std::to_string(size) + " bytes " +
                  (size == 0 ? std::string("(expected at least 1)")
                             : size > file_size ? "in a file of " + std::to_string(file_size) + " bytes"
                                                : "(the limit is " + std::to_string(kMaxStringBytes) + ")"));
  return size;
}

// Reads the checked fixed-length string with a copy of its own type, so HDF5 converts nothing.
template <class Read>
std::string read_string(hid_t type, std::size_t size, Read read, const std::string& what) {
  Handle mem(H5Tcopy(type), H5Tclose, "H5Tcopy");
  std::string s(size, '\0');
  check(read(mem.get(), static_cast<void*>(s.data())), "cannot read " + what);
  if (H5Tget_strpad(type) == H5T_STR_NULLTERM) {
    s.resize(std::find(s.begin(), s.end(), '\0') - s.begin());
  } else {
    const char pad = H5Tget_strpad(type) == H5T_STR_SPACEPAD ? ' ' : '\0';
    while (!s.empty() && s.back() == pad) s.pop_back();
  }
  return s;
}

Handle open_attribute(hid_t object, const std::string& name, const std::string& path) {
  if (!has_attribute(object, name, path)) throw IoError("attribute '" + name + "' of " + path + " is missing");
  return Handle(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "cannot open attribute '" + name + "' of " + path);
}

void write_scalar_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t mem_type, const void* v) {
  Handle space = scalar_space();
  Handle a(H5Acreate2(object, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
           "cannot create attribute '" + name + "'");
  check(H5Awrite(a, mem_type, v), "cannot write attribute '" + name + "'");
}

}  // namespace

bool is_bool_enum(hid_t type) {
  if (H5Tget_class(type) != H5T_ENUM || H5Tget_size(type) != 1 || H5Tget_nmembers(type) != 2) return false;
  for (unsigned i = 0; i < 2; ++i) {
    char* name = H5Tget_member_name(type, i);
    std::int8_t value = -1;  // in the enum's own 1-byte base type
    const bool ok = name != nullptr && H5Tget_member_value(type, i, &value) >= 0 && (value == 0 || value == 1) &&
                    std::string(name) == (value == 1 ? "TRUE" : "FALSE");
    if (name != nullptr) H5free_memory(name);
    if (!ok) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return true;
}

namespace {

// A number is read only if it is one element of a plain integer (1-8 bytes), an h5py boolean
// (read as 0 or 1) or, for doubles, also a 4- or 8-byte float; HDF5's conversion to int64/double
// then has nothing unusual to handle.
template <class V>
V read_number_attribute(hid_t object, const std::string& name, const std::string& path, hid_t mem_type,
                        H5T_class_t want, const char* expected) {
  Handle a = open_attribute(object, name, path);
  Handle type(H5Aget_type(a), H5Tclose, "H5Aget_type");
  Handle space(H5Aget_space(a), H5Sclose, "H5Aget_space");
  const H5T_class_t c = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  const bool integer = c == H5T_INTEGER && size >= 1 && size <= 8;
  const bool real = c == H5T_FLOAT && (size == 4 || size == 8);
  const bool boolean = is_bool_enum(type);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (!(integer || boolean || (real && want == H5T_FLOAT)))
    throw IoError("attribute '" + name + "' of " + path + ": expected " + expected + ", found " + type_text(type));
  if (n != 1)
    throw IoError("attribute '" + name + "' of " + path + ": expected " + expected + ", found " + std::to_string(n) +
                  " elements");
  V v{};
  if (boolean) {
    std::uint8_t byte = 0;
    Handle native(H5Tget_native_type(type, H5T_DIR_ASCEND), H5Tclose, "H5Tget_native_type");
    check(H5Aread(a, native, &byte), "cannot read attribute '" + name + "' of " + path);
    if (byte > 1)
      throw IoError("attribute '" + name + "' of " + path + ": a boolean holding " + std::to_string(byte));
    return V(byte);
  }
  check(H5Aread(a, mem_type, &v), "cannot read attribute '" + name + "' of " + path);
  return v;
}

}  // namespace

Handle open_group(hid_t parent, const std::string& name, const std::string& path) {
  if (!link_exists(parent, name)) throw IoError("group " + path + " is missing");
  if (object_type(parent, name) != H5I_GROUP) throw IoError(path + " is not a group");
  return Handle(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), H5Gclose, "cannot open group " + path);
}

Handle open_dataset(hid_t parent, const std::string& name, const std::string& path) {
  if (!link_exists(parent, name)) throw IoError("dataset " + path + " is missing");
  if (object_type(parent, name) != H5I_DATASET) throw IoError(path + " is not a dataset");
  return Handle(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset " + path);
}

std::vector<std::pair<std::string, Kind>> children(hid_t group) {
  struct Ctx {
    std::vector<std::pair<std::string, Kind>> out;
  } ctx;
  H5_index_t index = index_for(group, object_create_plist, true);
  check(H5Literate(
            group, index, H5_ITER_INC, nullptr,
            [](hid_t g, const char* name, const H5L_info_t*, void* data) -> herr_t {
              H5I_type_t t = object_type(g, name);
              Kind k = t == H5I_GROUP ? Kind::Group : t == H5I_DATASET ? Kind::Dataset : Kind::Other;
              static_cast<Ctx*>(data)->out.emplace_back(name, k);
              return 0;
            },
            &ctx),
        "cannot list a group");
  return ctx.out;
}

std::vector<std::string> attribute_names(hid_t object) {
  std::vector<std::string> names;
  H5_index_t index = index_for(object, object_create_plist, false);
  check(H5Aiterate2(
            object, index, H5_ITER_INC, nullptr,
            [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
              static_cast<std::vector<std::string>*>(data)->push_back(name);
              return 0;
            },
            &names),
        "cannot list attributes");
  return names;
}

bool has_attribute(hid_t object, const std::string& name, const std::string& path) {
  // H5Aexists decodes the object's attribute messages: on a damaged one it fails, which is not
  // the same as "missing".
  const htri_t e = H5Aexists(object, name.c_str());
  if (e < 0) throw IoError("cannot read the attributes of " + path + " (looking for '" + name + "'): " + last_error());
  return e > 0;
}

void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  if (value.size() > kMaxStringBytes)
    throw IoError("attribute '" + name + "': a string of " + std::to_string(value.size()) + " bytes is longer than the " +
                  std::to_string(kMaxStringBytes) + " that qkv reads back");
  Handle t = string_type(value.size());
  write_scalar_attribute(object, name, t, t, value.c_str());  // c_str(): an empty string writes one NUL
}
void write_attribute(hid_t object, const std::string& name, std::int64_t value) {
  write_scalar_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}
void write_attribute(hid_t object, const std::string& name, double value) {
  write_scalar_attribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

std::string read_string_attribute(hid_t object, const std::string& name, const std::string& path) {
  Handle a = open_attribute(object, name, path);
  Handle type(H5Aget_type(a), H5Tclose, "H5Aget_type");
  Handle space(H5Aget_space(a), H5Sclose, "H5Aget_space");
  const std::string what = "attribute '" + name + "' of " + path;
  const std::size_t size = checked_string_size(a, type, space, what);
  return read_string(type, size, [&](hid_t mem, void* buf) { return H5Aread(a, mem, buf); }, what);
}

std::int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& path) {
  return read_number_attribute<std::int64_t>(object, name, path, H5T_NATIVE_INT64, H5T_INTEGER, "one integer");
}

double read_double_attribute(hid_t object, const std::string& name, const std::string& path) {
  return read_number_attribute<double>(object, name, path, H5T_NATIVE_DOUBLE, H5T_FLOAT, "one number");
}

void write_string_dataset(hid_t parent, const std::string& name, const std::string& value) {
  if (value.size() > kMaxStringBytes)
    throw IoError("dataset '" + name + "': a string of " + std::to_string(value.size()) + " bytes is longer than the " +
                  std::to_string(kMaxStringBytes) + " that qkv reads back");
  Handle t = string_type(value.size());
  Handle space = scalar_space();
  Handle d(H5Dcreate2(parent, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
           "cannot create dataset '" + name + "'");
  check(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, value.c_str()), "cannot write dataset '" + name + "'");
}

std::string read_string_dataset(hid_t dataset, const std::string& path) {
  Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + path);
  Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of " + path);
  const std::size_t size = checked_string_size(dataset, type, space, path);
  dataset_info(dataset, path);  // the stored bytes cover the declared size
  return read_string(
      type, size, [&](hid_t mem, void* buf) { return H5Dread(dataset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); }, path);
}

std::string type_text(hid_t type) {
  const H5T_class_t c = H5Tget_class(type);
  const std::string of = " of " + std::to_string(H5Tget_size(type)) + " bytes";
  switch (c) {
    case H5T_INTEGER: return "an integer" + of;
    case H5T_FLOAT: return "a float" + of;
    case H5T_STRING: return H5Tis_variable_str(type) > 0 ? "a variable-length string" : "a fixed-length string" + of;
    case H5T_COMPOUND: return "a compound";
    case H5T_ENUM: return "an enum";
    case H5T_VLEN: return "a variable-length sequence";
    case H5T_ARRAY: return "an array type";
    case H5T_OPAQUE: return "an opaque type";
    case H5T_REFERENCE: return "a reference";
    case H5T_BITFIELD: return "a bitfield";
    case H5T_TIME: return "a time";
    default: H5Eclear2(H5E_DEFAULT); return "an unreadable type";
  }
}

void write_dataset(hid_t parent, const std::string& name, hid_t file_type, hid_t mem_type, const Shape& shape,
                   const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space = shape.empty() ? scalar_space()
                               : Handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                        H5Sclose, "H5Screate_simple");
  Handle d(H5Dcreate2(parent, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
           "cannot create dataset '" + name + "'");
  if (numel(shape) > 0)
    check(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "cannot write dataset '" + name + "'");
}

DatasetInfo dataset_info(hid_t dataset, const std::string& path) {
  DatasetInfo info;
  Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of " + path);
  int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > H5S_MAX_RANK) throw IoError(path + ": bad dataspace");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "dataspace of " + path);
  info.shape.assign(dims.begin(), dims.end());
  Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + path);
  info.type_class = H5Tget_class(type);
  info.type_size = H5Tget_size(type);
  std::string bits = std::to_string(info.type_size * 8);
  if (is_bool_enum(type)) {  // h5py's numpy bool: read as the integers 0 and 1
    info.type_class = H5T_INTEGER;
    info.is_bool = true;
  }
  switch (info.type_class) {
    case H5T_FLOAT: info.dtype = "float" + bits; break;
    case H5T_INTEGER:
      info.is_signed = !info.is_bool && H5Tget_sign(type) == H5T_SGN_2;
      info.dtype = info.is_bool ? "bool" : (info.is_signed ? "int" : "uint") + bits;
      break;
    case H5T_STRING: info.dtype = "string"; break;
    default: info.dtype = "other"; break;
  }
  // Damaged metadata must give an error, not a huge allocation or a read past HDF5's buffer:
  // the bytes stored must cover the declared shape. qkv writes contiguous datasets; compact ones
  // (data inside the object header) are checked the same way (HDF5 1.10.8 reads a compact
  // dataset whose stored data is shorter than its shape from a null pointer: fuzzer input
  // regressions/checkpoint/compact-dataset-stores-no-bytes.h5). Chunked and virtual datasets,
  // whose stored size says nothing about the shape, are refused.
  double want = static_cast<double>(info.type_size);
  for (auto d : info.shape) want *= static_cast<double>(d);
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose, "cannot read the layout of " + path);
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT)
    throw IoError(path + ": stored " + (layout == H5D_CHUNKED ? "chunked" : layout == H5D_VIRTUAL ? "virtual" : "in an unknown layout") +
                  "; qkv reads contiguous (or compact) datasets");
  // The stored size of a contiguous dataset is a field of its (possibly damaged) layout message,
  // so its bytes must also lie inside the file (found by the fuzzer:
  // regressions/checkpoint/contiguous-dataset-declares-88TB.h5).
  const double stored = static_cast<double>(H5Dget_storage_size(dataset));
  const double file = static_cast<double>(file_size_of(dataset, path));
  const haddr_t offset = layout == H5D_CONTIGUOUS ? H5Dget_offset(dataset) : HADDR_UNDEF;
  if (offset == HADDR_UNDEF) H5Eclear2(H5E_DEFAULT);
  const double end = (offset == HADDR_UNDEF ? 0.0 : static_cast<double>(offset)) + want;
  if (want > 0 && (stored < want || (layout == H5D_CONTIGUOUS && end > file))) {
    char need[128];
    if (stored < want) std::snprintf(need, sizeof need, "%.0f bytes but %.0f are stored", want, stored);
    else std::snprintf(need, sizeof need, "%.0f bytes, past the end of the file (%.0f bytes)", want, file);
    throw IoError(path + ": a " + shape_str(info.shape) + " " + info.dtype + " dataset needs " + need);
  }
  return info;
}

void read_dataset(hid_t dataset, hid_t mem_type, void* out, const std::string& path) {
  Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + path);
  if (!is_bool_enum(type)) {
    check(H5Dread(dataset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), "cannot read " + path);
    return;
  }
  // HDF5 converts an enum only to another enum: read the bytes, check them, convert from uint8.
  Handle space(H5Dget_space(dataset), H5Sclose, "cannot read the dataspace of " + path);
  const std::size_t n = std::size_t(H5Sget_simple_extent_npoints(space));
  std::vector<unsigned char> buf(n * std::max<std::size_t>(1, H5Tget_size(mem_type)));
  Handle native(H5Tget_native_type(type, H5T_DIR_ASCEND), H5Tclose, "H5Tget_native_type");
  check(H5Dread(dataset, native, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "cannot read " + path);
  for (std::size_t i = 0; i < n; ++i)
    if (buf[i] > 1) throw IoError(path + ": element " + std::to_string(i) + " of a boolean dataset holds " + std::to_string(buf[i]));
  check(H5Tconvert(H5T_NATIVE_UINT8, mem_type, n, buf.data(), nullptr, H5P_DEFAULT), "cannot convert " + path);
  std::memcpy(out, buf.data(), n * H5Tget_size(mem_type));
}

}  // namespace qkv::io::h5
