#pragma once
// Running the qkv command (or any program) from a test: capture its output and exit status,
// optionally with a resource limit, or start it and kill it at a chosen moment.

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace qkv::test {

struct ProcessResult {
  int exit_code = -1;  ///< exit status when the process exited, else -1
  int signal = 0;      ///< the signal that ended it, else 0
  std::string out, err;
  double seconds = 0;
  std::string describe() const;  ///< "exit 2" / "signal 9", then stderr
};

/// Runs argv[0] with the given arguments, waits at most `timeout_s` (then SIGKILL and signal 9).
/// `in_child` runs in the child after fork, before exec (e.g. setrlimit).
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 60,
                          const std::function<void()>& in_child = {});

/// A started process whose stdout and stderr go to files.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& out_file, const std::string& err_file,
        const std::function<void()>& in_child = {});
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  void signal(int sig);
  /// Wait for the end (SIGKILL after `timeout_s`); fills exit_code/signal, not out/err.
  ProcessResult wait(double timeout_s = 60);
  /// True while the process has not ended (reaps it if it has).
  bool running();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

/// The qkv command line binary built with the tests, then the arguments.
std::vector<std::string> qkv_command(std::vector<std::string> args);
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text);

}  // namespace qkv::test
