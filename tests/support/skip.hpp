#pragma once
// Skipping a test honestly. A test that needs something the machine may lack (h5dump, python3
// with h5py, mpirun) calls QKV_REQUIRE_OR_SKIP(available, why) before the part that needs it:
//   - when `available` is true, nothing happens;
//   - under CI=true (the environment CI sets), the test fails: CI must run every test;
//   - otherwise the test case ends here and prints "[qkv] SKIPPED: why", which CTest counts as
//     a skipped test (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt) and the suite summary
//     (tests/suite_summary.py) reports. `make test` installs everything the suite needs, so a
//     skip only happens in a build made without it.

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace qkv::test {
/// True when the CI environment variable is "true" (GitHub Actions, GitLab and most CI systems
/// set it; .ci/run does too).
inline bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::strcmp(ci, "true") == 0;
}
}  // namespace qkv::test

#define QKV_REQUIRE_OR_SKIP(available, why)                                            \
  do {                                                                                 \
    if (!(available)) {                                                                \
      if (::qkv::test::under_ci()) FAIL("required under CI=true, but not available: " << why); \
      std::printf("[qkv] SKIPPED: %s\n", std::string(why).c_str());                    \
      std::fflush(stdout);                                                             \
      return;                                                                          \
    }                                                                                  \
  } while (0)
