#include "qkv/io/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "checkpoint_testing.hpp"
#include "file_bytes.hpp"
#include "hdf5.hpp"
#include "qkv/version.hpp"

namespace qkv::io {

using h5::Handle;

namespace {

std::function<void(const std::string&)>& save_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

std::string errno_text() { return std::strerror(errno); }

// "a/b/c" -> {"a", "b", "c"}; rejects empty, "." and ".." parts (HDF5 would misread them).
std::vector<std::string> split_name(const std::string& name, const std::string& where) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t slash = name.find('/', start);
    parts.push_back(name.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  for (auto& p : parts)
    if (p.empty() || p == "." || p == "..")
      throw IoError(where + ": tensor name '" + name + "' is not a valid HDF5 path component");
  return parts;
}

// Tensors under `group`; a '/' in a name creates (ordered) subgroups.
void write_tensors(hid_t group, const std::string& group_path, const StateDict<float>& tensors) {
  std::map<std::string, Handle> subgroups;
  for (auto& [name, value] : tensors) {
    auto parts = split_name(name, group_path);
    hid_t parent = group;
    std::string prefix;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix += parts[i] + "/";
      auto it = subgroups.find(prefix);
      if (it == subgroups.end()) it = subgroups.emplace(prefix, h5::create_group(parent, parts[i])).first;
      parent = it->second;
    }
    if (H5Lexists(parent, parts.back().c_str(), H5P_DEFAULT) > 0)
      throw IoError(group_path + "/" + name + " is written twice");
    // Array is row-major and contiguous, so data() is the whole tensor in order.
    h5::write_dataset(parent, parts.back(), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                      Shape(value.shape().begin(), value.shape().end()), value.data());
  }
}

Array<float> read_float_tensor(hid_t dataset, const std::string& path) {
  h5::DatasetInfo info = h5::dataset_info(dataset, path);
  if (info.type_class != H5T_FLOAT) throw IoError(path + ": expected float32, found " + info.dtype);
  Array<float> a = Array<float>::from_shape(info.shape);
  if (a.size() > 0) h5::read_dataset(dataset, H5T_NATIVE_FLOAT, a.data(), path);
  return a;
}

// A weight or an optimizer buffer that is NaN or infinite cannot come from a run that qkv saved
// (training stops before saving when the loss or a gradient is not finite): refuse it, naming the
// dataset and the first bad element, rather than compute with it.
void check_finite(const Array<float>& t, const std::string& path) {
  const float* p = t.data();
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (std::isfinite(p[i])) continue;
    std::string index;
    std::size_t rest = i;
    for (std::size_t d = t.dimension(); d-- > 0;) {
      index = std::to_string(rest % t.shape()[d]) + (index.empty() ? "" : ", ") + index;
      rest /= t.shape()[d];
    }
    throw IoError(path + "[" + index + "] is " + (std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf") +
                  ": a checkpoint holds finite values only (was the file edited, or written by another program?)");
  }
}

void read_tensors(hid_t group, const std::string& group_path, const std::string& name_prefix,
                  StateDict<float>& out) {
  for (auto& [name, kind] : h5::children(group)) {
    const std::string path = group_path + "/" + name;
    if (kind == h5::Kind::Group) {
      Handle g = h5::open_group(group, name, path);
      read_tensors(g, path, name_prefix + name + "/", out);
    } else if (kind == h5::Kind::Dataset) {
      Handle d = h5::open_dataset(group, name, path);
      Array<float> t = read_float_tensor(d, path);
      check_finite(t, path);
      out.emplace_back(name_prefix + name, std::move(t));
    } else {
      throw IoError(path + " is neither a group nor a dataset");
    }
  }
}

Handle file_create_plist() {
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "H5Pcreate");
  h5::check(H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "link creation order");
  h5::check(H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "attribute creation order");
  // The user block holds qkv's header (checkpoint_header); HDF5 starts its own file after it.
  h5::check(H5Pset_userblock(fcpl, kCheckpointHeaderBytes), "user block");
  return fcpl;
}

void write_file(const std::string& file_name, const Checkpoint& ck) {
  Handle fcpl = file_create_plist();
  // HDF5 builds the file in memory (core driver, no backing store) and we write the image
  // ourselves. When HDF5 itself meets a write error (a full disk), the file id cannot be closed
  // any more and HDF5 crashes on it at exit (SIGSEGV in H5F__close_cb after the clear error
  // message: tests/reliability "a full disk ..."); our own write() cannot leave such a state.
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate");
  h5::check(H5Pset_fapl_core(fapl, std::size_t(1) << 20, false), "core driver");
  Handle file(H5Fcreate(file_name.c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose, "cannot create " + file_name);
  std::vector<char> image;
  {
    Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open /");
    h5::write_attribute(root, "format", std::string(kCheckpointFormat));
    h5::write_attribute(root, "format_version", static_cast<std::int64_t>(kCheckpointVersion));
    h5::write_attribute(root, "qkv_version", std::string(QKV_VERSION));
    h5::write_attribute(root, "step", ck.step);
    h5::write_string_dataset(root, "config", ck.config_yaml);

    Handle model = h5::create_group(root, "model");
    write_tensors(model, "/model", ck.model);

    Handle optimizer = h5::create_group(root, "optimizer");
    h5::write_attribute(optimizer, "step", ck.optimizer_step);
    write_tensors(optimizer, "/optimizer", ck.optimizer);

    Handle rng = h5::create_group(root, "rng");
    for (auto& [name, state] : ck.rng) {
      split_name(name, "/rng");
      h5::write_dataset(rng, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, Shape{2}, state.data());
    }

    Handle train = h5::create_group(root, "train");
    for (auto& [name, value] : ck.scalars) h5::write_attribute(train, name, value);

    Handle metrics = h5::create_group(root, "metrics");
    for (auto& [name, column] : ck.metrics) {
      split_name(name, "/metrics");
      h5::write_dataset(metrics, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, Shape{column.size()}, column.data());
    }
    if (!ck.tokenizer.empty()) {  // a text model: its vocabulary, so that no corpus is needed to use it
      Handle data = h5::create_group(root, "data");
      h5::write_attribute(data, "tokenizer", ck.tokenizer);
      h5::write_dataset(data, "vocab", H5T_STD_U32LE, H5T_NATIVE_UINT32, Shape{ck.vocab.size()}, ck.vocab.data());
    }
    if (!ck.compiled.empty()) {  // a compiled program: what its residual dimensions and heads mean
      Handle compiled = h5::create_group(root, "compiled");
      for (auto& [name, text] : ck.compiled) {
        split_name(name, "/compiled");
        h5::write_string_dataset(compiled, name, text);
      }
    }
    if (save_hook()) save_hook()("written");
    h5::check(H5Fflush(file, H5F_SCOPE_GLOBAL), "cannot flush " + file_name);
  }
  const ssize_t size = H5Fget_file_image(file, nullptr, 0);
  if (size <= 0) throw IoError("cannot get the file image of " + file_name + ": " + h5::last_error());
  image.resize(std::size_t(size));
  if (H5Fget_file_image(file, image.data(), image.size()) != size)
    throw IoError("cannot get the file image of " + file_name + ": " + h5::last_error());
  file.close("cannot close " + file_name);
  // HDF5 1.10.8 returns the image without the user block (its superblock still records one of
  // kCheckpointHeaderBytes); put the block in front, where HDF5 expects it.
  if (image.size() >= 4 && std::memcmp(image.data(), "\x89HDF", 4) == 0)
    image.insert(image.begin(), kCheckpointHeaderBytes, '\0');
  if (image.size() < kCheckpointHeaderBytes + 8 || std::memcmp(image.data() + kCheckpointHeaderBytes, "\x89HDF", 4) != 0)
    throw IoError("the HDF5 image of " + file_name + " does not start after the " + std::to_string(kCheckpointHeaderBytes) +
                  "-byte user block");
  const std::string header = checkpoint_header(
      image.size(), checkpoint_checksum(image.data() + kCheckpointHeaderBytes, image.size() - kCheckpointHeaderBytes));
  std::memcpy(image.data(), header.data(), kCheckpointHeaderBytes);

  int fd = ::open(file_name.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0) throw IoError("cannot open " + file_name + ": " + errno_text());
  for (std::size_t done = 0; done < image.size();) {
    const ssize_t n = ::write(fd, image.data() + done, image.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? errno_text() : "nothing written";
      ::close(fd);
      throw IoError("cannot write " + file_name + ": " + why);
    }
    done += std::size_t(n);
  }
  if (::close(fd) != 0) throw IoError("cannot close " + file_name + ": " + errno_text());
}

// Make the bytes durable before the rename publishes them.
void sync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) {
    if (directory) return;  // best effort
    throw IoError("cannot reopen " + path + " to sync it: " + errno_text());
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && !directory) throw IoError("cannot sync " + path + ": " + std::strerror(err));
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Reads the file once, verifies qkv's header and checksum (unless `verify` is false: inspect of a
// trusted file without a header), and only then hands the bytes to HDF5, from memory: nothing
// can change between the check and the parse, and HDF5 never sees unverified bytes.
Handle open_for_reading(const std::string& path, bool verify) {
  h5::quiet();
  std::string image = detail::read_whole_file(path);
  if (verify) verify_checkpoint_image(image, path);
  else if (image.empty()) throw IoError("not an HDF5 file (the file is empty)");
  // A name no file has: HDF5 reads the image only, never the disk.
  return h5::open_image(std::move(image), "qkv-verified-image:" + path,
                        verify ? "cannot open the HDF5 file after the qkv header (crafted?)"
                               : "cannot open as an HDF5 file (truncated or damaged?)");
}

std::string version_error(std::int64_t version, const std::string& path) {
  std::string msg = "checkpoint format_version " + std::to_string(version) + " is not supported: this qkv (" +
                    QKV_VERSION + ") reads format_version " + std::to_string(kCheckpointVersion);
  if (version == 1) {
    const bool h5 = path.size() > 3 && path.compare(path.size() - 3, 3, ".h5") == 0;
    const std::string out = (h5 ? path.substr(0, path.size() - 3) : path) + ".v2.h5";
    msg += ". Version 1 (written by an older qkv) stored strings variable-length, which qkv no longer reads; "
           "convert the file with scripts/convert_checkpoint.py from the qkv sources (/usr/bin/python3 with h5py; "
           "it leaves the input as it is): scripts/convert_checkpoint.py " + path + " " + out;
  }
  if (version > kCheckpointVersion) msg += " (was it written by a newer qkv?)";
  return msg;
}

Checkpoint read_file(const std::string& path) {
  Handle file = open_for_reading(path, true);
  Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open the root group");
  Checkpoint ck;
  // format_version is read first and alone: it is an integer, safe to read whatever wrote the
  // file, whereas format_version 1 stored `format` as a variable-length string (see hdf5.hpp).
  if (!h5::has_attribute(root, "format", "/"))
    throw IoError("not a qkv checkpoint: the root attribute 'format' is missing");
  if (!h5::has_attribute(root, "format_version", "/"))
    throw IoError("not a qkv checkpoint: the root attribute 'format_version' is missing");
  const std::int64_t version = h5::read_int_attribute(root, "format_version", "/");
  if (version != kCheckpointVersion) throw IoError(version_error(version, path));
  const std::string format = h5::read_string_attribute(root, "format", "/");
  if (format != kCheckpointFormat)
    throw IoError("not a qkv checkpoint: root attribute format is '" + format + "', expected '" + kCheckpointFormat + "'");
  ck.step = h5::read_int_attribute(root, "step", "/");
  if (ck.step < 0) throw IoError("root attribute step is " + std::to_string(ck.step) + ": expected a step >= 0");
  ck.config_yaml = h5::read_string_dataset(h5::open_dataset(root, "config", "/config"), "/config");

  Handle model = h5::open_group(root, "model", "/model");
  read_tensors(model, "/model", "", ck.model);

  Handle optimizer = h5::open_group(root, "optimizer", "/optimizer");
  ck.optimizer_step = h5::read_int_attribute(optimizer, "step", "/optimizer");
  if (ck.optimizer_step < 0)
    throw IoError("/optimizer attribute step is " + std::to_string(ck.optimizer_step) + ": expected a step >= 0");
  read_tensors(optimizer, "/optimizer", "", ck.optimizer);

  Handle rng = h5::open_group(root, "rng", "/rng");
  for (auto& [name, kind] : h5::children(rng)) {
    const std::string p = "/rng/" + name;
    Handle d = h5::open_dataset(rng, name, p);
    h5::DatasetInfo info = h5::dataset_info(d, p);
    if (info.type_class != H5T_INTEGER || info.shape != Shape{2})
      throw IoError(p + ": expected uint64 (2), found " + info.dtype + " " + shape_str(info.shape));
    std::array<std::uint64_t, 2> state{};
    h5::read_dataset(d, H5T_NATIVE_UINT64, state.data(), p);
    ck.rng.emplace_back(name, state);
  }

  Handle train = h5::open_group(root, "train", "/train");
  for (auto& name : h5::attribute_names(train))
    ck.scalars.emplace_back(name, h5::read_double_attribute(train, name, "/train"));

  Handle metrics = h5::open_group(root, "metrics", "/metrics");
  for (auto& [name, kind] : h5::children(metrics)) {
    const std::string p = "/metrics/" + name;
    Handle d = h5::open_dataset(metrics, name, p);
    h5::DatasetInfo info = h5::dataset_info(d, p);
    if (info.type_class != H5T_FLOAT || info.shape.size() != 1)
      throw IoError(p + ": expected a float64 column, found " + info.dtype + " " + shape_str(info.shape));
    std::vector<double> column(info.shape[0]);
    if (!column.empty()) h5::read_dataset(d, H5T_NATIVE_DOUBLE, column.data(), p);
    ck.metrics.emplace_back(name, std::move(column));
  }

  for (auto& [name, kind] : h5::children(root)) {
    if (name != "compiled") continue;
    Handle compiled = h5::open_group(root, "compiled", "/compiled");
    for (auto& [entry, entry_kind] : h5::children(compiled)) {
      const std::string p = "/compiled/" + entry;
      ck.compiled.emplace_back(entry, h5::read_string_dataset(h5::open_dataset(compiled, entry, p), p));
    }
  }
  for (auto& [name, kind] : h5::children(root)) {
    if (name != "data") continue;
    Handle data = h5::open_group(root, "data", "/data");
    ck.tokenizer = h5::read_string_attribute(data, "tokenizer", "/data");
    Handle d = h5::open_dataset(data, "vocab", "/data/vocab");
    h5::DatasetInfo info = h5::dataset_info(d, "/data/vocab");
    if (info.type_class != H5T_INTEGER || info.shape.size() != 1 || info.shape[0] > 0x110000)
      throw IoError("/data/vocab: expected uint32 code points (at most 1114112), found " + info.dtype + " " +
                    shape_str(info.shape));
    ck.vocab.resize(info.shape[0]);
    if (!ck.vocab.empty()) h5::read_dataset(d, H5T_NATIVE_UINT32, ck.vocab.data(), "/data/vocab");
  }
  return ck;
}

// ---- inspect ----

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string attribute_text(hid_t object, const std::string& name, const std::string& path) {
  try {
    Handle a(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "H5Aopen");
    Handle type(H5Aget_type(a), H5Tclose, "H5Aget_type");
    Handle space(H5Aget_space(a), H5Sclose, "H5Aget_space");
    H5T_class_t c = H5Tget_class(type);
    bool scalar = H5Sget_simple_extent_npoints(space) == 1;
    if (c == H5T_STRING && scalar) return "\"" + h5::read_string_attribute(object, name, path) + "\"";
    if (c == H5T_INTEGER && scalar) return std::to_string(h5::read_int_attribute(object, name, path));
    if (h5::is_bool_enum(type) && scalar) return h5::read_int_attribute(object, name, path) ? "true" : "false";
    if (c == H5T_FLOAT && scalar) return fmt(h5::read_double_attribute(object, name, path));
    return "(" + std::to_string(H5Sget_simple_extent_npoints(space)) + " values, " + h5::type_text(type) + ")";
  } catch (const IoError& e) {
    return std::string("(unreadable: ") + e.what() + ")";
  }
}

void list_attributes(hid_t object, const std::string& path, std::ostringstream& out) {
  for (auto& name : h5::attribute_names(object)) out << "    @" << name << " = " << attribute_text(object, name, path) << "\n";
}

std::string dataset_summary(hid_t d, const std::string& path) {
  h5::DatasetInfo info = h5::dataset_info(d, path);
  std::string line = info.dtype + " " + shape_str(info.shape);
  std::size_t n = numel(info.shape);
  if (info.type_class == H5T_STRING) {
    if (n == 1) line += ", " + std::to_string(h5::read_string_dataset(d, path).size()) + " chars";
    return line;
  }
  if (info.type_class != H5T_FLOAT && info.type_class != H5T_INTEGER) return line;
  if (n == 0) return line + "  (empty)";
  if (n > (std::size_t(1) << 27)) return line + "  (too large for statistics)";
  if (info.type_class == H5T_INTEGER && n <= 8) {
    std::vector<std::int64_t> iv(n);
    std::vector<std::uint64_t> uv(n);
    if (info.is_signed) h5::read_dataset(d, H5T_NATIVE_INT64, iv.data(), path);
    else h5::read_dataset(d, H5T_NATIVE_UINT64, uv.data(), path);
    line += "  [";
    for (std::size_t i = 0; i < n; ++i)
      line += (i ? ", " : "") + (info.is_bool    ? std::string(uv[i] ? "true" : "false")
                                 : info.is_signed ? std::to_string(iv[i])
                                                  : std::to_string(uv[i]));
    return line + "]";
  }
  std::vector<double> v(n);
  h5::read_dataset(d, H5T_NATIVE_DOUBLE, v.data(), path);
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  std::size_t bad = 0, good = 0;
  for (double x : v) {
    if (!std::isfinite(x)) {
      ++bad;
      continue;
    }
    lo = std::min(lo, x), hi = std::max(hi, x), sum += x, ++good;
  }
  double mean = good ? sum / static_cast<double>(good) : NAN, var = 0;
  for (double x : v)
    if (std::isfinite(x)) var += (x - mean) * (x - mean);
  double sd = good ? std::sqrt(var / static_cast<double>(good)) : NAN;
  line += "  min " + fmt(lo) + "  max " + fmt(hi) + "  mean " + fmt(mean) + "  std " + fmt(sd);
  if (bad) line += "  non-finite " + std::to_string(bad);
  return line;
}

void walk(hid_t group, const std::string& path, std::ostringstream& out) {
  out << path << "  group\n";
  list_attributes(group, path, out);
  for (auto& [name, kind] : h5::children(group)) {
    const std::string p = (path == "/" ? "/" : path + "/") + name;
    try {
      if (kind == h5::Kind::Group) {
        Handle g = h5::open_group(group, name, p);
        walk(g, p, out);
      } else if (kind == h5::Kind::Dataset) {
        Handle d = h5::open_dataset(group, name, p);
        out << p << "  " << dataset_summary(d, p) << "\n";
        list_attributes(d, p, out);
      } else {
        out << p << "  (other object)\n";
      }
    } catch (const IoError& e) {
      out << p << "  (unreadable: " << e.what() << ")\n";
    }
  }
}

// Temporary files "<path>.tmp-<pid>" left by saves whose process was killed: removed once a
// later save of the same path succeeds. A live process's temp file is left alone.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(target.parent_path().empty() ? "." : target.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(pid_text));
    if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) fs::remove(entry.path(), ec);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  h5::quiet();
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  // Create the temp file ourselves first: errno says plainly why a directory is unusable.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw IoError("save_checkpoint: " + path + ": cannot create the temporary file " + tmp + ": " + errno_text());
  ::close(fd);
  try {
    write_file(tmp, checkpoint);
    sync_path(tmp, false);
    if (save_hook()) save_hook()("renaming");
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw IoError("cannot rename " + tmp + " to " + path + ": " + errno_text());
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    throw IoError("save_checkpoint: " + path + ": " + e.what() + " (the previous file, if any, is unchanged)");
  }
  sync_path(parent_dir(path), true);
  remove_stale_temporaries(path);
}

Checkpoint load_checkpoint(const std::string& path) {
  try {
    return read_file(path);
  } catch (const IoError& e) {
    throw IoError("load_checkpoint: " + path + ": " + e.what());
  }
}

void check_compatible(const StateDict<float>& expected, const StateDict<float>& found, const std::string& path) {
  const std::string problems = state_dict_diff(expected, found, "the model has", "the checkpoint");
  if (!problems.empty())
    throw ValueError(path + ": the checkpoint's model does not fit this model (was it written with another config?):" +
                     problems);
}

std::string inspect(const std::string& path, bool verify) {
  try {
    Handle file = open_for_reading(path, verify);
    Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open the root group");
    std::ostringstream out;
    hsize_t size = 0;
    H5Fget_filesize(file, &size);
    out << path << "  (HDF5, " << size << " bytes" << (verify ? ", qkv header and checksum verified" : ", not verified") << ")\n";
    walk(root, "/", out);
    try {
      if (h5::has_attribute(root, "format_version", "/")) {
        const std::int64_t version = h5::read_int_attribute(root, "format_version", "/");
        if (version != kCheckpointVersion) out << "\nnote: " << version_error(version, path) << "\n";
      }
    } catch (const IoError&) {
    }
    if (H5Lexists(root, "config", H5P_DEFAULT) > 0) {
      try {
        std::string text = h5::read_string_dataset(h5::open_dataset(root, "config", "/config"), "/config");
        out << "\n/config:\n" << text << (text.empty() || text.back() == '\n' ? "" : "\n");
      } catch (const IoError&) {
      }
    }
    H5Eclear2(H5E_DEFAULT);
    return out.str();
  } catch (const IoError& e) {
    throw IoError("inspect: " + path + ": " + e.what());
  }
}

Mask load_mask(const std::string& path, const std::string& dataset) {
  const std::string where = "/" + dataset;
  try {
    Handle file = open_for_reading(path, false);
    const std::vector<std::string> parts = split_name(dataset, "load_mask");
    Handle group(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open the root group");
    std::string at;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      at += "/" + parts[i];
      group = h5::open_group(group, parts[i], at);
    }
    Handle d = h5::open_dataset(group, parts.back(), where);
    const h5::DatasetInfo info = h5::dataset_info(d, where);
    if (info.type_class != H5T_INTEGER || info.shape.size() > 4)
      throw IoError(where + ": expected a mask (booleans, or integers 0 and 1) of rank <= 4, found " + info.dtype + " " +
                    shape_str(info.shape));
    std::vector<std::int64_t> v(numel(info.shape));
    if (!v.empty()) h5::read_dataset(d, H5T_NATIVE_INT64, v.data(), where);
    Mask m = Mask::from_shape(info.shape);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] != 0 && v[i] != 1)
        throw IoError(where + ": expected a mask (0 or 1), element " + std::to_string(i) + " is " + std::to_string(v[i]));
      m.data()[i] = v[i] == 1;
    }
    return m;
  } catch (const IoError& e) {
    throw IoError("load_mask: " + path + ": " + e.what());
  }
}

namespace testing {
void set_save_hook(std::function<void(const std::string&)> hook) { save_hook() = std::move(hook); }
}  // namespace testing

}  // namespace qkv::io
