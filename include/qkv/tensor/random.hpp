#pragma once
/// @file
/// Seeded, counter-based random numbers.
///
/// A Generator is (seed, offset). Draw number i of a generator is a pure function of
/// (seed, offset + i) (SplitMix64 hashing), so that
///  - results never depend on the thread count or on which thread draws what;
///  - a fused kernel can recompute a dropout mask element from its index instead of storing it
///    (the fused and composite attention paths draw identical masks; see DropoutDraws);
///  - the whole state is two integers, saved in checkpoints for exact resume.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace qkv {

/// SplitMix64 finaliser of (seed, counter): 64 well-mixed bits.
inline std::uint64_t hash64(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// Uniform in [0, 1) with 24 random bits (exactly representable in float and double).
inline double uniform_at(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<double>(hash64(seed, counter) >> 40) * (1.0 / 16777216.0);
}

/// murmur3's 32-bit finaliser: a bijection of 32 bits in which every input bit flips every
/// output bit with probability about 1/2.
inline std::uint32_t fmix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  return x ^ (x >> 16);
}

/// Dropout's decisions, the one definition that qkv::dropout and the fused attention kernel share.
/// Counters come in blocks of 32, and each 32-bit hash decides two elements of a block, 16 bits
/// each: element `counter` of stream `seed` is dropped iff u(counter) < threshold, where
///
///   g        = 16 (counter / 32) + counter mod 16      (the hash that decides this counter)
///   bits(g)  = fmix32(fmix32(lo ^ k1) ^ (hi * 0x9E3779B9) ^ k2)
///   u        = the low 16 bits of bits(g) if counter mod 32 < 16, else the high 16 bits,
///
/// lo, hi the low and high 32 bits of g, (k1, k2) the two halves of hash64(seed, "drop"),
/// threshold = round(p 2^16), at most 2^16 - 1, so P(drop) = threshold / 2^16 (within 2^-17 of
/// p). For a fixed key bits() is a bijection of lo, so a stream has no short cycles. A block's 16
/// hashes are one AVX-512 vector (two AVX2 ones) and decide 32 elements with no shuffle, so
/// apply() costs half a hash per element, all in 32-bit lanes. History: until 2026-12-02 dropout
/// used uniform_at(seed, counter) < p (a scalar 64-bit hash and a double compare per element);
/// until 2026-12-04 one 32-bit hash per element with a 32-bit threshold (bits(counter) <
/// round(p 2^32)). Each change changed the masks, and so the results of runs with dropout.
class DropoutDraws {
 public:
  /// Counters per block; Generator::reserve(n, kBlock) starts a mask on a whole block.
  static constexpr std::uint64_t kBlock = 32;
  DropoutDraws(std::uint64_t seed, double p) {
    const std::uint64_t k = hash64(seed, 0x64726F70ull);  // "drop"
    k1_ = static_cast<std::uint32_t>(k);
    k2_ = static_cast<std::uint32_t>(k >> 32);
    const double t = p * 65536.0 + 0.5;
    threshold_ = t >= 65535.0 ? 0xFFFFu : t <= 0.0 ? 0u : static_cast<std::uint32_t>(t);
  }
  static std::uint32_t bits(std::uint32_t lo, std::uint32_t hi, std::uint32_t k1, std::uint32_t k2) {
    return fmix32(fmix32(lo ^ k1) ^ (hi * 0x9E3779B9u) ^ k2);
  }
  /// The hash index g that decides `counter`, and which half of its bits (0 low, 1 high).
  static std::uint64_t hash_index(std::uint64_t counter) { return (counter >> 5 << 4) | (counter & 15); }
  static unsigned half(std::uint64_t counter) { return unsigned(counter >> 4) & 1u; }
  bool dropped(std::uint64_t counter) const {
    const std::uint64_t g = hash_index(counter);
    const std::uint32_t h = bits(static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32), k1_, k2_);
    return (half(counter) ? h >> 16 : h & 0xFFFFu) < threshold_;
  }
  /// out[i] = dropped(first + i) ? 0 : in[i] * scale for i < n (in == out allowed).
  template <class T>
  void apply(const T* in, T* out, std::size_t n, std::uint64_t first, T scale) const {
    std::size_t i = 0;
    if (const std::size_t j0 = first & 31; j0 != 0 && n > 0) {  // the first block, in part
      i = std::min<std::size_t>(32 - j0, n);
      apply_part(in, out, first - j0, j0, i, scale);
    }
    const std::uint32_t k1 = k1_, k2 = k2_, t = threshold_;
    for (; i + 32 <= n; i += 32) {  // whole blocks: 16 hashes, 32 decisions
      const std::uint64_t g0 = hash_index(first + i);  // a multiple of 16: lo + 15 does not wrap
      const std::uint32_t lo = static_cast<std::uint32_t>(g0), hi = static_cast<std::uint32_t>(g0 >> 32);
      alignas(64) std::uint32_t h[16];
#pragma omp simd
      for (std::uint32_t l = 0; l < 16; ++l) h[l] = bits(lo + l, hi, k1, k2);
      const T* x = in + i;
      T* y = out + i;
#pragma omp simd
      for (std::size_t l = 0; l < 16; ++l) {
        y[l] = zero_unless(x[l] * scale, (h[l] & 0xFFFFu) >= t);
        y[l + 16] = zero_unless(x[l + 16] * scale, (h[l] >> 16) >= t);
      }
    }
    if (i < n) apply_part(in + i, out + i, first + i, 0, n - i, scale);  // the last block, in part
  }
  std::uint32_t threshold() const { return threshold_; }

  /// x if keep, else +0, by masking x's bits: GCC 12 vectorises this, not `keep ? x : 0`.
  template <class T>
  static T zero_unless(T x, bool keep) {
    using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    static_assert(sizeof(T) == sizeof(Bits));
    Bits bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits &= Bits(0) - Bits(keep);
    std::memcpy(&x, &bits, sizeof bits);
    return x;
  }

 private:
  // Elements j0 .. j0 + m - 1 of the block of 32 counters at `block_first` (a multiple of 32),
  // read from in[0 ..] and written to out[0 ..].
  template <class T>
  void apply_part(const T* in, T* out, std::uint64_t block_first, std::size_t j0, std::size_t m, T scale) const {
    const std::uint64_t g0 = hash_index(block_first);
    const std::uint32_t lo = static_cast<std::uint32_t>(g0), hi = static_cast<std::uint32_t>(g0 >> 32);
    const std::uint32_t k1 = k1_, k2 = k2_, t = threshold_;
    alignas(64) std::uint32_t keep[32];
#pragma omp simd
    for (std::uint32_t l = 0; l < 16; ++l) {
      const std::uint32_t h = bits(lo + l, hi, k1, k2);
      keep[l] = (h & 0xFFFFu) >= t;
      keep[l + 16] = (h >> 16) >= t;
    }
    const std::uint32_t* k = keep + j0;
#pragma omp simd
    for (std::size_t j = 0; j < m; ++j) out[j] = zero_unless(in[j] * scale, k[j] != 0);
  }

  std::uint32_t k1_ = 0, k2_ = 0, threshold_ = 0;
};

/// Random state: a seed and a position in its stream.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}

  std::uint64_t seed() const { return seed_; }
  std::uint64_t offset() const { return offset_; }
  /// Restore a state saved with seed() and offset().
  void set_state(std::uint64_t seed, std::uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  void manual_seed(std::uint64_t seed) { set_state(seed, 0); }

  /// Reserve n draws: returns the first counter; draw i is uniform_at(seed(), first + i).
  /// The offset is first rounded up to a multiple of `align` (dropout reserves with
  /// DropoutDraws::kBlock, so that its rows start on whole blocks). Sharded (see set_shard), rank
  /// r of w gets first = offset + r n and the offset advances by w n.
  std::uint64_t reserve(std::uint64_t n, std::uint64_t align = 1) {
    offset_ = (offset_ + align - 1) / align * align;
    std::uint64_t first = offset_ + shard_rank_ * n;
    offset_ += shard_world_ * n;
    return first;
  }
  /// Data parallelism: process `rank` of `world` holds rows [rank b, (rank+1) b) of every
  /// batch-major tensor of a global batch of world * b rows. Sharding makes reserve() hand each
  /// process the draws of its rows in the whole tensor, so dropout masks (and so the training
  /// trajectory) do not depend on how the batch is split across processes.
  void set_shard(std::uint64_t rank, std::uint64_t world) {
    shard_rank_ = rank;
    shard_world_ = world;
  }
  std::uint64_t next_u64() { return hash64(seed_, offset_++); }
  /// Uniform in [0, 1).
  double uniform() { return uniform_at(seed_, offset_++); }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Integer uniform in [0, n).
  std::uint64_t randint(std::uint64_t n) { return next_u64() % n; }
  /// Standard normal (Box-Muller, two draws per value).
  double normal();

 private:
  std::uint64_t seed_ = 0;
  std::uint64_t offset_ = 0;
  std::uint64_t shard_rank_ = 0, shard_world_ = 1;
};

/// The process-wide generator used by dropout when no generator is given; seeded by the trainer.
Generator& default_generator();
/// Seed the default generator.
void manual_seed(std::uint64_t seed);

}  // namespace qkv
