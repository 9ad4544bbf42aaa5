// libFuzzer target: io::load_checkpoint and io::inspect on arbitrary bytes written to a
// temporary file (contract in targets.hpp). Seed the corpus with real checkpoints
// (fuzz_seeds writes them; scripts/fuzz.sh runs it) so that mutations get past the HDF5
// signature into the metadata.
#include <cstdlib>

#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/qkv-fuzz-" + std::to_string(::getpid()) + ".h5";
  }();
  qkv::fuzz::run_checkpoint_input(data, size, path);
  return 0;
}
