#include "qkv/tensor/allocator.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace qkv::pool {
namespace {

constexpr std::size_t kAlign = 64;
// Blocks above this many cached bytes in total go straight back to the system.
constexpr std::uint64_t kMaxCachedBytes = std::uint64_t{4} << 30;

struct Pool {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists;
  Stats stats;
  ~Pool() {
    for (auto& [bytes, list] : free_lists)
      for (void* p : list) std::free(p);
  }
};

Pool& the_pool() {
  static Pool* pool = new Pool;  // never destroyed: tensors may outlive static destructors
  return *pool;
}

// The size of the block that serves a request of `bytes`: a multiple of 64 bytes up to 4 KiB,
// above that one of 8 sizes per doubling (2^k + j 2^(k-3), j = 1..8, for 2^k < bytes <= 2^(k+1)),
// so that requests whose size changes a little from call to call (a sequence that grows by a
// token per generated token) reuse cached blocks instead of missing every time. At most 1/8 of a
// block goes unused. The same request always gets the same size, so a training step's steady
// state is unchanged.
std::size_t rounded(std::size_t bytes) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes <= 4096) return bytes;
  const int k = 63 - __builtin_clzll(bytes - 1);
  const std::size_t step = std::size_t(1) << (k - 3);
  return (bytes + step - 1) / step * step;
}

// Called with the pool's mutex held.
void count_allocation(Stats& s, std::size_t bytes) {
  s.in_use_bytes += bytes;
  s.peak_in_use_bytes = std::max(s.peak_in_use_bytes, s.in_use_bytes);
  s.largest_request = std::max<std::uint64_t>(s.largest_request, bytes);
}

void* system_allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(kAlign, bytes == 0 ? kAlign : bytes);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void* allocate(std::size_t bytes) {
  Pool& pool = the_pool();
#ifdef QKV_SANITIZE
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    count_allocation(pool.stats, rounded(bytes));
  }
  // The size asked for (a multiple of 64, as aligned_alloc requires), so that AddressSanitizer
  // sees an overrun past it.
  return system_allocate((bytes + kAlign - 1) / kAlign * kAlign);
#else
  bytes = rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    ++pool.stats.requests;
    count_allocation(pool.stats, bytes);
    auto it = pool.free_lists.find(bytes);
    if (it != pool.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      pool.stats.cached_bytes -= bytes;
      return p;
    }
    ++pool.stats.system_allocations;
  }
  return system_allocate(bytes);
#endif
}

void deallocate(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  bytes = rounded(bytes);  // as counted by allocate()
  Pool& pool = the_pool();
#ifdef QKV_SANITIZE
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.stats.in_use_bytes -= bytes;
  }
  std::free(p);
#else
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.stats.in_use_bytes -= bytes;
    if (pool.stats.cached_bytes + bytes <= kMaxCachedBytes) {
      try {
        pool.free_lists[bytes].push_back(p);
        pool.stats.cached_bytes += bytes;
        return;
      } catch (...) {
        // out of memory for the free list itself: fall through and free the block
      }
    }
  }
  std::free(p);
#endif
}

Stats stats() {
  Pool& pool = the_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  return pool.stats;
}

void reset_peak() {
  Pool& pool = the_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.stats.peak_in_use_bytes = pool.stats.in_use_bytes;
  pool.stats.largest_request = 0;
}

void release_cached() {
  Pool& pool = the_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  for (auto& [bytes, list] : pool.free_lists) {
    for (void* p : list) std::free(p);
    list.clear();
  }
  pool.stats.cached_bytes = 0;
}

}  // namespace qkv::pool
