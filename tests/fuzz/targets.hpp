#pragma once
// The bodies of the fuzz targets, shared by the libFuzzer executables (tests/fuzz/fuzz_*.cpp)
// and the doctest that replays saved crash inputs (tests/reliability/test_fuzz_regressions.cpp).
//
// Contract under test: for ANY input, parsing returns normally or throws qkv::Error (ConfigError,
// IoError). A crash, a sanitizer report, or any other exception is a bug. Invariant violations
// found along the way throw std::logic_error, which libFuzzer reports as a crash.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/config/config.hpp"
#include "qkv/io/checkpoint.hpp"

namespace qkv::fuzz {

/// Input layout: YAML text, then optionally a NUL byte followed by `--set` overrides, one per
/// line. A config that parses must come back unchanged through to_yaml.
inline void run_config_input(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  auto nul = text.find('\0');
  if (nul != std::string::npos) {
    std::string rest = text.substr(nul + 1);
    text.resize(nul);
    std::size_t start = 0;
    while (true) {
      auto nl = rest.find('\n', start);
      overrides.push_back(rest.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  config::Config c;
  try {
    c = config::parse_config(text, "fuzz.yaml", overrides);
  } catch (const config::ConfigError&) {
    return;
  }
  const std::string yaml = config::to_yaml(c);
  config::Config back;
  try {
    back = config::parse_config(yaml, "fuzz-roundtrip.yaml");
  } catch (const config::ConfigError& e) {
    throw std::logic_error(std::string("to_yaml output does not parse: ") + e.what() + "\n" + yaml);
  }
  if (back != c) throw std::logic_error("to_yaml round trip changed the config:\n" + yaml);
}

/// Writes the bytes to `path`, then loads and inspects it.
inline void run_checkpoint_input(const std::uint8_t* data, std::size_t size, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!ok) throw std::runtime_error("cannot write " + path);
  try {
    io::Checkpoint ck = io::load_checkpoint(path);
    (void)ck;
  } catch (const qkv::Error&) {
  }
  try {
    (void)io::inspect(path);
  } catch (const qkv::Error&) {
  }
}

}  // namespace qkv::fuzz
