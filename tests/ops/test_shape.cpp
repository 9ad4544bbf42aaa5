#include <algorithm>
#include <doctest/doctest.h>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/ops/shape.hpp"
#include "test_util.hpp"

using namespace qkv;
using Vars = std::vector<Variable<double>>;

TEST_CASE("reshape: values kept in order, -1 inferred, gradcheck") {
  Array<double> x = test::random_array<double>({2, 3, 4}, 1);
  Variable<double> y = reshape(Variable<double>(x), {4, -1});
  REQUIRE(y.shape() == Shape{4, 6});
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(y.value().data()[i] == x.data()[i]);
  CHECK(reshape(Variable<double>(x), {-1}).shape() == Shape{24});
  CHECK(reshape(Variable<double>(x), {2, 1, 12}).shape() == Shape{2, 1, 12});
  test::check_grad([](const Vars& v) { return reshape(v[0], {3, 8}); }, {x});
}

TEST_CASE("reshape: errors") {
  Variable<float> x(zeros<float>({2, 3}));
  CHECK_THROWS_WITH_AS(reshape(x, {4, 2}), doctest::Contains("reshape: cannot reshape (2, 3) (6 elements) to (4, 2)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(reshape(x, {4, -1}), doctest::Contains("-1 dimension cannot be inferred"), ShapeError);
  CHECK_THROWS_WITH_AS(reshape(x, {-1, -1}), doctest::Contains("only one dimension can be -1"), ShapeError);
  CHECK_THROWS_WITH_AS(reshape(x, {-2, 3}), doctest::Contains("negative size -2"), ShapeError);
}

TEST_CASE("transpose and permute: forward matches index arithmetic") {
  Array<double> x = test::random_array<double>({2, 3, 4, 5}, 2);
  Variable<double> t = transpose(Variable<double>(x), 1, -2);
  REQUIRE(t.shape() == Shape{2, 4, 3, 5});
  Variable<double> p = permute(Variable<double>(x), {3, 0, 2, 1});
  REQUIRE(p.shape() == Shape{5, 2, 4, 3});
  for (std::size_t a = 0; a < 2; ++a)
    for (std::size_t b = 0; b < 3; ++b)
      for (std::size_t c = 0; c < 4; ++c)
        for (std::size_t d = 0; d < 5; ++d) {
          CHECK(t.value()(a, c, b, d) == x(a, b, c, d));
          CHECK(p.value()(d, a, c, b) == x(a, b, c, d));
        }
  // Sizes that are not multiples of the kernel's 32 x 32 tiles.
  Array<double> big = test::random_array<double>({3, 70, 45}, 3);
  Variable<double> bt = transpose(Variable<double>(big), -1, 1);
  REQUIRE(bt.shape() == Shape{3, 45, 70});
  for (std::size_t a = 0; a < 3; ++a)
    for (std::size_t b = 0; b < 70; ++b)
      for (std::size_t c = 0; c < 45; ++c) CHECK(bt.value()(a, c, b) == big(a, b, c));
  Array<double> m = test::random_array<double>({3, 7}, 3);
  Variable<double> mt = transpose(Variable<double>(m), 0, 1);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 7; ++j) CHECK(mt.value()(j, i) == m(i, j));
}

TEST_CASE("permute: every order of a rank-4 tensor, rows across task boundaries, 1 and 2 threads") {
  // 13 x 17 x 12 x 15 = 39780 elements (above kParallelMin, so 2 threads do split): thousands
  // of rows, so the kernel's 64-row tasks start at multi-indices in the middle of every outer
  // dimension; every one of the 24 orders.
  const Shape shape{13, 17, 12, 15};
  Array<float> x = test::random_array<float>(shape, 4);
  Axes perm{0, 1, 2, 3};
  const int before = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    do {
      Variable<float> p = permute(Variable<float>(x), perm);
      std::size_t i[4], bad = 0;
      for (i[0] = 0; i[0] < shape[0]; ++i[0])
        for (i[1] = 0; i[1] < shape[1]; ++i[1])
          for (i[2] = 0; i[2] < shape[2]; ++i[2])
            for (i[3] = 0; i[3] < shape[3]; ++i[3])
              bad += p.value()(i[perm[0]], i[perm[1]], i[perm[2]], i[perm[3]]) != x(i[0], i[1], i[2], i[3]);
      INFO("threads ", threads, ", perm (", perm[0], perm[1], perm[2], perm[3], ")");
      CHECK(bad == 0);
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  set_num_threads(before);
}

TEST_CASE("transpose and permute: gradcheck, and a transposed input into matmul") {
  Array<double> x = test::random_array<double>({2, 3, 4}, 4);
  test::check_grad([](const Vars& v) { return transpose(v[0], 0, 2); }, {x});
  test::check_grad([](const Vars& v) { return permute(v[0], {1, 2, 0}); }, {x});
  test::check_grad([](const Vars& v) { return permute(v[0], {0, 1, 2}); }, {x});
  // (B, T, C) @ (B, T, C)^T: the pattern of attention scores.
  test::check_grad([](const Vars& v) { return matmul(v[0], transpose(v[1], -1, -2)); },
                   {x, test::random_array<double>({2, 3, 4}, 5)});
  // q = k aliasing: the same input on both sides.
  test::check_grad([](const Vars& v) { return matmul(v[0], transpose(v[0], 1, 2)); }, {x});
}

TEST_CASE("transpose and permute: errors") {
  Variable<float> x(zeros<float>({2, 3, 4}));
  CHECK_THROWS_WITH_AS(transpose(x, 0, 3), doctest::Contains("transpose: axis 3 out of range for shape (2, 3, 4)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(permute(x, {0, 0, 1}),
                       doctest::Contains("permute: (0, 0, 1) is not a permutation of the 3 dimensions of shape (2, 3, 4)"),
                       ShapeError);
  CHECK_THROWS_AS(permute(x, {0, 1}), ShapeError);
}

TEST_CASE("split_heads and merge_heads: forward matches index arithmetic and reshape + permute") {
  Array<double> x = test::random_array<double>({2, 3, 12}, 21);  // B 2, T 3, H 4, D 3
  Variable<double> s = split_heads(Variable<double>(x), 4);
  REQUIRE(s.shape() == Shape{2, 4, 3, 3});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 4; ++h)
      for (std::size_t t = 0; t < 3; ++t)
        for (std::size_t d = 0; d < 3; ++d) CHECK(s.value()(b, h, t, d) == x(b, t, h * 3 + d));
  CHECK(test::bitwise_equal(s.value(), permute(reshape(Variable<double>(x), {2, 3, 4, 3}), {0, 2, 1, 3}).value()));
  Variable<double> m = merge_heads(s);
  REQUIRE(m.shape() == Shape{2, 3, 12});
  CHECK(test::bitwise_equal(m.value(), x));
  Array<double> y = test::random_array<double>({2, 4, 5, 3}, 22);
  CHECK(test::bitwise_equal(merge_heads(Variable<double>(y)).value(),
                            reshape(permute(Variable<double>(y), {0, 2, 1, 3}), {2, 5, 12}).value()));
}

TEST_CASE("split_heads and merge_heads: gradcheck and errors") {
  test::check_grad([](const Vars& v) { return split_heads(v[0], 2); }, {test::random_array<double>({2, 3, 4}, 23)});
  test::check_grad([](const Vars& v) { return merge_heads(v[0]); }, {test::random_array<double>({2, 3, 2, 2}, 24)});
  // Round trip through attention-like use: the input used twice, once through the heads.
  test::check_grad([](const Vars& v) { return add(merge_heads(split_heads(v[0], 3)), v[0]); },
                   {test::random_array<double>({1, 2, 6}, 25)});
  Variable<float> x(zeros<float>({2, 3, 10}));
  CHECK_THROWS_WITH_AS(split_heads(x, 4),
                       doctest::Contains("split_heads: expected x of shape (B, T, H*D) with H = 4 dividing the last "
                                         "dimension, found (2, 3, 10)"),
                       ShapeError);
  CHECK_THROWS_AS(split_heads(x, 0), ShapeError);
  CHECK_THROWS_AS(split_heads(Variable<float>(zeros<float>({3, 10})), 2), ShapeError);
  CHECK_THROWS_WITH_AS(merge_heads(x), doctest::Contains("merge_heads: expected x of shape (B, H, T, D), found (2, 3, 10)"),
                       ShapeError);
}

TEST_CASE("concat and split: forward, round trip, gradcheck") {
  Array<double> a = test::random_array<double>({2, 3, 4}, 6), b = test::random_array<double>({2, 1, 4}, 7);
  Variable<double> c = concat<double>({Variable<double>(a), Variable<double>(b)}, 1);
  REQUIRE(c.shape() == Shape{2, 4, 4});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t k = 0; k < 4; ++k) {
      for (std::size_t j = 0; j < 3; ++j) CHECK(c.value()(i, j, k) == a(i, j, k));
      CHECK(c.value()(i, 3, k) == b(i, 0, k));
    }
  std::vector<Variable<double>> parts = split(c, {3, 1}, -2);
  REQUIRE(parts.size() == 2);
  CHECK(test::bitwise_equal(parts[0].value(), a));
  CHECK(test::bitwise_equal(parts[1].value(), b));

  test::check_grad([](const Vars& v) { return concat(v, 1); }, {a, b});
  test::check_grad([](const Vars& v) { return concat<double>({v[0], v[0]}, -1); }, {a});
  test::check_grad([](const Vars& v) { return concat<double>({v[0], v[1]}, 0); }, {a, a});
  // Pieces of a split combined again, with different weights so each piece's gradient shows.
  test::check_grad([](const Vars& v) {
    auto p = split(v[0], {1, 2, 1}, 2);
    return add(mul(p[0], p[1]), mul_scalar(p[2], 3.0));
  }, {a});
  // Only one piece used: the others get zero gradient.
  test::check_grad([](const Vars& v) { return split(v[0], {2, 2}, 2)[1]; }, {a});
}

TEST_CASE("concat and split: a non-differentiable input is skipped") {
  Variable<double> a(test::random_array<double>({2, 2}, 8), true), b(test::random_array<double>({2, 3}, 9));
  sum(concat<double>({a, b}, 1)).backward();
  CHECK(a.has_grad());
  CHECK_FALSE(b.has_grad());
}

TEST_CASE("concat and split: errors") {
  Variable<float> a(zeros<float>({2, 3})), b(zeros<float>({3, 3}));
  CHECK_THROWS_WITH_AS(concat<float>({a, b}, 1),
                       doctest::Contains("concat: input 1 has shape (3, 3), which does not match input 0's shape (2, 3)"),
                       ShapeError);
  CHECK_THROWS_AS(concat<float>({}, 0), ValueError);
  CHECK_THROWS_WITH_AS(split(a, {1, 1}, 1),
                       doctest::Contains("split: sizes (1, 1) add up to 2, but axis 1 of shape (2, 3) has size 3"),
                       ShapeError);
}

TEST_CASE("slice and select: forward and gradcheck") {
  Array<double> x = test::random_array<double>({3, 5, 2}, 10);
  Variable<double> s = slice(Variable<double>(x), 1, 1, 4);
  REQUIRE(s.shape() == Shape{3, 3, 2});
  Variable<double> e = select(Variable<double>(x), -2, 4);
  REQUIRE(e.shape() == Shape{3, 2});
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t k = 0; k < 2; ++k) {
      for (std::size_t j = 0; j < 3; ++j) CHECK(s.value()(i, j, k) == x(i, j + 1, k));
      CHECK(e.value()(i, k) == x(i, 4, k));
    }
  CHECK(slice(Variable<double>(x), 0, 2, 2).shape() == Shape{0, 5, 2});
  test::check_grad([](const Vars& v) { return slice(v[0], 1, 1, 4); }, {x});
  test::check_grad([](const Vars& v) { return slice(v[0], 0, 0, 3); }, {x});
  test::check_grad([](const Vars& v) { return select(v[0], 0, 1); }, {x});
  test::check_grad([](const Vars& v) { return select(v[0], 2, 0); }, {x});
  test::check_grad([](const Vars& v) { return add(select(v[0], 1, 0), select(v[0], 1, 3)); }, {x});
}

TEST_CASE("slice and select: errors") {
  Variable<float> x(zeros<float>({2, 4}));
  CHECK_THROWS_WITH_AS(slice(x, 1, 3, 5), doctest::Contains("slice: range [3, 5) is not within axis 1 of shape (2, 4)"),
                       ShapeError);
  CHECK_THROWS_AS(slice(x, 1, 3, 2), ShapeError);
  CHECK_THROWS_WITH_AS(select(x, 0, 2), doctest::Contains("select: index 2 out of range for axis 0 of shape (2, 4)"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(select(x, -3, 0), doctest::Contains("select: axis -3 out of range for shape (2, 4)"), ShapeError);
}

TEST_CASE("shape ops: float32 and bitwise identical with 1 and 2 threads") {
  const int saved = num_threads();
  Array<float> x = test::random_array<float>({8, 64, 6, 40}, 11);  // 122880 elements
  auto run = [&](int threads) {
    set_num_threads(threads);
    Variable<float> v(x, true);
    Variable<float> y = permute(v, {0, 2, 1, 3});
    Variable<float> z = concat<float>({transpose(slice(y, 2, 0, 40), 2, 3), slice(y, 2, 10, 50)}, -1);
    add(sum(z), sum(select(y, 3, 1))).backward();
    return std::make_pair(z.value(), v.grad());
  };
  auto one = run(1);
  auto two = run(2);
  set_num_threads(saved);
  CHECK(one.first.shape() == Shape{8, 6, 40, 80});
  CHECK(test::bitwise_equal(one.first, two.first));
  CHECK(test::bitwise_equal(one.second, two.second));
}
