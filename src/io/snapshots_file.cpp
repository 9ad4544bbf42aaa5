// snapshots.h5: the file of interp::Snapshots (docs/snapshots.md has the layout). HDF5 stays in
// src/io, so the reader and writer of this interp type live here.
//
// Like a checkpoint, the file carries a 512-byte text header in the HDF5 user block with the
// length and a CRC-64/XZ of everything after it, verified before HDF5 parses a byte: HDF5 1.10.8
// can crash on damaged metadata before any check of ours runs (docs/reliability.md), and a
// snapshots file is rewritten often during a run. h5py and h5dump skip the user block.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "file_bytes.hpp"
#include "hdf5.hpp"
#include "qkv/interp/snapshots.hpp"
#include "qkv/io/checkpoint.hpp"

namespace qkv::interp {
namespace {

using io::IoError;
using io::h5::Handle;
namespace h5 = io::h5;

constexpr std::size_t kHeaderBytes = 512;
constexpr const char* kFormat = "qkv-snapshots";
constexpr std::int64_t kVersion = 1;
// The longest token label read back (labels are a few bytes; a damaged width must not allocate).
constexpr std::size_t kMaxLabelBytes = 4096;

std::string header_text(std::uint64_t file_bytes, std::uint64_t crc) {
  char text[kHeaderBytes] = {};
  std::snprintf(text, sizeof text,
                "%s\nversion %lld\nbytes %llu\ncrc64-xz %016llx\n# CRC-64/XZ of bytes 512 to the end (an HDF5 file "
                "with a 512-byte user block), checked before qkv reads the file\n",
                kFormat, (long long)kVersion, (unsigned long long)file_bytes, (unsigned long long)crc);
  return std::string(text, sizeof text);
}

void verify_header(const std::string& image) {
  const std::string magic = std::string(kFormat) + "\n";
  if (image.compare(0, magic.size(), magic) != 0)
    throw IoError(std::string("not a qkv snapshots file (no '") + kFormat + "' header in the first " +
                  std::to_string(kHeaderBytes) + " bytes" + (image.empty() ? "; the file is empty" : "") + ")");
  if (image.size() < kHeaderBytes)
    throw IoError("truncated: " + std::to_string(image.size()) + " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                  "-byte header");
  char text[kHeaderBytes + 1] = {};
  std::memcpy(text, image.data(), kHeaderBytes);
  long long version = 0;
  unsigned long long bytes = 0, crc = 0;
  if (std::sscanf(text + magic.size(), "version %lld\nbytes %llu\ncrc64-xz %16llx\n", &version, &bytes, &crc) != 3)
    throw IoError("damaged header: expected lines 'version N', 'bytes N', 'crc64-xz X' after the first");
  if (version != kVersion)
    throw IoError("snapshots version " + std::to_string(version) + " is not supported: this qkv reads version " +
                  std::to_string(kVersion));
  if (bytes != image.size())
    throw IoError((image.size() < bytes ? "truncated: " : "damaged: ") + std::to_string(image.size()) +
                  " bytes, the header says " + std::to_string(bytes));
  const std::uint64_t found = io::checkpoint_checksum(image.data() + kHeaderBytes, image.size() - kHeaderBytes);
  if (found != crc) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "checksum mismatch: the header says %016llx, the bytes after it give %016llx (damaged)",
                  crc, (unsigned long long)found);
    throw IoError(msg);
  }
}

// ---- writing ----

// A fixed-length UTF-8 string type of `bytes` bytes, NUL-padded (h5py: dataset.asstr()).
Handle fixed_string_type(std::size_t bytes) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  h5::check(H5Tset_size(t, std::max<std::size_t>(bytes, 1)), "H5Tset_size");
  h5::check(H5Tset_strpad(t, H5T_STR_NULLPAD), "H5Tset_strpad");
  h5::check(H5Tset_cset(t, H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

void write_strings(hid_t parent, const std::string& name, const std::vector<std::string>& values, const Shape& shape) {
  std::size_t width = 1;
  for (auto& v : values) width = std::max(width, v.size());
  if (width > kMaxLabelBytes)
    throw IoError(name + ": a string of " + std::to_string(width) + " bytes is longer than the " +
                  std::to_string(kMaxLabelBytes) + " read back");
  std::string packed(values.size() * width, '\0');
  for (std::size_t i = 0; i < values.size(); ++i) values[i].copy(&packed[i * width], width);
  Handle type = fixed_string_type(width);
  h5::write_dataset(parent, name, type, type, shape, packed.data());
}

void write_ids(hid_t parent, const std::string& name, const IndexArray& ids) {
  h5::write_dataset(parent, name, H5T_STD_I64LE, H5T_NATIVE_INT64, Shape(ids.shape().begin(), ids.shape().end()), ids.data());
}

// Throws ShapeError unless `s` is a file load_snapshots would accept.
void check_consistent(const Snapshots& s) {
  auto fail = [](const std::string& what) { throw ShapeError("save_snapshots: " + what); };
  const std::size_t S = s.steps.size();
  if (s.inputs.dimension() != 2 || s.inputs.shape()[0] == 0) fail("inputs must be (N, T), N >= 1, found " + shape_str(s.inputs.shape()));
  const std::size_t N = s.inputs.shape()[0];
  if (s.input_labels.size() != s.inputs.size())
    fail(std::to_string(s.input_labels.size()) + " input labels for inputs " + shape_str(s.inputs.shape()));
  const bool s2s = s.decoder_inputs.dimension() == 2;
  if (s2s && (s.decoder_inputs.shape()[0] != N || s.decoder_labels.size() != s.decoder_inputs.size()))
    fail("decoder_inputs " + shape_str(s.decoder_inputs.shape()) + " with " + std::to_string(s.decoder_labels.size()) +
         " labels do not fit inputs " + shape_str(s.inputs.shape()));
  if (!s2s && !s.decoder_labels.empty()) fail("decoder labels without decoder_inputs");
  for (std::size_t i = 1; i < S; ++i)
    if (s.steps[i] <= s.steps[i - 1]) fail("steps must increase, found " + std::to_string(s.steps[i - 1]) + " then " + std::to_string(s.steps[i]));
  for (auto& l : s.layers) {
    const auto &w = l.weights.shape(), &c = l.scores.shape();
    if (l.weights.dimension() != 5 || w[0] != S || w[1] != N)
      fail(l.name + ": weights must be (S, N, H, Tq, Tk) with S = " + std::to_string(S) + ", N = " + std::to_string(N) +
           ", found " + shape_str(w));
    if (l.scores.dimension() != 3 || c[0] != S || c[1] != w[2] || c[2] != s.score_names.size())
      fail(l.name + ": scores must be (S, H, K) = " + shape_str(Shape{S, w[2], s.score_names.size()}) + ", found " + shape_str(c));
  }
}

// The HDF5 image of `s` (user block included, header not yet filled in), built in memory.
std::string build_image(const std::string& name, const Snapshots& s) {
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "H5Pcreate");
  h5::check(H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "link creation order");
  h5::check(H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "attribute creation order");
  h5::check(H5Pset_userblock(fcpl, kHeaderBytes), "user block");
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate");
  h5::check(H5Pset_fapl_core(fapl, std::size_t(1) << 20, false), "core driver");  // memory only, no file
  Handle file(H5Fcreate(("qkv-snapshots-image:" + name).c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose, "cannot create the image");
  {
    Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open /");
    h5::write_attribute(root, "format", std::string(kFormat));
    h5::write_attribute(root, "version", kVersion);
    h5::write_dataset(root, "steps", H5T_STD_I64LE, H5T_NATIVE_INT64, Shape{s.steps.size()}, s.steps.data());
    Handle examples = h5::create_group(root, "examples");
    write_ids(examples, "inputs", s.inputs);
    write_strings(examples, "input_labels", s.input_labels, Shape(s.inputs.shape().begin(), s.inputs.shape().end()));
    if (s.decoder_inputs.dimension() == 2) {
      write_ids(examples, "decoder_inputs", s.decoder_inputs);
      write_strings(examples, "decoder_labels", s.decoder_labels,
                    Shape(s.decoder_inputs.shape().begin(), s.decoder_inputs.shape().end()));
    }
    write_strings(root, "score_names", s.score_names, Shape{s.score_names.size()});
    Handle layers = h5::create_group(root, "layers");
    for (std::size_t i = 0; i < s.layers.size(); ++i) {
      const SnapshotLayer& l = s.layers[i];
      Handle g = h5::create_group(layers, std::to_string(i));
      h5::write_attribute(g, "name", l.name);
      h5::write_attribute(g, "kind", std::string(train::attention_kind_name(l.kind)));
      h5::write_dataset(g, "weights", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, Shape(l.weights.shape().begin(), l.weights.shape().end()),
                        l.weights.data());
      h5::write_dataset(g, "scores", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, Shape(l.scores.shape().begin(), l.scores.shape().end()),
                        l.scores.data());
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

// `bytes` into a new file `tmp`, flushed to disk.
void write_durably(const std::string& tmp, const std::string& bytes) {
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw IoError("cannot create the temporary file " + tmp + ": " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0 &&
                       ::fsync(fileno(f)) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !written) {
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + tmp + ": " + std::strerror(written ? errno : err));
  }
}

// ---- reading ----

Handle open_image(const std::string& image, const std::string& path) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate");
  h5::check(H5Pset_fapl_core(fapl, std::size_t(1) << 20, false), "core driver");
  h5::check(H5Pset_file_image(fapl, const_cast<char*>(image.data()), image.size()), "cannot hand the file image to HDF5");
  return Handle(H5Fopen(("qkv-verified-image:" + path).c_str(), H5F_ACC_RDONLY, fapl), H5Fclose,
                "cannot open the HDF5 file after the header");
}

bool has_link(hid_t parent, const char* name) {
  const htri_t e = H5Lexists(parent, name, H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

// A numeric dataset of rank `rank`, converted to `mem_type` (T). `what` describes the expected
// shape ("(S, N, H, Tq, Tk) float32") for errors.
template <class T>
Array<T> read_numbers(hid_t parent, const std::string& name, const std::string& path, H5T_class_t want, hid_t mem_type,
                      std::size_t rank, const std::string& what) {
  Handle d = h5::open_dataset(parent, name, path);
  const h5::DatasetInfo info = h5::dataset_info(d, path);
  const bool type_ok = info.type_class == want && (want != H5T_FLOAT || info.type_size == 4 || info.type_size == 8) &&
                       info.type_size >= 1 && info.type_size <= 8;
  if (!type_ok || info.shape.size() != rank)
    throw IoError(path + ": expected " + what + ", found " + info.dtype + " " + shape_str(info.shape));
  Array<T> a = Array<T>::from_shape(info.shape);
  if (a.size()) h5::read_dataset(d, mem_type, a.data(), path);
  return a;
}

IndexArray read_ids(hid_t parent, const std::string& name, const std::string& path, const std::string& what) {
  return read_numbers<Index>(parent, name, path, H5T_INTEGER, H5T_NATIVE_INT64, 2, what);
}

void expect_shape(const Shape& found, const Shape& want, const std::string& path, const std::string& what) {
  if (found != want) throw IoError(path + ": expected " + what + " = " + shape_str(want) + ", found " + shape_str(found));
}

// A fixed-length string dataset of `shape`, one std::string per element (padding dropped).
std::vector<std::string> read_strings(hid_t parent, const std::string& name, const std::string& path, const Shape& shape,
                                      const std::string& what) {
  Handle d = h5::open_dataset(parent, name, path);
  Handle type(H5Dget_type(d), H5Tclose, "cannot read the type of " + path);
  if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) != 0)
    throw IoError(path + ": expected " + what + " as fixed-length strings, found " + h5::type_text(type));
  const std::size_t width = H5Tget_size(type);
  if (width == 0 || width > kMaxLabelBytes)
    throw IoError(path + ": strings of " + std::to_string(width) + " bytes (expected 1 to " + std::to_string(kMaxLabelBytes) + ")");
  const h5::DatasetInfo info = h5::dataset_info(d, path);  // the stored bytes cover the shape
  expect_shape(info.shape, shape, path, what);
  std::string packed(numel(info.shape) * width, '\0');
  Handle mem(H5Tcopy(type), H5Tclose, "H5Tcopy");  // read as stored: HDF5 converts nothing
  if (!packed.empty()) h5::read_dataset(d, mem, packed.data(), path);
  const H5T_str_t pad = H5Tget_strpad(type);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < numel(info.shape); ++i) {
    std::string s = packed.substr(i * width, width);
    if (pad == H5T_STR_NULLTERM) s.resize(std::strlen(s.c_str()));
    else
      while (!s.empty() && s.back() == (pad == H5T_STR_SPACEPAD ? ' ' : '\0')) s.pop_back();
    out.push_back(std::move(s));
  }
  return out;
}

train::AttentionKind read_kind(hid_t group, const std::string& path) {
  const std::string kind = h5::read_string_attribute(group, "kind", path);
  for (auto k : {train::AttentionKind::Self, train::AttentionKind::Causal, train::AttentionKind::Cross})
    if (kind == train::attention_kind_name(k)) return k;
  throw IoError("attribute 'kind' of " + path + ": expected \"self\", \"causal\" or \"cross\", found \"" + kind + "\"");
}

Snapshots read_snapshots(const std::string& path) {
  h5::quiet();
  const std::string image = io::detail::read_whole_file(path);
  verify_header(image);
  Handle file = open_image(image, path);
  Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open the root group");
  const std::string format = h5::read_string_attribute(root, "format", "/");
  if (format != kFormat) throw IoError("root attribute format is '" + format + "', expected '" + kFormat + "'");
  const std::int64_t version = h5::read_int_attribute(root, "version", "/");
  if (version != kVersion)
    throw IoError("root attribute version is " + std::to_string(version) + ", this qkv reads " + std::to_string(kVersion));

  Snapshots s;
  const Array<std::int64_t> steps = read_numbers<std::int64_t>(root, "steps", "/steps", H5T_INTEGER, H5T_NATIVE_INT64, 1, "(S) int64");
  s.steps.assign(steps.begin(), steps.end());
  for (std::size_t i = 1; i < s.steps.size(); ++i)
    if (s.steps[i] <= s.steps[i - 1])
      throw IoError("/steps: expected increasing steps, found " + std::to_string(s.steps[i - 1]) + " then " + std::to_string(s.steps[i]));
  const std::size_t S = s.steps.size();

  Handle examples = h5::open_group(root, "examples", "/examples");
  s.inputs = read_ids(examples, "inputs", "/examples/inputs", "(N, T) int64");
  const std::size_t N = s.inputs.shape()[0], T = s.inputs.shape()[1];
  if (N == 0) throw IoError("/examples/inputs: expected (N, T) with N >= 1, found " + shape_str(s.inputs.shape()));
  s.input_labels = read_strings(examples, "input_labels", "/examples/input_labels", Shape{N, T}, "(N, T) token labels");
  std::size_t Tt = 0;
  s.decoder_inputs = IndexArray::from_shape({0});
  if (has_link(examples, "decoder_inputs")) {
    s.decoder_inputs = read_ids(examples, "decoder_inputs", "/examples/decoder_inputs", "(N, Tt) int64");
    Tt = s.decoder_inputs.shape()[1];
    expect_shape(Shape(s.decoder_inputs.shape().begin(), s.decoder_inputs.shape().end()), Shape{N, Tt},
                 "/examples/decoder_inputs", "(N, Tt)");
    s.decoder_labels = read_strings(examples, "decoder_labels", "/examples/decoder_labels", Shape{N, Tt}, "(N, Tt) token labels");
  }
  Handle names = h5::open_dataset(root, "score_names", "/score_names");
  const h5::DatasetInfo names_info = h5::dataset_info(names, "/score_names");
  if (names_info.shape.size() != 1) throw IoError("/score_names: expected (K) strings, found " + shape_str(names_info.shape));
  s.score_names = read_strings(root, "score_names", "/score_names", names_info.shape, "(K) score names");
  const std::size_t K = s.score_names.size();

  Handle layers = h5::open_group(root, "layers", "/layers");
  const auto children = h5::children(layers);
  for (std::size_t i = 0; i < children.size(); ++i) {
    const std::string key = std::to_string(i), p = "/layers/" + key;
    if (!has_link(layers, key.c_str()))
      throw IoError("group " + p + " is missing (/layers holds " + std::to_string(children.size()) + " objects, expected groups 0 to " +
                    std::to_string(children.size() - 1) + ")");
    Handle g = h5::open_group(layers, key, p);
    SnapshotLayer l;
    l.name = h5::read_string_attribute(g, "name", p);
    l.kind = read_kind(g, p);
    const std::string wp = p + "/weights", sp = p + "/scores";
    l.weights = read_numbers<float>(g, "weights", wp, H5T_FLOAT, H5T_NATIVE_FLOAT, 5, "(S, N, H, Tq, Tk) float32");
    const auto& w = l.weights.shape();
    const auto fits = [&](std::size_t t) { return t == T || (Tt && t == Tt); };
    if (w[0] != S || w[1] != N || w[2] == 0 || !fits(w[3]) || !fits(w[4]))
      throw IoError(wp + ": expected (S, N, H, Tq, Tk) float32 with S = " + std::to_string(S) + " (/steps), N = " + std::to_string(N) +
                    ", H >= 1 and Tq, Tk the input length " + std::to_string(T) +
                    (Tt ? " or the decoder length " + std::to_string(Tt) : std::string()) + ", found " + shape_str(w));
    l.scores = read_numbers<double>(g, "scores", sp, H5T_FLOAT, H5T_NATIVE_DOUBLE, 3, "(S, H, K) float64");
    expect_shape(Shape(l.scores.shape().begin(), l.scores.shape().end()), Shape{S, w[2], K}, sp, "(S, H, K) float64");
    s.layers.push_back(std::move(l));
  }
  return s;
}

}  // namespace

void save_snapshots(const std::string& path, const Snapshots& s) {
  check_consistent(s);
  h5::quiet();
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    std::string image = build_image(path, s);
    image.replace(0, kHeaderBytes, header_text(image.size(), io::checkpoint_checksum(image.data() + kHeaderBytes, image.size() - kHeaderBytes)));
    write_durably(tmp, image);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw IoError("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
    }
  } catch (const IoError& e) {
    throw IoError("save_snapshots: " + path + ": " + e.what() + " (the previous file, if any, is unchanged)");
  }
  // The rename is durable once the directory is (best effort, as for checkpoints).
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

Snapshots load_snapshots(const std::string& path) {
  try {
    return read_snapshots(path);
  } catch (const IoError& e) {
    throw IoError("load_snapshots: " + path + ": " + e.what());
  }
}

}  // namespace qkv::interp
