// libFuzzer target: config::parse_config on arbitrary text plus `--set` overrides
// (layout and contract in targets.hpp).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qkv::fuzz::run_config_input(data, size);
  return 0;
}
