#include "qkv/io/files.hpp"

#include "file_bytes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace qkv::io {

std::size_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return std::size_t(pages) * std::size_t(page);
}
namespace {

std::string reason() { return std::strerror(errno); }

// "is a directory, ..." / "is not a regular file ..." for a stat that is not a regular file.
std::string kind_problem(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "is a directory, not a file";
  if (!S_ISREG(st.st_mode)) return "is not a regular file (a device, a pipe or a socket)";
  return "";
}

std::string label(const std::string& what, const std::string& path) { return (what.empty() ? "" : what + " ") + path; }

}  // namespace

void check_input_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw IoError((what.empty() ? std::string("file") : what) + ": empty path");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw IoError(label(what, path) + ": " + reason());
  if (const std::string p = kind_problem(st); !p.empty()) throw IoError(label(what, path) + ": " + p);
  if (::access(path.c_str(), R_OK) != 0) throw IoError(label(what, path) + ": " + reason());
}

namespace {

// The bytes of the regular file at `path`, at most `max_bytes`; errors are `prefix` + the reason.
std::string read_regular(const std::string& path, std::size_t max_bytes, const std::string& prefix) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block the open
  if (fd < 0) throw IoError(prefix + "cannot open: " + reason());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !kind_problem(st).empty()) {
    const std::string why = ::fstat(fd, &st) != 0 ? reason() : kind_problem(st);
    ::close(fd);
    throw IoError(prefix + why);
  }
  if (std::size_t(st.st_size) > max_bytes) {
    ::close(fd);
    throw IoError(prefix + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) +
                  " this reads");
  }
  std::string bytes;
  bytes.reserve(std::size_t(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = reason();
      ::close(fd);
      throw IoError(prefix + "cannot read: " + why);
    }
    if (n == 0) break;
    if (bytes.size() + std::size_t(n) > max_bytes) {  // grew while read
      ::close(fd);
      throw IoError(prefix + "more than the " + std::to_string(max_bytes) + " bytes this reads");
    }
    bytes.append(buf, std::size_t(n));
  }
  ::close(fd);
  return bytes;
}

}  // namespace

namespace detail {
std::string read_whole_file(const std::string& path) { return read_regular(path, kMaxCheckpointBytes, ""); }
}  // namespace detail

std::string read_file(const std::string& path, std::size_t max_bytes, const std::string& what) {
  check_input_file(path, what);
  return read_regular(path, max_bytes, label(what, path) + ": ");
}

void check_output_path(const std::string& path, const std::vector<std::string>& inputs, const std::string& flag) {
  const std::string where = flag.empty() ? path : flag + " " + path;
  if (path.empty()) throw IoError(flag + ": empty; give a file name");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw IoError(where + ": is a directory; give a file name");
    if (!S_ISREG(st.st_mode)) throw IoError(where + ": is not a regular file (a device, a pipe or a socket); not replaced");
    for (const std::string& in : inputs) {
      struct stat si;
      if (!in.empty() && ::stat(in.c_str(), &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
        throw IoError(where + ": is " + (in == path ? "" : in + ", ") + "an input of this command; not overwritten");
    }
  } else if (errno != ENOENT) {
    throw IoError(where + ": " + reason());
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct stat sd;
  if (::stat(dir.c_str(), &sd) != 0) throw IoError(where + ": directory " + dir.string() + ": " + reason());
  if (!S_ISDIR(sd.st_mode)) throw IoError(where + ": " + dir.string() + " is not a directory");
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  static std::atomic<unsigned> counter{0};
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !kind_problem(st).empty())
    throw IoError("cannot write " + path + ": it " + kind_problem(st) + "; not replaced");
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot write " + path + ": " + reason());
  auto fail = [&](int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + std::strerror(err));
  };
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno : ENOSPC);
    done += std::size_t(n);
  }
  if (::fsync(fd) != 0) fail(errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError("cannot write " + path + ": " + std::strerror(err));
  }
}

}  // namespace qkv::io
