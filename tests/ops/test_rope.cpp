// Rotary position embedding: the formula, positions continued by an offset, its gradient.
#include <doctest/doctest.h>

#include <cmath>

#include "qkv/ops/reduce.hpp"
#include "qkv/ops/rope.hpp"
#include "qkv/ops/shape.hpp"
#include "test_util.hpp"

namespace qkv {

TEST_CASE("rope: rotates pairs (d, d + D/2) by position times base^(-2d/D)") {
  const std::size_t B = 2, H = 3, T = 5, D = 6;
  Array<double> x = test::random_array<double>({B, H, T, D}, 1);
  const Array<double> y = rope(Variable<double>(x), 2, 100.0).value();
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t d = 0; d < D / 2; ++d) {
          const double a = double(2 + t) * std::pow(100.0, -2.0 * double(d) / double(D));
          const double lo = x(b, h, t, d), hi = x(b, h, t, d + D / 2);
          CHECK(y(b, h, t, d) == doctest::Approx(lo * std::cos(a) - hi * std::sin(a)).epsilon(1e-14));
          CHECK(y(b, h, t, d + D / 2) == doctest::Approx(hi * std::cos(a) + lo * std::sin(a)).epsilon(1e-14));
        }
  // A rotation keeps every pair's length; position 0 is the identity.
  const Array<double> y0 = rope(Variable<double>(x), 0).value();
  for (std::size_t d = 0; d < D; ++d) CHECK(y0(1, 2, 0, d) == doctest::Approx(x(1, 2, 0, d)).epsilon(1e-15));
  CHECK_THROWS_WITH_AS(rope(Variable<double>(zeros<double>({1, 1, 2, 3}))), doctest::Contains("D even"), ShapeError);
  CHECK_THROWS_AS(rope(Variable<double>(zeros<double>({2, 4}))), ShapeError);
}

TEST_CASE("rope: positions continued with an offset equal the same positions of a longer sequence") {
  Array<float> x = test::random_array<float>({1, 2, 9, 8}, 2);
  const Array<float> whole = rope(Variable<float>(x)).value();
  const Array<float> tail = rope(slice(Variable<float>(x), 2, 4, 9), 4).value();
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t t = 0; t < 5; ++t)
      for (std::size_t d = 0; d < 8; ++d) CHECK(tail(0, h, t, d) == whole(0, h, t + 4, d));
}

TEST_CASE("rope: gradcheck, with and without an offset") {
  for (std::size_t offset : {0, 7}) {
    CAPTURE(offset);
    test::check_grad([offset](const std::vector<Variable<double>>& v) { return rope(v[0], offset); },
                     {test::random_array<double>({2, 2, 3, 4}, 3)});
  }
}

}  // namespace qkv
