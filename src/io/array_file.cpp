// The named-array file (qkv/io/array_file.hpp): HDF5 built in memory behind qkv's checksummed
// header, written with write_file_atomic, read from verified bytes (HDF5 core driver).
#include "qkv/io/array_file.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "file_bytes.hpp"
#include "hdf5.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/io/files.hpp"

namespace qkv::io {
namespace {

using h5::Handle;
constexpr std::size_t kHeaderBytes = 512;

std::string header_text(const std::string& format, std::int64_t version, std::uint64_t file_bytes, std::uint64_t crc) {
  char text[kHeaderBytes] = {};
  std::snprintf(text, sizeof text,
                "%s\nversion %lld\nbytes %llu\ncrc64-xz %016llx\n# CRC-64/XZ of bytes 512 to the end (an HDF5 file "
                "with a 512-byte user block), checked before qkv reads the file\n",
                format.c_str(), (long long)version, (unsigned long long)file_bytes, (unsigned long long)crc);
  return std::string(text, sizeof text);
}

void verify_header(const std::string& image, const std::string& format, std::int64_t expected_version) {
  const std::string magic = format + "\n";
  if (image.compare(0, magic.size(), magic) != 0)
    throw IoError("not a " + format + " file (no '" + format + "' header in the first " + std::to_string(kHeaderBytes) +
                  " bytes" + (image.empty() ? "; the file is empty" : "") + ")");
  if (image.size() < kHeaderBytes)
    throw IoError("truncated: " + std::to_string(image.size()) + " bytes, shorter than the " +
                  std::to_string(kHeaderBytes) + "-byte header");
  char text[kHeaderBytes + 1] = {};
  std::memcpy(text, image.data(), kHeaderBytes);
  long long version = 0;
  unsigned long long bytes = 0, crc = 0;
  if (std::sscanf(text + magic.size(), "version %lld\nbytes %llu\ncrc64-xz %16llx\n", &version, &bytes, &crc) != 3)
    throw IoError("damaged header: expected lines 'version N', 'bytes N', 'crc64-xz X' after the first");
  if (version != expected_version)
    throw IoError(format + " version " + std::to_string(version) + " is not supported: this qkv reads version " +
                  std::to_string(expected_version));
  if (bytes != image.size())
    throw IoError((image.size() < bytes ? "truncated: " : "damaged: ") + std::to_string(image.size()) +
                  " bytes, the header says " + std::to_string(bytes));
  const std::uint64_t found = checkpoint_checksum(image.data() + kHeaderBytes, image.size() - kHeaderBytes);
  if (found != crc) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "checksum mismatch: the header says %016llx, the bytes after it give %016llx (damaged)",
                  crc, (unsigned long long)found);
    throw IoError(msg);
  }
}

// ---- writing ----

Handle fixed_string_type(std::size_t bytes) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  h5::check(H5Tset_size(t, std::max<std::size_t>(bytes, 1)), "H5Tset_size");
  h5::check(H5Tset_strpad(t, H5T_STR_NULLPAD), "H5Tset_strpad");
  h5::check(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

struct Tree {
  Handle root;
  std::vector<std::pair<std::string, Handle>> groups;  // path -> open group
  hid_t group(const std::string& path) {
    if (path.empty()) return root;
    for (auto& [p, g] : groups)
      if (p == path) return g;
    const auto slash = path.rfind('/');
    const hid_t parent = group(slash == std::string::npos ? "" : path.substr(0, slash));
    groups.emplace_back(path, h5::create_group(parent, slash == std::string::npos ? path : path.substr(slash + 1)));
    return groups.back().second;
  }
};

std::pair<std::string, std::string> split(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {"", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

template <class T>
Shape shape_of(const Array<T>& a) {
  return Shape(a.shape().begin(), a.shape().end());
}

void write_value(hid_t parent, const std::string& name, const ArrayValue& v) {
  if (auto* a = std::get_if<Array<std::int64_t>>(&v)) {
    h5::write_dataset(parent, name, H5T_STD_I64LE, H5T_NATIVE_INT64, shape_of(*a), a->data());
  } else if (auto* f = std::get_if<Array<float>>(&v)) {
    h5::write_dataset(parent, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, shape_of(*f), f->data());
  } else if (auto* d = std::get_if<Array<double>>(&v)) {
    h5::write_dataset(parent, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, shape_of(*d), d->data());
  } else {
    const StringArray& s = std::get<StringArray>(v);
    if (s.values.size() != numel(s.shape))
      throw IoError(name + ": " + std::to_string(s.values.size()) + " strings for shape " + shape_str(s.shape));
    std::size_t width = 1;
    for (auto& x : s.values) width = std::max(width, x.size());
    if (width > kMaxArrayStringBytes)
      throw IoError(name + ": a string of " + std::to_string(width) + " bytes is longer than the " +
                    std::to_string(kMaxArrayStringBytes) + " read back");
    std::string packed(s.values.size() * width, '\0');
    for (std::size_t i = 0; i < s.values.size(); ++i) s.values[i].copy(&packed[i * width], width);
    Handle type = fixed_string_type(width);
    h5::write_dataset(parent, name, type, type, s.shape, packed.data());
  }
}

std::string build_image(const std::string& name, const ArrayFile& f) {
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "H5Pcreate");
  h5::check(H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "link creation order");
  h5::check(H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "attribute creation order");
  h5::check(H5Pset_userblock(fcpl, kHeaderBytes), "user block");
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate");
  h5::check(H5Pset_fapl_core(fapl, std::size_t(1) << 20, false), "core driver");  // memory only, no file
  Handle file(H5Fcreate(("qkv-array-image:" + name).c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose, "cannot create the image");
  {
    Tree tree{Handle(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open /"), {}};
    h5::write_attribute(tree.root, "format", f.format);
    h5::write_attribute(tree.root, "version", f.version);
    for (auto& [path, value] : f.datasets) {
      const auto [dir, leaf] = split(path);
      write_value(tree.group(dir), leaf, value);
    }
    for (auto& a : f.attributes) {
      const hid_t object = tree.group(a.object);
      if (auto* s = std::get_if<std::string>(&a.value)) h5::write_attribute(object, a.name, *s);
      else h5::write_attribute(object, a.name, std::get<std::int64_t>(a.value));
    }
  }
  h5::check(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush the image");
  const ssize_t size = H5Fget_file_image(file, nullptr, 0);
  if (size <= 0) throw IoError("cannot get the HDF5 image: " + h5::last_error());
  std::string image(std::size_t(size), '\0');
  if (H5Fget_file_image(file, image.data(), image.size()) != size) throw IoError("cannot get the HDF5 image: " + h5::last_error());
  file.close("cannot close the image");
  // HDF5 1.10.8 leaves the user block out of the image (its superblock still declares it).
  if (image.compare(0, 4, "\x89HDF") == 0) image.insert(0, kHeaderBytes, '\0');
  if (image.size() < kHeaderBytes + 8 || image.compare(kHeaderBytes, 4, "\x89HDF") != 0)
    throw IoError("the HDF5 image does not start after the " + std::to_string(kHeaderBytes) + "-byte user block");
  return image;
}

// ---- reading ----

ArrayValue read_value(hid_t dataset, const std::string& path) {
  const h5::DatasetInfo info = h5::dataset_info(dataset, path);  // the stored bytes cover the shape
  if (info.type_class == H5T_INTEGER && !info.is_bool && info.type_size >= 1 && info.type_size <= 8) {
    Array<std::int64_t> a = Array<std::int64_t>::from_shape(info.shape);
    if (a.size()) h5::read_dataset(dataset, H5T_NATIVE_INT64, a.data(), path);
    return a;
  }
  if (info.type_class == H5T_FLOAT && info.type_size == 4) {
    Array<float> a = Array<float>::from_shape(info.shape);
    if (a.size()) h5::read_dataset(dataset, H5T_NATIVE_FLOAT, a.data(), path);
    return a;
  }
  if (info.type_class == H5T_FLOAT && info.type_size == 8) {
    Array<double> a = Array<double>::from_shape(info.shape);
    if (a.size()) h5::read_dataset(dataset, H5T_NATIVE_DOUBLE, a.data(), path);
    return a;
  }
  Handle type(H5Dget_type(dataset), H5Tclose, "cannot read the type of " + path);
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) != 0)
    throw IoError(path + ": expected int64, float32, float64 or fixed-length strings, found " + h5::type_text(type));
  const std::size_t width = H5Tget_size(type);
  if (width == 0 || width > kMaxArrayStringBytes)
    throw IoError(path + ": strings of " + std::to_string(width) + " bytes (expected 1 to " +
                  std::to_string(kMaxArrayStringBytes) + ")");
  std::string packed(numel(info.shape) * width, '\0');
  Handle mem(H5Tcopy(type), H5Tclose, "H5Tcopy");  // read as stored: HDF5 converts nothing
  if (!packed.empty()) h5::read_dataset(dataset, mem, packed.data(), path);
  const H5T_str_t pad = H5Tget_strpad(type);
  StringArray s{info.shape, {}};
  for (std::size_t i = 0; i < numel(info.shape); ++i) {
    std::string v = packed.substr(i * width, width);
    if (pad == H5T_STR_NULLTERM) v.resize(std::strlen(v.c_str()));
    else
      while (!v.empty() && v.back() == (pad == H5T_STR_SPACEPAD ? ' ' : '\0')) v.pop_back();
    s.values.push_back(std::move(v));
  }
  return s;
}

void read_tree(hid_t group, const std::string& path, ArrayFile& f) {
  for (auto& name : h5::attribute_names(group)) {
    if (path.empty() && (name == "format" || name == "version")) continue;
    const std::string where = path.empty() ? "/" : "/" + path;
    Handle attr(H5Aopen(group, name.c_str(), H5P_DEFAULT), H5Aclose, "cannot open attribute " + name + " of " + where);
    Handle type(H5Aget_type(attr), H5Tclose, "cannot read the type of attribute " + name);
    if (H5Tget_class(type) == H5T_STRING) f.attributes.push_back({path, name, h5::read_string_attribute(group, name, where)});
    else f.attributes.push_back({path, name, h5::read_int_attribute(group, name, where)});
  }
  for (auto& [name, kind] : h5::children(group)) {
    const std::string p = path.empty() ? name : path + "/" + name;
    if (kind == h5::Kind::Group) {
      read_tree(h5::open_group(group, name, "/" + p), p, f);
    } else if (kind == h5::Kind::Dataset) {
      f.datasets.emplace_back(p, read_value(h5::open_dataset(group, name, "/" + p), "/" + p));
    } else {
      throw IoError("/" + p + " is neither a group nor a dataset");
    }
  }
}

}  // namespace

const ArrayValue* ArrayFile::find(const std::string& path) const {
  for (auto& [p, v] : datasets)
    if (p == path) return &v;
  return nullptr;
}

template <class T>
const T& ArrayFile::get(const std::string& path, const std::string& what) const {
  const ArrayValue* v = find(path);
  if (!v) throw IoError("/" + path + ": missing (expected " + what + ")");
  const T* t = std::get_if<T>(v);
  if (!t) throw IoError("/" + path + ": expected " + what + ", found " + describe(*v));
  return *t;
}
template const Array<std::int64_t>& ArrayFile::get(const std::string&, const std::string&) const;
template const Array<float>& ArrayFile::get(const std::string&, const std::string&) const;
template const Array<double>& ArrayFile::get(const std::string&, const std::string&) const;
template const StringArray& ArrayFile::get(const std::string&, const std::string&) const;

std::string ArrayFile::string_attribute(const std::string& object, const std::string& name) const {
  for (auto& a : attributes)
    if (a.object == object && a.name == name) {
      if (auto* s = std::get_if<std::string>(&a.value)) return *s;
      throw IoError("attribute '" + name + "' of /" + object + ": expected a string, found an integer");
    }
  throw IoError("/" + object + ": attribute '" + name + "' is missing");
}

std::vector<std::string> ArrayFile::children(const std::string& path) const {
  std::vector<std::string> out;
  const std::string prefix = path + "/";
  auto note = [&](const std::string& p) {
    if (p.compare(0, prefix.size(), prefix) != 0) return;
    const std::string rest = p.substr(prefix.size());
    const auto slash = rest.find('/');
    if (slash == std::string::npos) return;  // a dataset, not a group
    const std::string child = rest.substr(0, slash);
    if (std::find(out.begin(), out.end(), child) == out.end()) out.push_back(child);
  };
  for (auto& [p, v] : datasets) note(p);
  for (auto& a : attributes) note(a.object + "/");
  return out;
}

std::string describe(const ArrayValue& v) {
  return std::visit(
      [](const auto& a) -> std::string {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, StringArray>) return "strings " + shape_str(a.shape);
        else {
          const char* type = std::is_same_v<T, Array<float>> ? "float32" : std::is_same_v<T, Array<double>> ? "float64" : "int64";
          return std::string(type) + " " + shape_str(Shape(a.shape().begin(), a.shape().end()));
        }
      },
      v);
}

void save_array_file(const std::string& path, const ArrayFile& f) {
  h5::quiet();
  try {
    std::string image = build_image(path, f);
    image.replace(0, kHeaderBytes, header_text(f.format, f.version, image.size(),
                                               checkpoint_checksum(image.data() + kHeaderBytes, image.size() - kHeaderBytes)));
    write_file_atomic(path, image);
  } catch (const IoError& e) {
    throw IoError(path + ": " + e.what() + " (the previous file, if any, is unchanged)");
  }
}

ArrayFile load_array_file(const std::string& path, const std::string& format, std::int64_t version) {
  h5::quiet();
  try {
    std::string image = detail::read_whole_file(path);
    verify_header(image, format, version);
    Handle file = h5::open_image(std::move(image), "qkv-verified-image:" + path, "cannot open the HDF5 file after the header");
    Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open the root group");
    ArrayFile f;
    f.format = h5::read_string_attribute(root, "format", "/");
    if (f.format != format) throw IoError("root attribute format is '" + f.format + "', expected '" + format + "'");
    f.version = h5::read_int_attribute(root, "version", "/");
    if (f.version != version)
      throw IoError("root attribute version is " + std::to_string(f.version) + ", this qkv reads " + std::to_string(version));
    read_tree(root, "", f);
    return f;
  } catch (const IoError& e) {
    throw IoError(path + ": " + e.what());
  }
}

}  // namespace qkv::io
