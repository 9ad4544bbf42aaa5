#include <doctest/doctest.h>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/embedding.hpp"
#include "test_util.hpp"

using namespace qkv;

TEST_CASE("embedding: rows of the weight at the ids, any ids shape") {
  Array<double> w = test::random_array<double>({6, 3}, 1);
  IndexArray ids = {{5, 0, 2}, {2, 2, 1}};
  Variable<double> out = embedding(Variable<double>(w), ids);
  REQUIRE(out.shape() == Shape{2, 3, 3});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t c = 0; c < 3; ++c) CHECK(out.value()(i, j, c) == w(std::size_t(ids(i, j)), c));
  IndexArray scalar_id = 4;  // a 0-d ids array gives one (C) row
  CHECK(embedding(Variable<double>(w), scalar_id).shape() == Shape{3});
}

TEST_CASE("embedding: an id used twice accumulates both gradients - gradcheck") {
  Variable<double> w(test::random_array<double>({4, 2}, 2), true);
  IndexArray ids = {1, 3, 1, 1};
  embedding(w, ids).backward(full<double>({4, 2}, 1.0));
  const double want[4] = {0, 3, 0, 1};  // occurrences of each id
  for (std::size_t v = 0; v < 4; ++v)
    for (std::size_t c = 0; c < 2; ++c) CHECK(w.grad()(v, c) == want[v]);
  test::check_grad([ids](const std::vector<Variable<double>>& x) { return embedding(x[0], ids); },
                   {test::random_array<double>({4, 2}, 3)});
}

TEST_CASE("embedding: backward bitwise identical with 1 and 2 threads") {
  const int saved = num_threads();
  IndexArray ids = IndexArray::from_shape({64, 100});
  Generator gen(5);
  for (auto& id : ids) id = Index(gen.randint(50));  // many repeats
  Array<float> dy = test::random_array<float>({64, 100, 72}, 6);
  Array<float> g[2];
  for (int t : {1, 2}) {
    set_num_threads(t);
    Variable<float> w(test::random_array<float>({50, 72}, 7), true);
    embedding(w, ids).backward(dy);
    g[t - 1] = w.grad();
  }
  set_num_threads(saved);
  CHECK(test::bitwise_equal(g[0], g[1]));
}

TEST_CASE("embedding: out-of-range ids throw ValueError naming id, position and vocabulary") {
  Variable<float> w(zeros<float>({10, 4}));
  IndexArray ids = {{1, 2, 3}, {4, 12, 5}};
  CHECK_THROWS_WITH_AS(embedding(w, ids),
                       doctest::Contains("embedding: id 12 at position (1, 1) of ids (2, 3) is outside the vocabulary [0, 10)"),
                       ValueError);
  IndexArray neg = {0, -1};
  CHECK_THROWS_WITH_AS(embedding(w, neg), doctest::Contains("id -1 at position (1) of ids (2)"), ValueError);
  CHECK_THROWS_WITH_AS(embedding(Variable<float>(zeros<float>({10})), neg),
                       doctest::Contains("embedding: weight of shape (10) is not a (V, C) matrix"), ShapeError);
}
