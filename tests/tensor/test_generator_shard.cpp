#include <doctest/doctest.h>

#include "qkv/tensor/random.hpp"

using namespace qkv;

TEST_CASE("Generator::set_shard: the shards' draws are the rows of the unsharded draws") {
  // Two reserves of a (4 rows x 3) tensor, unsharded, vs 2 shards of 2 rows each.
  Generator whole(9), r0(9), r1(9);
  r0.set_shard(0, 2);
  r1.set_shard(1, 2);
  for (int step = 0; step < 2; ++step) {
    const std::uint64_t w = whole.reserve(12), a = r0.reserve(6), b = r1.reserve(6);
    for (std::uint64_t i = 0; i < 6; ++i) {
      CHECK(uniform_at(9, a + i) == uniform_at(9, w + i));
      CHECK(uniform_at(9, b + i) == uniform_at(9, w + 6 + i));
    }
    CHECK(r0.offset() == whole.offset());
    CHECK(r1.offset() == whole.offset());
  }
  // Aligned reserves (dropout's blocks of 32): the offset is rounded up first, on every shard alike.
  for (int step = 0; step < 2; ++step) {
    const std::uint64_t w = whole.reserve(10, 32), a = r0.reserve(5, 32), b = r1.reserve(5, 32);
    CHECK(w % 32 == 0);
    CHECK(a == w);
    CHECK(b == w + 5);
    CHECK(r0.offset() == whole.offset());
    CHECK(r1.offset() == whole.offset());
  }
}
