#pragma once
/// @file
/// The tape: a thread-local list of backward closures, recorded as ops run, walked in reverse by
/// backward(), then released. That is the whole autograd engine.

#include <cstdint>
#include <functional>
#include <vector>

namespace qkv::autograd {

/// Records one backward closure per differentiable op, in execution order.
class Tape {
 public:
  /// The tape of the calling thread.
  static Tape& current();

  /// Append an op's backward closure; returns its position on the tape.
  std::size_t record(std::function<void()> backward);
  /// Run every closure from the last to the first, then release the tape (closures and the
  /// intermediate values they hold). Closures skip themselves when their output got no gradient.
  void run_backward();
  /// Drop every record without running it (e.g. after an evaluation done with grad enabled).
  void clear();

  std::size_t size() const { return records_.size(); }
  /// Incremented whenever the tape is released: values recorded under an older generation can no
  /// longer be differentiated.
  std::uint64_t generation() const { return generation_; }

 private:
  std::vector<std::function<void()>> records_;
  std::uint64_t generation_ = 0;
};

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
