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
/// Element `counter` of stream `seed` is dropped iff
///
///   bits(counter) = fmix32(fmix32(lo ^ k1) ^ (hi * 0x9E3779B9) ^ k2) < threshold,
///
/// lo, hi the low and high 32 bits of counter, (k1, k2) the two halves of hash64(seed, "drop"),
/// threshold = round(p 2^32), so P(drop) = threshold / 2^32 (within 2^-33 of p). For a fixed
/// key this is a bijection of lo, so a stream has no short cycles; everything is 32-bit, so the
/// loop in apply() runs 8 (AVX2) or 16 (AVX-512) elements per instruction. (Until 2026-12-02
/// dropout used uniform_at(seed, counter) < p: one scalar 64-bit hash and a double compare per
/// element, 19% of a medium training step with the attention kernel's share, 4% now; the masks,
/// and so the results of runs with dropout, changed.)
class DropoutDraws {
 public:
  DropoutDraws(std::uint64_t seed, double p) {
    const std::uint64_t k = hash64(seed, 0x64726F70ull);  // "drop"
    k1_ = static_cast<std::uint32_t>(k);
    k2_ = static_cast<std::uint32_t>(k >> 32);
    const double t = p * 4294967296.0 + 0.5;
    threshold_ = t >= 4294967295.0 ? 0xFFFFFFFFu : t <= 0.0 ? 0u : static_cast<std::uint32_t>(t);
  }
  static std::uint32_t bits(std::uint32_t lo, std::uint32_t hi, std::uint32_t k1, std::uint32_t k2) {
    return fmix32(fmix32(lo ^ k1) ^ (hi * 0x9E3779B9u) ^ k2);
  }
  bool dropped(std::uint64_t counter) const {
    return bits(static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), k1_, k2_) < threshold_;
  }
  /// out[i] = dropped(first + i) ? 0 : in[i] * scale for i < n (in == out allowed).
  template <class T>
  void apply(const T* in, T* out, std::size_t n, std::uint64_t first, T scale) const {
    while (n > 0) {  // runs of counters with the same high half (one run unless 2^32 is crossed)
      const std::uint32_t lo = static_cast<std::uint32_t>(first), hi = static_cast<std::uint32_t>(first >> 32);
      const std::size_t run = std::min<std::uint64_t>(n, (std::uint64_t(1) << 32) - lo);
      const std::uint32_t k1 = k1_, k2 = k2_, t = threshold_;
#pragma omp simd
      for (std::size_t i = 0; i < run; ++i)
        out[i] = zero_unless(in[i] * scale, bits(lo + static_cast<std::uint32_t>(i), hi, k1, k2) >= t);
      in += run, out += run, n -= run, first += run;
    }
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
  /// Sharded (see set_shard), rank r of w gets first = offset + r n and the offset advances by w n.
  std::uint64_t reserve(std::uint64_t n) {
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
