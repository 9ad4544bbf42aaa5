#include "qkv/autograd/tape.hpp"

#include <algorithm>

namespace qkv::autograd {
namespace {
thread_local bool g_grad_enabled = true;
}

// ---- Arena ----

void* Arena::allocate(std::size_t bytes, std::size_t align) {
  // Walk forward through the kept chunks: a step that repeats the previous one's requests finds
  // every closure a place in the same chunk as last time.
  for (; current_ < chunks_.size(); ++current_, used_ = 0) {
    const Chunk& c = chunks_[current_];
    const std::size_t at = (used_ + align - 1) & ~(align - 1);
    if (at <= c.size && bytes <= c.size - at) {
      used_ = at + bytes;
      return c.data + at;
    }
  }
  const std::size_t size = std::max(kChunkBytes, bytes);
  void* p = ::operator new(size, std::align_val_t{kMaxAlign});
  try {
    chunks_.push_back(Chunk{static_cast<char*>(p), size});
  } catch (...) {
    ::operator delete(p, std::align_val_t{kMaxAlign});
    throw;
  }
  current_ = chunks_.size() - 1;
  used_ = bytes;
  return p;
}

void Arena::reset() {
#ifdef QKV_SANITIZE
  release();
#endif
  current_ = 0;
  used_ = 0;
}

void Arena::release() noexcept {
  for (const Chunk& c : chunks_) ::operator delete(c.data, std::align_val_t{kMaxAlign});
  chunks_.clear();
  current_ = 0;
  used_ = 0;
}

// ---- Tape ----

Tape& Tape::current() {
  thread_local Tape tape;
  return tape;
}

void Tape::run_backward() {
  // Closures may not record (they run with grad disabled), so the records are stable here. Each
  // record is destroyed as soon as it has run, so that what it held (inputs' values, saved
  // statistics) is freed during backward rather than after it. The tape is released even when a
  // closure throws, so that a failed backward leaves no stale records for the next one to run.
  NoGradGuard guard;
  struct Release {
    Tape& tape;
    ~Release() { tape.clear(); }
  } release{*this};
  while (!records_.empty()) {
    Record& r = records_.back();
    r.run(r.fn);
    r.destroy(r.fn);
    records_.pop_back();
  }
}

void Tape::clear() {
  // Destroyed in the reverse of their construction order; the arena memory is then reused by
  // the next recording.
  for (std::size_t i = records_.size(); i-- > 0;) records_[i].destroy(records_[i].fn);
  records_.clear();
  arena_.reset();
  ++generation_;
}

bool grad_enabled() { return g_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

}  // namespace qkv::autograd
