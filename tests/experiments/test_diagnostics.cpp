// The attention diagnostics the experiments rely on, against values worked out by hand.
#include <doctest/doctest.h>

#include <cmath>

#include "qkv/tensor/random.hpp"
#include "qkv/train/diagnostics.hpp"

using namespace qkv;

namespace {
// (1, H, 2, 3) weights from a flat list.
Array<float> maps(std::size_t H, const std::vector<float>& v) {
  Array<float> w = Array<float>::from_shape({1, H, 2, 3});
  std::copy(v.begin(), v.end(), w.data());
  return w;
}
}  // namespace

TEST_CASE("diagnostics: entropy and largest weight of uniform, one-hot and mixed rows") {
  const float u = 1.0f / 3;
  auto s = train::attention_stats(maps(1, {u, u, u, 1, 0, 0}));
  CHECK(s.entropy == doctest::Approx((std::log(3.0) + 0.0) / 2).epsilon(1e-6));
  CHECK(s.max_weight == doctest::Approx((u + 1.0) / 2).epsilon(1e-6));
  s = train::attention_stats(maps(1, {0.5f, 0.25f, 0.25f, 0, 1, 0}));
  CHECK(s.entropy == doctest::Approx((0.5 * std::log(2.0) + 0.5 * std::log(4.0)) / 2).epsilon(1e-6));
  CHECK(s.max_weight == doctest::Approx(0.75).epsilon(1e-6));
}

TEST_CASE("diagnostics: fully masked rows do not count") {
  auto s = train::attention_stats(maps(1, {0, 0, 0, 0, 1, 0}));
  CHECK(s.entropy == doctest::Approx(0.0));
  CHECK(s.max_weight == doctest::Approx(1.0));
}

TEST_CASE("diagnostics: head redundancy is the mean pairwise cosine of the heads' maps") {
  // Identical heads: 1. Heads with disjoint support: 0.
  CHECK(train::head_redundancy(maps(2, {1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0})) == doctest::Approx(1.0));
  CHECK(train::head_redundancy(maps(2, {1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1})) == doctest::Approx(0.0));
  // Three heads: pairs (0,1) identical, (0,2) and (1,2) cosine of one-hot vs uniform maps.
  const float u = 1.0f / 3;
  const double c = (2 * u) / (std::sqrt(2.0) * std::sqrt(6 * u * u));  // <onehot,uniform>/(|a||b|)
  const double r = train::head_redundancy(maps(3, {1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, u, u, u, u, u, u}));
  CHECK(r == doctest::Approx((1 + 2 * c) / 3).epsilon(1e-6));
  CHECK(std::isnan(train::head_redundancy(maps(1, {1, 0, 0, 0, 1, 0}))));
}

TEST_CASE("diagnostics: score variance is the variance of q . k over examples, heads and pairs") {
  // One head, two queries, two keys: scores 1, 3, 2, 0; mean 1.5, E[s^2] 3.5, variance 1.25.
  Array<float> q = Array<float>::from_shape({1, 1, 2, 2}), k = Array<float>::from_shape({1, 1, 2, 2});
  const float qv[] = {1, 0, 0, 2}, kv[] = {1, 1, 3, 0};
  std::copy(qv, qv + 4, q.data());
  std::copy(kv, kv + 4, k.data());
  CHECK(train::score_variance(q, k) == doctest::Approx(1.25));
  // Unit-variance independent components: Var(q . k) = D (the footnote of Vaswani et al.).
  Generator gen(3);
  for (std::size_t D : {4, 64}) {
    Array<float> a = Array<float>::from_shape({8, 2, 16, D}), b = Array<float>::from_shape({8, 2, 16, D});
    for (auto* arr : {&a, &b})
      for (std::size_t i = 0; i < arr->size(); ++i) arr->data()[i] = float(gen.normal());
    CHECK(train::score_variance(a, b) == doctest::Approx(double(D)).epsilon(0.15));
  }
  CHECK_THROWS_WITH_AS(train::score_variance(q, Array<float>::from_shape({1, 1, 2, 3})),
                       doctest::Contains("score_variance: q (1, 1, 2, 2) and k (1, 1, 2, 3)"), ShapeError);
}
