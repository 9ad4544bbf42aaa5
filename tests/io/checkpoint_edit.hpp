#pragma once
// Helpers of the checkpoint tests: the loader's error text, and raw HDF5 edits of a saved file
// (to build damaged checkpoints).

#include <doctest/doctest.h>
#include <hdf5.h>

#include <string>

#include "qkv/io/checkpoint.hpp"

namespace qkv::test {

/// The IoError message of load_checkpoint(path), or "" if it loads.
inline std::string load_error(const std::string& path) {
  try {
    io::load_checkpoint(path);
  } catch (const io::IoError& e) {
    return e.what();
  }
  return "";
}

/// Opens `path` read-write with the HDF5 C API, calls f(file id), closes it, then reseals the
/// qkv header (io::seal_checkpoint_file), so the edit reaches the loader's checks after the
/// checksum (as a deliberately edited and resealed file would).
template <class F>
void edit(const std::string& path, F f) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  f(file);
  H5Fclose(file);
  io::seal_checkpoint_file(path);
}

}  // namespace qkv::test
