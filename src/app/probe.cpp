// Why a child process: libhdf5 crashes on some crafted files (found by tests/fuzz), and no check
// qkv can make before calling it covers them all. A crash, an out-of-memory abort or a hang in
// the child becomes an error message in the parent.
#include "probe.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <new>
#include <thread>

#include "qkv/io/checkpoint.hpp"

#ifdef QKV_SANITIZE
#include <sanitizer/common_interface_defs.h>
#endif

namespace qkv::app {
namespace {

// Exit statuses of the child. A read error is not the probe's business: the parent reads the
// file again and reports it with the usual message.
constexpr int kReadOk = 0;
constexpr int kReadError = 1;
constexpr int kOutOfMemory = 3;
constexpr int kSanitizerReport = 4;  // a QKV_SANITIZE build: AddressSanitizer found an error in the child

#ifndef QKV_SANITIZE
// Bytes of address space the process maps now (first field of /proc/self/statm, in pages).
unsigned long long mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  unsigned long long pages = 0;
  statm >> pages;
  return pages * static_cast<unsigned long long>(sysconf(_SC_PAGESIZE));
}
#endif

[[noreturn]] void child(const std::string& path, ProbeRead read, unsigned long long file_bytes) {
#ifndef QKV_SANITIZE  // AddressSanitizer reserves terabytes of shadow address space
  const unsigned long long limit = mapped_bytes() + (2ull << 30) + 4 * file_bytes;
  rlimit r{limit, limit};
  setrlimit(RLIMIT_AS, &r);
#else
  (void)file_bytes;
#endif
  // Keep a crash quiet and fast: no core file, and stdout/stderr are the parent's business.
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
#ifdef QKV_SANITIZE
  // A sanitizer report would end the child with exit status 1, which reads as "an ordinary read
  // error"; say instead that reading the file went wrong inside.
  __sanitizer_set_death_callback([] { std::_Exit(kSanitizerReport); });
#endif
  int status = kReadOk;
  try {
    if (read == ProbeRead::Inspect) (void)io::inspect(path);
    else (void)io::load_checkpoint(path);
  } catch (const std::bad_alloc&) {
    status = kOutOfMemory;
  } catch (...) {
    status = kReadError;
  }
  std::_Exit(status);  // no atexit handlers, no HDF5 shutdown: the parent owns those
}

std::string describe(int wstatus) {
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "exit status " + std::to_string(WEXITSTATUS(wstatus));
}

}  // namespace

void probe_checkpoint(const std::string& path, ProbeRead read, int timeout_seconds) {
  if (std::getenv("QKV_NO_PROBE") || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE")) return;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // the load names the problem
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = ::fork();
  if (pid < 0) return;  // cannot probe: read it directly, as without the probe
  if (pid == 0) child(path, read, static_cast<unsigned long long>(st.st_size));

  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::seconds(timeout_seconds);
  int wstatus = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return;
    if (clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wstatus, 0);
      throw io::IoError(path + ": reading this checkpoint did not finish within " + std::to_string(timeout_seconds) +
                        " s (in a probe process); the file is damaged or crafted, and was not loaded");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(wstatus) && (WEXITSTATUS(wstatus) == kReadOk || WEXITSTATUS(wstatus) == kReadError)) return;
  const int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  const std::string what = code == kOutOfMemory       ? "needed more than 2 GiB + 4x the file size of memory"
                           : code == kSanitizerReport ? "crashed the HDF5 library (AddressSanitizer report above)"
                                                      : "crashed the HDF5 library (" + describe(wstatus) + ")";
  throw io::IoError(path + ": reading this checkpoint " + what +
                    " in a probe process; the file is damaged or crafted (HDF5 1.10.8 does not survive every damaged "
                    "file), and was not loaded");
}

}  // namespace qkv::app
