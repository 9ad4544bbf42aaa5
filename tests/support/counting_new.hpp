#pragma once
// Replaces the global operator new/delete with versions that count every allocation, for the
// programs that measure heap use per training step (bench/bench_train.cpp and
// tests/alloc/test_alloc.cpp). Include it in exactly one translation unit of an executable: the
// replacement applies to the whole program, which is why those programs are executables of their
// own. In a QKV_SANITIZE build the operators are left to AddressSanitizer and the counter stays 0.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "qkv/kernels/bf16.hpp"

namespace qkv::test {
/// Calls of any operator new (plain, array, aligned, nothrow) since the program started, but for
/// those made inside oneDNN's bf16 matmul calls, which g_onednn_new_calls counts.
inline std::atomic<std::uint64_t> g_operator_new_calls{0};
inline std::atomic<std::uint64_t> g_onednn_new_calls{0};

inline void* counted_new(std::size_t n, std::size_t align) noexcept {
  (qkv::kernels::onednn_calls_in_progress() ? g_onednn_new_calls : g_operator_new_calls)
      .fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  return align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
}
inline void* counted_new_or_throw(std::size_t n, std::size_t align) {
  if (void* p = counted_new(n, align)) return p;
  throw std::bad_alloc();
}
}  // namespace qkv::test

#ifndef QKV_SANITIZE
void* operator new(std::size_t n) { return qkv::test::counted_new_or_throw(n, 0); }
void* operator new[](std::size_t n) { return qkv::test::counted_new_or_throw(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return qkv::test::counted_new_or_throw(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return qkv::test::counted_new_or_throw(n, std::size_t(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return qkv::test::counted_new(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return qkv::test::counted_new(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return qkv::test::counted_new(n, std::size_t(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return qkv::test::counted_new(n, std::size_t(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif
