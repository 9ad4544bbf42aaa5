#pragma once
// Byte-level edits of an HDF5 file image, for the checkpoint fuzzer and its damaged seeds.
//
// qkv checkpoints track creation order, so their groups have version-2 object headers ("OHDR",
// continued in "OCHK" chunks) protected by a checksum. A random mutation of a header message (an
// attribute's datatype, say) then only ever reaches HDF5's checksum check. Recomputing the
// checksums after mutating lets the mutated messages reach the decoders and qkv's checks.
// Checkpoints also start with qkv's own header (a 512-byte HDF5 user block with a CRC-64 of the
// whole file, checked before HDF5 runs): reseal_qkv_header recomputes it, so that a crafted file
// gets past it too. HDF5 addresses are relative to the superblock (byte 512 in a checkpoint).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "qkv/io/checkpoint.hpp"

// HDF5's metadata checksum (Jenkins' lookup3). libhdf5 exports it but declares it only in its
// private headers.
extern "C" std::uint32_t H5_checksum_metadata(const void* data, std::size_t len, std::uint32_t initval);

namespace qkv::fuzz {

inline std::uint64_t read_le(const std::uint8_t* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

inline void write_le(std::uint8_t* p, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i, v >>= 8) p[i] = static_cast<std::uint8_t>(v);
}

namespace detail {

// Walks the messages in [p, end) of a version-2 header chunk and fixes the checksums of the OCHK
// chunks that continuation messages (type 0x10: address, length; 8-byte offsets and lengths, as
// qkv's files have) point to. Anything that does not parse is left alone.
inline void fix_continuations(std::uint8_t* data, std::size_t size, std::size_t base, std::size_t p, std::size_t end,
                              bool crt_order, int depth) {
  const std::size_t head = crt_order ? 6 : 4;
  while (depth < 16 && p + head <= end) {
    const std::uint8_t type = data[p];
    const std::size_t len = read_le(data + p + 1, 2);
    p += head;
    if (p + len > end) return;
    if (type == 0x10 && len >= 16) {
      const std::uint64_t addr = read_le(data + p, 8) + base, clen = read_le(data + p + 8, 8);
      if (clen >= 8 && addr < size && clen <= size - addr && std::memcmp(data + addr, "OCHK", 4) == 0) {
        fix_continuations(data, size, base, addr + 4, addr + clen - 4, crt_order, depth + 1);
        write_le(data + addr + clen - 4, H5_checksum_metadata(data + addr, clen - 4, 0), 4);
      }
    }
    p += len;
  }
}

}  // namespace detail

/// Where the HDF5 superblock (and so address 0) is: byte 0, 512, 1024, ... (0 if none).
inline std::size_t superblock_offset(const std::uint8_t* data, std::size_t size) {
  for (std::size_t at = 0; at + 8 <= size; at = at ? at * 2 : 512)
    if (std::memcmp(data + at, "\x89HDF\r\n\x1a\n", 8) == 0) return at;
  return 0;
}

/// Recompute qkv's header (io::checkpoint_header) in place when the image starts with one; the
/// recorded length becomes the image's own.
inline void reseal_qkv_header(std::uint8_t* data, std::size_t size) {
  const std::size_t n = io::kCheckpointHeaderBytes;
  if (size < n || std::memcmp(data, io::kCheckpointFormat, std::strlen(io::kCheckpointFormat)) != 0) return;
  const std::string header = io::checkpoint_header(size, io::checkpoint_checksum(data + n, size - n));
  std::memcpy(data, header.data(), n);
}

/// Recompute the checksum of every version-2 object header ("OHDR" chunk 0 and its "OCHK"
/// continuation chunks) found in the image, in place.
inline void fix_object_header_checksums(std::uint8_t* data, std::size_t size) {
  const std::size_t base = superblock_offset(data, size);
  for (std::size_t at = 0; at + 4 <= size; ++at) {
    if (std::memcmp(data + at, "OHDR", 4) != 0) continue;
    std::size_t p = at + 4;
    if (p + 2 > size || data[p] != 2) continue;
    const std::uint8_t flags = data[p + 1];
    p += 2 + (flags & 0x20 ? 16 : 0) + (flags & 0x10 ? 4 : 0);
    const std::size_t width = std::size_t(1) << (flags & 3);
    if (p + width > size) continue;
    const std::uint64_t chunk = read_le(data + p, width);
    p += width;
    if (chunk > size || p + chunk + 4 > size) continue;
    detail::fix_continuations(data, size, base, p, p + chunk, flags & 0x04, 0);
    write_le(data + p + chunk, H5_checksum_metadata(data + at, p + chunk - at, 0), 4);
  }
}

/// Offset of the datatype of the attribute called `name` in an image: the datatype follows the
/// name's NUL in version 2 and 3 attribute messages (as qkv writes them). npos if not found.
inline std::size_t attribute_datatype(const std::string& image, const std::string& name) {
  const std::string key = name + '\0';
  for (std::size_t at = image.find(key); at != std::string::npos; at = image.find(key, at + 1)) {
    // The message starts 8 (version 3: 9) bytes before the name; its name size must match.
    for (std::size_t back : {std::size_t(8), std::size_t(9)})
      if (at >= back && read_le(reinterpret_cast<const std::uint8_t*>(image.data()) + at - back + 2, 2) == key.size())
        return at + key.size();
  }
  return std::string::npos;
}

}  // namespace qkv::fuzz
