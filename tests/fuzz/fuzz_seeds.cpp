// Writes seed checkpoints for the checkpoint fuzzer into the directory given as argv[1]: a small
// complete one, one with empty groups, one with several tensors per group, and damaged copies of
// the small one ("damaged-*.h5") whose strings declare sizes they do not have. The damaged ones
// are also kept in tests/fuzz/regressions/checkpoint/ (without the prefix), so the test suite
// replays them: each must be refused with an IoError before HDF5 reads or allocates the string.
// Every damaged seed is resealed (a valid qkv header and checksum), so it reaches those checks.
#include <hdf5.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "h5_image.hpp"
#include "qkv/io/checkpoint.hpp"

using namespace qkv;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// `seed` with the 4-byte size field of attribute `name`'s datatype set to `size` (checksums fixed).
void patch_attribute_size(const std::string& seed, const std::string& name, std::uint32_t size, const std::string& out) {
  std::string image = read_bytes(seed);
  const std::size_t type = fuzz::attribute_datatype(image, name);
  if (type == std::string::npos) throw std::runtime_error("no attribute " + name + " in " + seed);
  auto* bytes = reinterpret_cast<std::uint8_t*>(image.data());
  fuzz::write_le(bytes + type + 4, size, 4);
  fuzz::fix_object_header_checksums(bytes, image.size());
  write_bytes(out, image);
  io::seal_checkpoint_file(out);
}

template <class F>
void edit(const std::string& path, F f) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) throw std::runtime_error("cannot open " + path);
  f(file);
  H5Fclose(file);
  io::seal_checkpoint_file(path);
}

void write_damaged(const std::string& dir, const std::string& seed) {
  // /config declares a 4 GiB fixed-length string and stores nothing (the version-2 form of
  // regressions/checkpoint/config-string-declares-4GiB.h5, where a variable-length length did).
  const std::string config = dir + "/damaged-config-fixed-string-declares-4GiB.h5";
  write_bytes(config, read_bytes(seed));
  edit(config, [](hid_t f) {
    H5Ldelete(f, "/config", H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 0xFFFFFFF0u);
    hid_t space = H5Screate(H5S_SCALAR);
    H5Dclose(H5Dcreate2(f, "/config", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Sclose(space);
    H5Tclose(t);
  });
  // Root attributes whose datatype declares more bytes than the attribute stores.
  patch_attribute_size(seed, "format", 0xFFFFFFF0u, dir + "/damaged-format-attribute-declares-4GiB.h5");
  patch_attribute_size(seed, "format", 64, dir + "/damaged-format-attribute-declares-64-bytes.h5");
  patch_attribute_size(seed, "format_version", 16, dir + "/damaged-format-version-declares-16-bytes.h5");
  // `format` rewritten as a variable-length string whose length in the global heap says 100 MB
  // (the version-2 form of regressions/checkpoint/vlen-attribute-memcpy-overlap-in-hdf5.h5).
  const std::string vlen = dir + "/damaged-format-attribute-vlen-heap-length.h5";
  write_bytes(vlen, read_bytes(seed));
  edit(vlen, [](hid_t f) {
    H5Adelete(f, "format");
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "format", t, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* value = io::kCheckpointFormat;
    H5Awrite(a, t, &value);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(t);
  });
  std::string image = read_bytes(vlen);
  // In the global heap (GCOL), past the qkv header (which starts with the same text).
  const std::size_t at = image.find(io::kCheckpointFormat, io::kCheckpointHeaderBytes);
  if (at == std::string::npos || at < 8) throw std::runtime_error("no heap object in " + vlen);
  fuzz::write_le(reinterpret_cast<std::uint8_t*>(image.data()) + at - 8, 0x600000e, 8);
  write_bytes(vlen, image);
  io::seal_checkpoint_file(vlen);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  io::Checkpoint empty;
  io::save_checkpoint(dir + "/empty.h5", empty);

  io::Checkpoint small;
  small.step = 7;
  small.config_yaml = "model:\n  d_model: 4\n";
  small.model = {{"embed.weight", full<float>({3, 4}, 0.5f)}, {"scalar", full<float>(Shape{}, 1.0f)}};
  small.optimizer_step = 7;
  small.optimizer = {{"exp_avg/embed.weight", full<float>({3, 4}, 0.25f)}};
  small.rng = {{"data", {1, 2}}};
  small.scalars = {{"best_accuracy", 0.5}};
  small.metrics = {{"step", {1, 2, 3}}, {"loss", {3.0, 2.0, 1.0}}};
  io::save_checkpoint(dir + "/small.h5", small);

  // Payloads at the edges of float32, and payloads that are not finite: the loader must refuse a
  // NaN or an infinity in a weight or an optimizer buffer, naming it (kept in
  // tests/fuzz/regressions/checkpoint/ as finite-extremes.h5 and nonfinite-*.h5).
  io::Checkpoint extremes = small;
  extremes.model[0].second = full<float>({3, 4}, std::numeric_limits<float>::max());
  extremes.model[0].second(1, 2) = std::numeric_limits<float>::lowest();
  extremes.model[0].second(2, 3) = std::numeric_limits<float>::denorm_min();
  io::save_checkpoint(dir + "/finite-extremes.h5", extremes);
  io::Checkpoint nan_weight = small;
  nan_weight.model[0].second(2, 1) = std::numeric_limits<float>::quiet_NaN();
  io::save_checkpoint(dir + "/nonfinite-weight-nan.h5", nan_weight);
  io::Checkpoint inf_moment = small;
  inf_moment.optimizer[0].second(0, 3) = -std::numeric_limits<float>::infinity();
  io::save_checkpoint(dir + "/nonfinite-moment-inf.h5", inf_moment);

  io::Checkpoint wide = small;
  for (int i = 0; i < 6; ++i)
    wide.model.emplace_back("blocks." + std::to_string(i) + ".w", full<float>({2, 2}, static_cast<float>(i)));
  wide.metrics.emplace_back("accuracy", std::vector<double>(20, 0.25));
  io::save_checkpoint(dir + "/wide.h5", wide);

  try {
    write_damaged(dir, dir + "/small.h5");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
