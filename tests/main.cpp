// The test programs run the library as the qkv command does: with the BLAS core type the command
// chooses (app/runtime.hpp), so that results computed in a test equal the command's bit for bit.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "app/runtime.hpp"

int main(int argc, char** argv) {
  if (const std::string e = qkv::app::prepare_process(nullptr); !e.empty()) {
    std::fprintf(stderr, "%s\n", e.c_str());
    return 2;
  }
  return doctest::Context(argc, argv).run();
}
