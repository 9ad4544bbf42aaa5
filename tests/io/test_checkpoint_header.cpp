// The checkpoint header: a 512-byte text block in the HDF5 user block with the file's length and a
// CRC-64/XZ of every byte after it, verified before HDF5 parses anything (docs/checkpoint.md).
#include <doctest/doctest.h>
#include <hdf5.h>

#include <vector>

#include "io/checkpoint_edit.hpp"
#include "qkv/io/checkpoint.hpp"
#include "reliability/process.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::io;
using qkv::test::load_error;

namespace {

Checkpoint small() {
  Checkpoint ck;
  ck.step = 5;
  ck.config_yaml = "model:\n  d_model: 4\n";
  ck.model = {{"w", test::random_array<float>({4, 4}, 7)}};
  return ck;
}

// File offset of a contiguous dataset's bytes, read through plain HDF5 (user block included).
haddr_t dataset_offset(const std::string& path, const char* name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  const haddr_t at = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  REQUIRE(at != HADDR_UNDEF);
  return at;
}

}  // namespace

TEST_CASE("checkpoint header: CRC-64/XZ gives the catalogue check value") {
  // Check value from the CRC catalogue (reveng) for CRC-64/XZ, and the empty input.
  CHECK(checkpoint_checksum("123456789", 9) == 0x995DC9BBDF1939FAull);
  CHECK(checkpoint_checksum("", 0) == 0);
  CHECK(checkpoint_checksum("123456780", 9) != 0x995DC9BBDF1939FAull);
}

TEST_CASE("checkpoint header: the 8-bytes-at-a-time CRC equals the bit-wise definition at every length and offset") {
  // The definition, one bit at a time: reflected ECMA-182, initial value and final xor all ones.
  auto bitwise = [](const unsigned char* p, std::size_t n) {
    std::uint64_t crc = ~std::uint64_t(0);
    for (std::size_t i = 0; i < n; ++i) {
      crc ^= p[i];
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ ((crc & 1) ? 0xC96C5795D7870F42ull : 0);
    }
    return ~crc;
  };
  std::vector<unsigned char> bytes(300);
  std::uint64_t x = 88172645463325252ull;  // xorshift64: every byte value, no pattern of period 8
  for (auto& b : bytes) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x >> 56);
  }
  for (std::size_t offset = 0; offset < 8; ++offset)
    for (std::size_t n = 0; n + offset <= bytes.size(); n += 1 + n / 16) {
      CAPTURE(offset);
      CAPTURE(n);
      CHECK(checkpoint_checksum(bytes.data() + offset, n) == bitwise(bytes.data() + offset, n));
    }
}

TEST_CASE("checkpoint header: a saved file starts with a readable header and is a plain HDF5 file after it") {
  const std::string path = test::temp_dir("ckpt_header_layout") + "/c.h5";
  save_checkpoint(path, small());
  const std::string bytes = test::read_file(path);
  const std::string header = bytes.substr(0, kCheckpointHeaderBytes);
  CHECK(header.rfind("qkv-checkpoint\nformat_version 2\nbytes " + std::to_string(bytes.size()) + "\ncrc64-xz ", 0) == 0);
  CHECK(header.find("--reseal") != std::string::npos);
  CHECK(header.find_first_of(std::string(1, '\0')) == header.find_last_not_of(std::string(1, '\0')) + 1);  // NUL-padded
  CHECK(bytes.compare(kCheckpointHeaderBytes, 8, "\x89HDF\r\n\x1a\n") == 0);
  // HDF5's default driver opens the file itself and reports the 512-byte user block.
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t fcpl = H5Fget_create_plist(f);
  hsize_t userblock = 0;
  H5Pget_userblock(fcpl, &userblock);
  CHECK(userblock == kCheckpointHeaderBytes);
  H5Pclose(fcpl);
  H5Fclose(f);
  CHECK(load_checkpoint(path).step == 5);
  CHECK(inspect(path).find("qkv header and checksum verified") != std::string::npos);
}

TEST_CASE("checkpoint header: one flipped bit in a float dataset is a checksum error") {
  // Before the whole-file checksum this file loaded without any error, with one parameter silently
  // changed (HDF5's checksums cover metadata, not dataset bytes): the resealed copy below shows it.
  const std::string dir = test::temp_dir("ckpt_header_flip");
  const std::string path = dir + "/c.h5";
  const Checkpoint ck = small();
  save_checkpoint(path, ck);
  std::string bytes = test::read_file(path);
  const haddr_t at = dataset_offset(path, "/model/w");
  REQUIRE(at >= kCheckpointHeaderBytes);
  REQUIRE(at + 16 * sizeof(float) <= bytes.size());
  bytes[at + 5] ^= 0x04;
  test::write_file(path, bytes);
  const std::string msg = load_error(path);
  CHECK(msg.find("load_checkpoint: " + path + ": checksum mismatch: the file is damaged or was modified after qkv wrote it") == 0);
  CHECK(msg.find("scripts/convert_checkpoint.py --reseal " + path) != std::string::npos);
  CHECK_THROWS_WITH_AS(inspect(path), doctest::Contains("checksum mismatch"), IoError);

  seal_checkpoint_file(path);  // what the checksum guards against: it loads, with another value
  const Checkpoint wrong = load_checkpoint(path);
  CHECK_FALSE(test::bitwise_equal(wrong.model[0].second, ck.model[0].second));
}

TEST_CASE("checkpoint header: truncation, a missing header and a wrong length are named") {
  const std::string dir = test::temp_dir("ckpt_header_damage");
  const std::string good = dir + "/good.h5", bad = dir + "/bad.h5";
  save_checkpoint(good, small());
  const std::string bytes = test::read_file(good);
  const std::string n = std::to_string(bytes.size());

  test::write_file(bad, bytes.substr(0, bytes.size() - 1));
  CHECK(load_error(bad) == "load_checkpoint: " + bad + ": truncated: " + std::to_string(bytes.size() - 1) +
                               " bytes, header says " + n);

  test::write_file(bad, bytes.substr(kCheckpointHeaderBytes));  // the bare HDF5 file
  std::string msg = load_error(bad);
  CHECK(msg.find("load_checkpoint: " + bad + ": not a qkv checkpoint (no qkv header in the first 512 bytes). It is an HDF5 file") == 0);
  test::write_file(bad, std::string(kCheckpointHeaderBytes, '\0') + bytes.substr(kCheckpointHeaderBytes));  // a zeroed header
  CHECK(load_error(bad).find("not a qkv checkpoint (no qkv header") != std::string::npos);

  for (long delta : {10L, -10L}) {
    CAPTURE(delta);
    std::string edited = bytes;
    const std::string said = std::to_string(long(bytes.size()) + delta);
    const std::size_t at = edited.find("bytes " + n + "\n");
    REQUIRE(at < kCheckpointHeaderBytes);
    edited.replace(at, 6 + n.size(), "bytes " + said);
    edited.resize(bytes.size());  // keep the file length; the header shifts by at most 1 char
    test::write_file(bad, edited);
    msg = load_error(bad);
    if (delta > 0) CHECK(msg == "load_checkpoint: " + bad + ": truncated: " + n + " bytes, header says " + said);
    else CHECK(msg.find("load_checkpoint: " + bad + ": the file has " + n + " bytes, header says " + said) == 0);
  }

  std::string edited = bytes;
  edited.replace(edited.find("format_version 2"), 16, "format_version 7");
  test::write_file(bad, edited);
  CHECK(load_error(bad).find("checkpoint format_version 7 is not supported: this qkv reads format_version 2 (was it written by a newer qkv?)") !=
        std::string::npos);
  edited = bytes;
  edited.replace(edited.find("crc64-xz ") + 9, 4, "zzzz");
  test::write_file(bad, edited);
  CHECK(load_error(bad).find("damaged qkv header: expected 'crc64-xz' and 16 hex digits on line 4") != std::string::npos);
  CHECK(load_checkpoint(good).step == 5);
}

TEST_CASE("checkpoint header: a file edited on purpose loads again once resealed") {
  const std::string dir = test::temp_dir("ckpt_header_reseal");
  const std::string path = dir + "/c.h5";
  save_checkpoint(path, small());
  // The edit h5py would make ("f['model/w'][0, 0] = 42"), through the same HDF5 library.
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t d = H5Dopen2(f, "/model/w", H5P_DEFAULT);
  std::vector<float> w(16);
  REQUIRE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.data()) >= 0);
  w[0] = 42.0f;
  REQUIRE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w.data()) >= 0);
  H5Dclose(d);
  H5Fclose(f);
  CHECK(load_error(path).find("checksum mismatch") != std::string::npos);
  seal_checkpoint_file(path);
  CHECK(load_checkpoint(path).model[0].second(0, 0) == 42.0f);

  // A bare HDF5 file gets a header put in front; anything else is refused.
  const std::string bare = dir + "/bare.h5";
  test::write_file(bare, test::read_file(path).substr(kCheckpointHeaderBytes));
  seal_checkpoint_file(bare);
  CHECK(load_checkpoint(bare).model[0].second(0, 0) == 42.0f);
  test::write_file(bare, "not hdf5 at all");
  CHECK_THROWS_WITH_AS(seal_checkpoint_file(bare), doctest::Contains("neither a qkv checkpoint nor an HDF5 file"), IoError);
  CHECK(test::read_file(bare) == "not hdf5 at all");
}
