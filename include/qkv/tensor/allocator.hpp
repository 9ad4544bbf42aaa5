#pragma once
/// @file
/// The memory behind every qkv tensor: 64-byte aligned blocks from a caching pool.
///
/// A training step allocates the same tensor sizes every step. The pool keeps freed blocks in
/// free lists by block size and hands them back on the next request, so that after the first step
/// the steady state makes no calls to the system allocator for tensor data (bench_train reports
/// it; tests/alloc checks it). Block sizes are multiples of 64 bytes up to 4 KiB and 8 sizes per
/// doubling above (at most 1/8 unused), so that slowly growing sizes (generation without the KV
/// cache, one token longer each step) reuse blocks too. Autograd nodes, index arrays, masks and per-call scratch vectors
/// use the pool too. Built with QKV_SANITIZE the pool is bypassed, so that AddressSanitizer sees
/// every allocation and free.

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace qkv {

namespace pool {
/// Aligned block of at least `bytes` bytes (64-byte alignment), from the cache when one fits.
void* allocate(std::size_t bytes);
/// Return a block obtained from allocate(bytes) with the same `bytes`.
void deallocate(void* p, std::size_t bytes) noexcept;
/// Counters since start: blocks requested by tensors, and blocks that had to come from the
/// system allocator (cache misses). Their difference is what the cache saved.
struct Stats {
  std::uint64_t requests = 0;
  std::uint64_t system_allocations = 0;
  std::uint64_t cached_bytes = 0;
  std::uint64_t in_use_bytes = 0;       ///< bytes of the blocks handed out and not yet returned (block sizes)
  std::uint64_t peak_in_use_bytes = 0;  ///< highest in_use_bytes since start or reset_peak()
  std::uint64_t largest_request = 0;    ///< largest block handed out since start or reset_peak()
};
Stats stats();
/// Restart peak_in_use_bytes (from the current in_use_bytes) and largest_request, to measure
/// the memory of one computation.
void reset_peak();
/// Free every cached block back to the system.
void release_cached();
}  // namespace pool

/// Standard-conforming allocator over the pool; the allocator of qkv::Array.
template <class T>
struct Allocator {
  using value_type = T;
  Allocator() noexcept = default;
  template <class U>
  Allocator(const Allocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(pool::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { pool::deallocate(p, n * sizeof(T)); }
  template <class U>
  struct rebind {
    using other = Allocator<U>;
  };
};
template <class T, class U>
bool operator==(const Allocator<T>&, const Allocator<U>&) noexcept {
  return true;
}
template <class T, class U>
bool operator!=(const Allocator<T>&, const Allocator<U>&) noexcept {
  return false;
}

/// A std::vector in pooled memory, for scratch buffers that an op or kernel needs on every call
/// (partial sums, index lists): from the second training step on they come from the cache.
template <class T>
using PooledVector = std::vector<T, Allocator<T>>;

/// n values of T in pooled memory, not initialised, returned to the pool when it goes out of scope:
/// a kernel's scratch whose every value is written before it is read (PooledVector when they must
/// start at zero). The pool's statistics count it like any tensor.
template <class T>
class PooledBuffer {
 public:
  explicit PooledBuffer(std::size_t n) : n_(n), p_(Allocator<T>().allocate(n)) {}
  ~PooledBuffer() { Allocator<T>().deallocate(p_, n_); }
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  T* data() const { return p_; }

 private:
  std::size_t n_;
  T* p_;
};

}  // namespace qkv
