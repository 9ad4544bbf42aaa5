// The programs in examples/ run and learn.
#include <doctest/doctest.h>

#include "train/train_fixtures.hpp"

#if QKV_HAVE_EXAMPLES
TEST_CASE("example xor_mlp: the engine demo learns what a linear model cannot") {
  std::string out;
  CHECK(qkv::test::run_command(std::string(QKV_EXAMPLES_DIR) + "/example_xor_mlp", &out) == 0);
  INFO(out);
  CHECK(out.find("step 300") != std::string::npos);
}

TEST_CASE("example sort_api: trains, saves, reloads, and the reloaded model agrees") {
  const std::string dir = qkv::test::temp_dir("example_sort_api");
  std::string out;
  CHECK(qkv::test::run_command(std::string(QKV_EXAMPLES_DIR) + "/example_sort_api 200 " + dir + "/m.h5", &out) == 0);
  INFO(out);
  CHECK(out.find("agrees on") != std::string::npos);
}
#endif
