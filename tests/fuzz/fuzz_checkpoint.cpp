// libFuzzer target: io::load_checkpoint and io::inspect on arbitrary bytes written to a
// temporary file (contract in targets.hpp). Seed the corpus with real checkpoints
// (fuzz_seeds writes them; tools/fuzz.sh runs it) so that mutations get past the HDF5
// signature into the metadata.
#include <cstdlib>

#include "h5_image.hpp"
#include "targets.hpp"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// libFuzzer's own mutation, then (three times in four) the object header checksums and qkv's
// whole-file header recomputed, so that a mutated attribute or datatype message gets past qkv's
// checksum and HDF5's and reaches the decoders and qkv's later checks (h5_image.hpp): a crafted
// file. The fourth time nothing is recomputed, which fuzzes the header check itself.
// QKV_FUZZ_RAW=1 recomputes nothing ever (damage as a disk or a truncated copy would make it:
// every such input must stop at the header check); QKV_FUZZ_RESEAL=0 recomputes HDF5's checksums
// but not qkv's header.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  static const bool raw = std::getenv("QKV_FUZZ_RAW") && *std::getenv("QKV_FUZZ_RAW") == '1';
  static const bool reseal = !(std::getenv("QKV_FUZZ_RESEAL") && *std::getenv("QKV_FUZZ_RESEAL") == '0');
  size = LLVMFuzzerMutate(data, size, max_size);
  if (!raw && seed % 4 != 0) {
    qkv::fuzz::fix_object_header_checksums(data, size);
    if (reseal) qkv::fuzz::reseal_qkv_header(data, size);
  }
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
