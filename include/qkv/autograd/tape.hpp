#pragma once
/// @file
/// The tape: a thread-local list of backward closures, recorded as ops run, walked in reverse by
/// backward(), then released. That is the whole autograd engine.
///
/// The closures live in an arena owned by the tape: chunks of memory kept from one step to the
/// next, so that recording a step that has the same ops as the previous one allocates nothing.

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace qkv::autograd {

/// Bump allocator over chunks that are kept when it is reset: after the first round of a
/// repeated sequence of requests, the same requests are served from the same chunks. Requests
/// larger than a chunk get a chunk of their own. (Built with QKV_SANITIZE, reset() frees the
/// chunks, so that AddressSanitizer sees a use of a released closure.)
class Arena {
 public:
  /// Bytes of a regular chunk.
  static constexpr std::size_t kChunkBytes = 64 * 1024;
  /// Largest alignment allocate() serves.
  static constexpr std::size_t kMaxAlign = 64;

  Arena() = default;
  ~Arena() { release(); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  /// `bytes` bytes aligned to `align` (a power of two <= kMaxAlign), valid until reset().
  void* allocate(std::size_t bytes, std::size_t align);
  /// Make every chunk available again from the start (nothing is freed).
  void reset();
  /// Free every chunk.
  void release() noexcept;
  /// Chunks held (a count that stops growing once a repeated sequence of requests fits).
  std::size_t chunks() const { return chunks_.size(); }

 private:
  struct Chunk {
    char* data;
    std::size_t size;
  };
  std::vector<Chunk> chunks_;
  std::size_t current_ = 0;  // chunk being filled
  std::size_t used_ = 0;     // bytes of it handed out
};

/// Records one backward closure per differentiable op, in execution order.
class Tape {
 public:
  Tape() = default;
  ~Tape() { clear(); }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  /// The tape of the calling thread.
  static Tape& current();

  /// Append an op's backward closure (any callable `void()`, moved or copied into the tape's
  /// arena); returns its position on the tape.
  template <class F>
  std::size_t record(F&& backward);
  /// Run every closure from the last to the first, destroying each (and what it holds) as soon as
  /// it has run, then release the tape. Closures skip themselves when their output got no
  /// gradient. The tape is released even when a closure throws.
  void run_backward();
  /// Drop every record without running it (e.g. after an evaluation done with grad enabled):
  /// each closure is destroyed once, last recorded first, and the arena is reset for reuse.
  void clear();

  std::size_t size() const { return records_.size(); }
  /// Incremented whenever the tape is released: values recorded under an older generation can no
  /// longer be differentiated.
  std::uint64_t generation() const { return generation_; }
  /// The memory the closures live in (exposed for tests and benchmarks).
  const Arena& arena() const { return arena_; }

 private:
  // A type-erased closure in the arena.
  struct Record {
    void* fn;
    void (*run)(void*);
    void (*destroy)(void*) noexcept;
  };
  template <class Fn>
  static void run_fn(void* p) {
    (*static_cast<Fn*>(p))();
  }
  template <class Fn>
  static void destroy_fn(void* p) noexcept {
    static_cast<Fn*>(p)->~Fn();
  }

  std::vector<Record> records_;
  Arena arena_;
  std::uint64_t generation_ = 0;
};

template <class F>
std::size_t Tape::record(F&& backward) {
  using Fn = std::decay_t<F>;
  static_assert(alignof(Fn) <= Arena::kMaxAlign, "Tape::record: closure alignment above Arena::kMaxAlign");
  Fn* fn = new (arena_.allocate(sizeof(Fn), alignof(Fn))) Fn(std::forward<F>(backward));
  try {
    records_.push_back(Record{fn, &run_fn<Fn>, &destroy_fn<Fn>});
  } catch (...) {
    fn->~Fn();
    throw;
  }
  return records_.size() - 1;
}

/// Whether ops record onto the tape (false inside a NoGradGuard).
bool grad_enabled();

/// RAII: no op records while the guard lives (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace qkv::autograd

namespace qkv {
using autograd::NoGradGuard;
}
