#include "test_util.hpp"

#include <filesystem>

namespace qkv::test {

std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(QKV_TEST_TMP) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace qkv::test

#include <array>
#include <cstdio>
#include <sys/wait.h>

namespace qkv::test {

int run_command(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buf;
  std::string out;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace qkv::test
