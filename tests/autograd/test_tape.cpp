#include <doctest/doctest.h>

#include <array>
#include <cstdint>

#include "qkv/autograd/tape.hpp"
#include "qkv/autograd/variable.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/tensor/allocator.hpp"
#include "test_util.hpp"

using namespace qkv;
using autograd::Tape;

namespace {
Variable<double> leaf(std::vector<double> v, bool requires_grad = true) {
  const std::size_t n = v.size();
  return Variable<double>(from_vector<double>(v, {n}), requires_grad);
}
}  // namespace

TEST_CASE("tape: backward on a scalar fills leaf gradients") {
  Variable<double> x = leaf({1, 2, 3}), w = leaf({4, 5, 6});
  Variable<double> y = sum(mul(x, w));
  CHECK(y.item() == 32.0);
  y.backward();
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(x.grad()(i) == w.value()(i));
    CHECK(w.grad()(i) == x.value()(i));
  }
  CHECK(y.grad()(0) == 1.0);  // the root keeps its seed
}

TEST_CASE("tape: a non-scalar output needs an explicit upstream gradient") {
  Variable<double> x = leaf({1, 2, 3});
  Variable<double> y = mul_scalar(x, 2.0);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward: output of shape (3) is not a scalar"), ShapeError);
  Tape::current().clear();

  Variable<double> z = mul_scalar(x, 2.0);
  z.backward(from_vector<double>({1, 10, 100}, {3}));
  CHECK(x.grad()(0) == 2.0);
  CHECK(x.grad()(1) == 20.0);
  CHECK(x.grad()(2) == 200.0);
  Variable<double> u = mul_scalar(x, 2.0);
  CHECK_THROWS_WITH_AS(u.backward(zeros<double>({2})),
                       doctest::Contains("upstream gradient of shape (2) does not match the output's shape (3)"),
                       ShapeError);
  Tape::current().clear();
}

TEST_CASE("tape: a value used several times gets the sum of its gradients") {
  Variable<double> x = leaf({2, -1});
  Variable<double> a = mul_scalar(x, 3.0);     // da/dx = 3
  Variable<double> b = mul(x, x);              // db/dx = 2x
  Variable<double> c = exp(mul_scalar(x, 0.5));  // dc/dx = 0.5 e^(x/2)
  sum(add(add(a, b), add(c, x))).backward();
  for (std::size_t i = 0; i < 2; ++i) {
    const double v = x.value()(i);
    CHECK(x.grad()(i) == doctest::Approx(3 + 2 * v + 0.5 * std::exp(v / 2) + 1).epsilon(1e-14));
  }
}

TEST_CASE("tape: gradients accumulate across backward calls on leaves - zero_grad resets") {
  Variable<double> x = leaf({1, 2});
  sum(mul_scalar(x, 3.0)).backward();
  sum(mul_scalar(x, 4.0)).backward();
  CHECK(x.grad()(0) == 7.0);
  CHECK(x.grad()(1) == 7.0);
  x.zero_grad();
  CHECK_FALSE(x.has_grad());
  CHECK_THROWS_WITH_AS(x.grad(), doctest::Contains("has no gradient"), Error);
  sum(mul_scalar(x, 5.0)).backward();
  CHECK(x.grad()(0) == 5.0);
}

TEST_CASE("tape: detach stops the gradient") {
  Variable<double> x = leaf({1, 2});
  Variable<double> y = mul(x, x);
  Variable<double> d = y.detach();
  CHECK(d.is_leaf());
  CHECK_FALSE(d.requires_grad());
  CHECK(test::bitwise_equal(d.value(), y.value()));
  // z = x * detach(x^2): only the first factor carries a gradient, dz/dx = x^2.
  sum(mul(x, d)).backward();
  CHECK(x.grad()(0) == 1.0);
  CHECK(x.grad()(1) == 4.0);
  // The detached copy does not alias the original value.
  d.value()(0) = 100.0;
  CHECK(y.value()(0) == 1.0);
}

TEST_CASE("tape: NoGradGuard records nothing and outputs do not require grad") {
  Tape::current().clear();
  Variable<double> x = leaf({1, 2});
  {
    NoGradGuard guard;
    CHECK_FALSE(autograd::grad_enabled());
    Variable<double> y = sum(exp(mul(x, x)));
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    CHECK(Tape::current().size() == 0);
    CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("does not require grad"), Error);
  }
  CHECK(autograd::grad_enabled());
  Variable<double> z = mul(x, x);
  CHECK(z.requires_grad());
  CHECK(Tape::current().size() == 1);
  Tape::current().clear();
}

TEST_CASE("tape: nothing is recorded when no input requires grad") {
  Tape::current().clear();
  Variable<double> x = leaf({1, 2}, false);
  Variable<double> y = sum(mul(x, x));
  CHECK_FALSE(y.requires_grad());
  CHECK(Tape::current().size() == 0);
}

TEST_CASE("tape: released after backward - a second backward through it throws") {
  Tape::current().clear();
  Variable<double> x = leaf({1, 2});
  Variable<double> h = mul(x, x);
  Variable<double> y = sum(h);
  CHECK(Tape::current().size() == 2);
  y.backward();
  CHECK(Tape::current().size() == 0);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward: the tape that recorded this sum value was already released"),
                       Error);
  // A new graph through an intermediate of the released one cannot reach x: that is an error,
  // not a silently missing gradient.
  Variable<double> z = sum(mul_scalar(h, 2.0));
  CHECK_THROWS_WITH_AS(z.backward(), doctest::Contains("mul_scalar: the tape that recorded this mul value of shape (2) was already released"),
                       Error);
  CHECK(Tape::current().size() == 0);  // released even though backward failed
  // A new graph from the leaves works.
  x.zero_grad();
  sum(mul(x, x)).backward();
  CHECK(x.grad()(1) == 4.0);
}

TEST_CASE("tape: intermediate gradients are dropped unless retain_grad()") {
  Variable<double> x = leaf({1, 2});
  Variable<double> h = mul_scalar(x, 3.0);
  Variable<double> kept = add_scalar(x, 1.0);
  kept.retain_grad();
  sum(mul(h, kept)).backward();
  CHECK_FALSE(h.has_grad());
  REQUIRE(kept.has_grad());
  CHECK(kept.grad()(0) == 3.0);  // d/dkept of h * kept = h
  CHECK(kept.grad()(1) == 6.0);
  CHECK(x.grad()(0) == doctest::Approx(3 * 2 + 3 * 1));  // d/dx 3x (x + 1) = 6x + 3
  CHECK(x.grad()(1) == doctest::Approx(3 * 3 + 3 * 2));
}

TEST_CASE("tape: an intermediate's gradient buffer is freed once backward has passed it on") {
  // Two chains of 64 KiB intermediates: with the buffers freed as backward moves down, the peak
  // holds a few gradients, not one per intermediate.
  Variable<double> x(test::random_array<double>({8192}, 3), true);
  Variable<double> h = x;
  for (int i = 0; i < 16; ++i) h = mul_scalar(h, 1.0 + 0.01 * i);
  Variable<double> y = sum(h);
  pool::reset_peak();
  const std::uint64_t before = pool::stats().in_use_bytes;
  y.backward();
  const std::uint64_t grad_bytes = 8192 * sizeof(double);
  CHECK(pool::stats().peak_in_use_bytes - before <= 4 * grad_bytes);
  CHECK_FALSE(h.has_grad());
  REQUIRE(x.has_grad());
  double factor = 1;
  for (int i = 0; i < 16; ++i) factor *= 1.0 + 0.01 * i;
  CHECK(x.grad()(5) == doctest::Approx(factor).epsilon(1e-14));
}

TEST_CASE("tape: set_requires_grad only on leaves - undefined Variables throw") {
  Variable<double> x = leaf({1, 2}, false);
  x.set_requires_grad(true);
  CHECK(x.requires_grad());
  Variable<double> y = mul(x, x);
  CHECK_THROWS_AS(y.set_requires_grad(false), Error);
  Tape::current().clear();
  Variable<double> u;
  CHECK_FALSE(u.defined());
  CHECK_THROWS_WITH_AS(u.value(), doctest::Contains("undefined Variable"), Error);
}

// ---- the tape's closure arena ----

namespace {

// Counts live copies; a second destruction of the same object fails the check in ~Tracked.
struct Tracked {
  static inline int live = 0;
  bool alive = true;
  Tracked() { ++live; }
  Tracked(const Tracked&) { ++live; }
  Tracked(Tracked&&) noexcept { ++live; }
  Tracked& operator=(const Tracked&) = default;
  ~Tracked() {
    CHECK(alive);
    alive = false;
    --live;
  }
};

// A capture of N bytes filled with a pattern that the closure checks when it runs.
template <std::size_t N>
struct Payload {
  std::array<unsigned char, N> bytes;
  explicit Payload(unsigned char seed) {
    for (std::size_t i = 0; i < N; ++i) bytes[i] = static_cast<unsigned char>(seed + i * 7);
  }
  bool intact(unsigned char seed) const {
    for (std::size_t i = 0; i < N; ++i)
      if (bytes[i] != static_cast<unsigned char>(seed + i * 7)) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("tape: backward runs every closure once, last first, and destroys each exactly once") {
  Tape& tape = Tape::current();
  tape.clear();
  std::vector<int> ran;
  {
    Tracked t;
    for (int i = 0; i < 5; ++i) tape.record([t, i, &ran] { ran.push_back(i); });
  }
  CHECK(Tracked::live == 5);
  const auto generation = tape.generation();
  tape.run_backward();
  CHECK(ran == std::vector<int>{4, 3, 2, 1, 0});
  CHECK(Tracked::live == 0);
  CHECK(tape.size() == 0);
  CHECK(tape.generation() == generation + 1);
}

TEST_CASE("tape: a throwing closure still releases the tape - every closure is destroyed once") {
  Tape& tape = Tape::current();
  tape.clear();
  std::vector<int> ran;
  {
    Tracked t;
    tape.record([t, &ran] { ran.push_back(0); });
    tape.record([t] { throw ValueError("closure failed"); });
    tape.record([t, &ran] { ran.push_back(2); });
  }
  const auto generation = tape.generation();
  CHECK_THROWS_WITH_AS(tape.run_backward(), "closure failed", ValueError);
  CHECK(ran == std::vector<int>{2});  // the one recorded before the failure never ran
  CHECK(Tracked::live == 0);
  CHECK(tape.size() == 0);
  CHECK(tape.generation() == generation + 1);
  CHECK(autograd::grad_enabled());  // the guard of the failed backward was restored
}

TEST_CASE("tape: clear() destroys the closures without running them") {
  Tape& tape = Tape::current();
  tape.clear();
  bool ran = false;
  {
    Tracked t;
    tape.record([t, &ran] { ran = true; });
    tape.record([t, &ran] { ran = true; });
  }
  CHECK(Tracked::live == 2);
  tape.clear();
  CHECK_FALSE(ran);
  CHECK(Tracked::live == 0);
  CHECK(tape.size() == 0);
}

TEST_CASE("tape: captures larger than a chunk, and records spanning chunks, keep their contents") {
  using autograd::Arena;
  Tape& tape = Tape::current();
  tape.clear();
  std::vector<int> ran;
  auto record_round = [&] {
    // small, one above a whole chunk, one that no longer fits the rest of a chunk, many small.
    tape.record([p = Payload<24>(1), &ran] { ran.push_back(p.intact(1) ? 0 : -1); });
    tape.record([p = Payload<2 * Arena::kChunkBytes + 8>(2), &ran] { ran.push_back(p.intact(2) ? 1 : -1); });
    tape.record([p = Payload<Arena::kChunkBytes - 16>(3), &ran] { ran.push_back(p.intact(3) ? 2 : -1); });
    for (int i = 0; i < 3000; ++i)
      tape.record([p = Payload<40>(static_cast<unsigned char>(i)), i, &ran] {
        ran.push_back(p.intact(static_cast<unsigned char>(i)) ? 3 + i : -1);
      });
  };
  std::vector<int> expected;
  for (int i = 3000 + 2; i >= 0; --i) expected.push_back(i);

  record_round();
  const std::size_t chunks = tape.arena().chunks();
  CHECK(chunks >= 4);  // 3000 x 48+ bytes alone need more than 2 chunks of 64 KiB
  tape.run_backward();
  CHECK(ran == expected);

  // The same records again fit the chunks kept from the first round.
  ran.clear();
  record_round();
  CHECK(tape.arena().chunks() == chunks);
  tape.run_backward();
  CHECK(ran == expected);
}

TEST_CASE("tape arena: aligned blocks - after reset the same requests reuse the same memory") {
  autograd::Arena arena;
  const std::size_t aligns[] = {1, 8, 16, 64, 2, 32};
  std::vector<void*> first;
  for (std::size_t align : aligns) {
    void* p = arena.allocate(100, align);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % align == 0);
    first.push_back(p);
  }
  CHECK(arena.chunks() == 1);
  arena.reset();
#ifndef QKV_SANITIZE  // the sanitizer build frees the chunks on reset
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(arena.allocate(100, aligns[i]) == first[i]);
#endif
  arena.release();
  CHECK(arena.chunks() == 0);
}
