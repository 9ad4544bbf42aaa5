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
