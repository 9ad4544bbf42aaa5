// libFuzzer target: io::load_checkpoint and io::inspect on arbitrary bytes written to a
// temporary file (contract in targets.hpp). Seed the corpus with real checkpoints
// (fuzz_seeds writes them; scripts/fuzz.sh runs it) so that mutations get past the HDF5
// signature into the metadata.
#include <cstdlib>

#include "h5_image.hpp"
#include "targets.hpp"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// libFuzzer's own mutation, then (three times in four) the object header checksums recomputed, so
// that a mutated attribute or datatype message reaches the decoders and qkv's checks instead of
// stopping at HDF5's checksum test (h5_image.hpp). QKV_FUZZ_RAW=1 turns the recomputation off:
// damage as a disk or a truncated copy would make it, rather than a crafted file.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  static const bool raw = std::getenv("QKV_FUZZ_RAW") && *std::getenv("QKV_FUZZ_RAW") == '1';
  size = LLVMFuzzerMutate(data, size, max_size);
  if (!raw && seed % 4 != 0) qkv::fuzz::fix_object_header_checksums(data, size);
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/qkv-fuzz-" + std::to_string(::getpid()) + ".h5";
  }();
  qkv::fuzz::run_checkpoint_input(data, size, path);
  return 0;
}
