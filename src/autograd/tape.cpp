#include "qkv/autograd/tape.hpp"

namespace qkv::autograd {
namespace {
thread_local bool g_grad_enabled = true;
}

Tape& Tape::current() {
  thread_local Tape tape;
  return tape;
}

std::size_t Tape::record(std::function<void()> backward) {
  records_.push_back(std::move(backward));
  return records_.size() - 1;
}

void Tape::run_backward() {
  // Closures may not record (they run with grad disabled), so the vector is stable here.
  // The tape is released even when a closure throws, so that a failed backward leaves no stale
  // records for the next one to run.
  NoGradGuard guard;
  struct Release {
    Tape& tape;
    ~Release() { tape.clear(); }
  } release{*this};
  for (std::size_t i = records_.size(); i-- > 0;) records_[i]();
}

void Tape::clear() {
  records_.clear();
  ++generation_;
}

bool grad_enabled() { return g_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

}  // namespace qkv::autograd
