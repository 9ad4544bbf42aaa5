#pragma once
/// @file
/// Seeded, counter-based random numbers.
///
/// A Generator is (seed, offset). Draw number i of a generator is a pure function of
/// (seed, offset + i) (SplitMix64 hashing), so that
///  - results never depend on the thread count or on which thread draws what;
///  - a fused kernel can recompute a dropout mask element from its index instead of storing it
///    (the fused and composite attention paths draw identical masks);
///  - the whole state is two integers, saved in checkpoints for exact resume.

#include <cstdint>

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
