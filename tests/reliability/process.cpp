#include "reliability/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "test_paths.hpp"

namespace qkv::test {
namespace {

using Clock = std::chrono::steady_clock;

pid_t spawn(const std::vector<std::string>& argv, int out_fd, int err_fd, const std::function<void()>& in_child) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    if (in_child) in_child();
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(127);
  }
  return pid;
}

// waitpid with a deadline; SIGKILL when it passes.
int wait_for(pid_t pid, double timeout_s) {
  auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) throw std::runtime_error("waitpid failed");
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void decode(int status, ProcessResult& r) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
}

std::string temp_name(const char* what) {
  static int counter = 0;
  return std::string(QKV_TEST_TMP) + "/proc-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + what;
}

}  // namespace

std::string ProcessResult::describe() const {
  return (signal ? "signal " + std::to_string(signal) : "exit " + std::to_string(exit_code)) + "\nstderr:\n" + err +
         "\nstdout (tail):\n" + (out.size() > 2000 ? out.substr(out.size() - 2000) : out);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s, const std::function<void()>& in_child) {
  ::mkdir(QKV_TEST_TMP, 0755);
  const std::string out_file = temp_name(".out"), err_file = temp_name(".err");
  ProcessResult r;
  auto t0 = Clock::now();
  {
    Child child(argv, out_file, err_file, in_child);
    ProcessResult w = child.wait(timeout_s);
    r.exit_code = w.exit_code;
    r.signal = w.signal;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.out = read_file(out_file);
  r.err = read_file(err_file);
  std::remove(out_file.c_str());
  std::remove(err_file.c_str());
  return r;
}

Child::Child(const std::vector<std::string>& argv, const std::string& out_file, const std::string& err_file,
             const std::function<void()>& in_child) {
  int out_fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) throw std::runtime_error("cannot create " + out_file + " / " + err_file);
  pid_ = spawn(argv, out_fd, err_fd, in_child);
  ::close(out_fd);
  ::close(err_fd);
}

Child::~Child() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

void Child::signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

bool Child::running() {
  if (reaped_) return false;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

ProcessResult Child::wait(double timeout_s) {
  if (!reaped_) {
    status_ = wait_for(pid_, timeout_s);
    reaped_ = true;
  }
  ProcessResult r;
  decode(status_, r);
  return r;
}

std::vector<std::string> qkv_command(std::vector<std::string> args) {
  args.insert(args.begin(), QKV_CLI_PATH);
  return args;
}

}  // namespace qkv::test
