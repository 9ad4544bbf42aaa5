// The checkpoint header: a text block in the HDF5 user block, verified before HDF5 parses a byte.
// HDF5's own metadata checksums cover object headers but not dataset bytes, and HDF5 1.10.8 can
// crash on damaged metadata before any check of ours runs; a checksum over the whole file,
// checked first, turns every accidental damage into one clear error (docs/checkpoint.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "file_bytes.hpp"
#include "qkv/io/checkpoint.hpp"

namespace qkv::io {

namespace {

constexpr const char* kHdf5Signature = "\x89HDF\r\n\x1a\n";

// Tables of the reflected ECMA-182 polynomial for slicing-by-8 (Kounavis and Berry 2008): t[0] is
// the byte-wise table, t[k][i] the CRC of byte i followed by k zero bytes, so eight table lookups
// advance the CRC by eight bytes at once (about 5x the byte-wise loop; reading a checkpoint
// checks every byte of it).
using CrcTables = std::array<std::array<std::uint64_t, 256>, 8>;
const CrcTables& crc_tables() {
  static const CrcTables tables = [] {
    CrcTables t{};
    for (std::uint64_t i = 0; i < 256; ++i) {
      std::uint64_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0xC96C5795D7870F42ull : 0);
      t[0][i] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
      for (std::size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    return t;
  }();
  return tables;
}

bool starts_with(const std::string& s, const char* prefix, std::size_t n) {
  return s.size() >= n && std::memcmp(s.data(), prefix, n) == 0;
}

// "<key> <value>\n" at `at`; returns the value and moves `at` past the line, or "" on mismatch.
std::string header_field(const std::string& header, std::size_t& at, const std::string& key) {
  if (header.compare(at, key.size() + 1, key + " ") != 0) return "";
  const std::size_t start = at + key.size() + 1;
  const std::size_t nl = header.find('\n', start);
  if (nl == std::string::npos || nl - start > 20) return "";
  at = nl + 1;
  return header.substr(start, nl - start);
}

bool parse_unsigned(const std::string& text, int base, std::uint64_t& out) {
  if (text.empty() || text.size() > (base == 16 ? 16u : 19u)) return false;
  out = 0;
  for (char ch : text) {
    int d = ch >= '0' && ch <= '9' ? ch - '0' : base == 16 && ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0) return false;
    out = out * std::uint64_t(base) + std::uint64_t(d);
  }
  return true;
}

std::string converted_name(const std::string& path) {
  const bool h5 = path.size() > 3 && path.compare(path.size() - 3, 3, ".h5") == 0;
  return (h5 ? path.substr(0, path.size() - 3) : path) + ".v2.h5";
}

std::string hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::uint64_t checkpoint_checksum(const void* data, std::size_t size) {
  const CrcTables& t = crc_tables();
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t crc = ~std::uint64_t(0);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    std::uint64_t w = 0;  // the next eight bytes, the first in the low byte (any host byte order)
    for (int b = 7; b >= 0; --b) w = (w << 8) | p[i + b];
    w ^= crc;
    crc = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
          t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
  }
  for (; i < size; ++i) crc = t[0][(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string checkpoint_header(std::uint64_t file_bytes, std::uint64_t crc) {
  std::string h = std::string(kCheckpointFormat) + "\nformat_version " + std::to_string(kCheckpointVersion) +
                  "\nbytes " + std::to_string(file_bytes) + "\ncrc64-xz " + hex(crc) +
                  "\n# CRC-64/XZ of bytes 512 to the end (an HDF5 file with a 512-byte user block); "
                  "after editing the file on purpose: scripts/convert_checkpoint.py --reseal FILE\n";
  h.resize(kCheckpointHeaderBytes, '\0');
  return h;
}

void verify_checkpoint_image(const std::string& image, const std::string& path) {
  const std::string magic = std::string(kCheckpointFormat) + "\n";
  if (image.size() < magic.size() || image.compare(0, magic.size(), magic) != 0) {
    std::string msg = "not a qkv checkpoint (no qkv header in the first " + std::to_string(kCheckpointHeaderBytes) + " bytes";
    if (image.empty()) msg += "; the file is empty";
    msg += ")";
    if (starts_with(image, kHdf5Signature, 8))
      msg += ". It is an HDF5 file: a qkv checkpoint of format_version 1 (written by an older qkv) has no header; "
             "convert it with scripts/convert_checkpoint.py from the qkv sources (/usr/bin/python3 with h5py; it "
             "leaves the input as it is): scripts/convert_checkpoint.py " + path + " " + converted_name(path) +
             ". Any other HDF5 file is not a checkpoint";
    throw IoError(msg);
  }
  if (image.size() < kCheckpointHeaderBytes)
    throw IoError("truncated: " + std::to_string(image.size()) + " bytes, shorter than the " +
                  std::to_string(kCheckpointHeaderBytes) + "-byte qkv header");
  const std::string header = image.substr(0, kCheckpointHeaderBytes);
  std::size_t at = magic.size();
  std::uint64_t version = 0, bytes = 0, crc = 0;
  const std::string version_text = header_field(header, at, "format_version");
  if (!parse_unsigned(version_text, 10, version))
    throw IoError("damaged qkv header: expected 'format_version N' on line 2");
  if (version != std::uint64_t(kCheckpointVersion))
    throw IoError("checkpoint format_version " + version_text + " is not supported: this qkv reads format_version " +
                  std::to_string(kCheckpointVersion) + (version > std::uint64_t(kCheckpointVersion) ? " (was it written by a newer qkv?)" : ""));
  if (!parse_unsigned(header_field(header, at, "bytes"), 10, bytes))
    throw IoError("damaged qkv header: expected 'bytes N' on line 3");
  const std::string crc_text = header_field(header, at, "crc64-xz");
  if (crc_text.size() != 16 || !parse_unsigned(crc_text, 16, crc))
    throw IoError("damaged qkv header: expected 'crc64-xz' and 16 hex digits on line 4");
  if (image.size() < bytes)
    throw IoError("truncated: " + std::to_string(image.size()) + " bytes, header says " + std::to_string(bytes));
  if (image.size() > bytes)
    throw IoError("the file has " + std::to_string(image.size()) + " bytes, header says " + std::to_string(bytes) +
                  " (bytes appended after qkv wrote it?)");
  const std::uint64_t found = checkpoint_checksum(image.data() + kCheckpointHeaderBytes, image.size() - kCheckpointHeaderBytes);
  if (found != crc)
    throw IoError("checksum mismatch: the file is damaged or was modified after qkv wrote it (header says crc64-xz " +
                  crc_text + ", the bytes give " + hex(found) +
                  "); if you edited it on purpose (e.g. with h5py), reseal it: scripts/convert_checkpoint.py --reseal " + path);
}

void seal_checkpoint_file(const std::string& path) {
  std::string image;
  try {
    image = detail::read_whole_file(path);
  } catch (const IoError& e) {
    throw IoError("seal_checkpoint_file: " + path + ": " + e.what());
  }
  // The HDF5 superblock is found at byte 0 (no user block: put one in front) or at 512 (the user
  // block is ours to rewrite, whatever it holds).
  if (starts_with(image, kHdf5Signature, 8))
    image.insert(0, kCheckpointHeaderBytes, '\0');
  else if (image.size() < kCheckpointHeaderBytes + 8 || image.compare(kCheckpointHeaderBytes, 8, kHdf5Signature, 8) != 0)
    throw IoError("seal_checkpoint_file: " + path + ": neither a qkv checkpoint nor an HDF5 file (no HDF5 signature at byte 0 or 512)");
  const std::string header = checkpoint_header(
      image.size(), checkpoint_checksum(image.data() + kCheckpointHeaderBytes, image.size() - kCheckpointHeaderBytes));
  image.replace(0, kCheckpointHeaderBytes, header);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw IoError("seal_checkpoint_file: cannot create " + tmp + ": " + std::strerror(errno));
  for (std::size_t done = 0; done < image.size();) {
    const ssize_t n = ::write(fd, image.data() + done, image.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError("seal_checkpoint_file: cannot write " + tmp + ": " + std::strerror(err));
    }
    done += std::size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError("seal_checkpoint_file: cannot replace " + path + ": " + std::strerror(err));
  }
}


}  // namespace qkv::io
