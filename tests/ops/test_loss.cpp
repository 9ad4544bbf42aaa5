#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "qkv/tensor/parallel.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/ops/softmax.hpp"
#include "test_util.hpp"

using namespace qkv;

namespace {

// The PyTorch formula written out, in long double:
//   loss_i = (1 - s) (-log p_{i,t_i}) + s mean_c(-log p_{i,c}),  mean over rows with t_i != ignore.
template <class T>
double naive_cross_entropy(const Array<T>& logits, const IndexArray& targets, Index ignore, double s) {
  const std::size_t V = logits.shape().back(), N = targets.size();
  long double total = 0;
  std::size_t count = 0;
  for (std::size_t i = 0; i < N; ++i) {
    if (targets.data()[i] == ignore) continue;
    const T* x = logits.data() + i * V;
    long double m = x[0], z = 0;
    for (std::size_t c = 0; c < V; ++c) m = std::max<long double>(m, x[c]);
    for (std::size_t c = 0; c < V; ++c) z += std::exp((long double)x[c] - m);
    auto nlp = [&](std::size_t c) { return -((long double)x[c] - m - std::log(z)); };
    long double smooth = 0;
    for (std::size_t c = 0; c < V; ++c) smooth += nlp(c);
    total += (1 - s) * nlp(std::size_t(targets.data()[i])) + s * smooth / V;
    ++count;
  }
  return count ? double(total / count) : 0.0;
}

}  // namespace

TEST_CASE("cross_entropy: forward matches the formula, with ignore_index and label smoothing") {
  Array<double> x = test::random_array<double>({2, 3, 5}, 1, -3, 3);
  IndexArray t = {{0, 4, -100}, {2, -100, 1}};
  for (double s : {0.0, 0.1, 1.0}) {
    INFO("smoothing " << s);
    CHECK(cross_entropy(Variable<double>(x), t, -100, s).item() ==
          doctest::Approx(naive_cross_entropy(x, t, -100, s)).epsilon(1e-13));
    Array<float> xf = cast<float>(x);
    CHECK(cross_entropy(Variable<float>(xf), t, -100, s).item() ==
          doctest::Approx(naive_cross_entropy(xf, t, -100, s)).epsilon(1e-6));
  }
  // Another ignore_index: a real class id that is then skipped.
  IndexArray t2 = {{0, 4, 3}, {2, 3, 1}};
  CHECK(cross_entropy(Variable<double>(x), t2, 3, 0.2).item() ==
        doctest::Approx(naive_cross_entropy(x, t2, 3, 0.2)).epsilon(1e-13));
  // 1-D logits with a 0-d target.
  Array<double> x1 = test::random_array<double>({5}, 2);
  IndexArray t1 = 3;
  CHECK(cross_entropy(Variable<double>(x1), t1).item() == doctest::Approx(naive_cross_entropy(x1, t1, -100, 0)).epsilon(1e-13));
}

TEST_CASE("cross_entropy: huge logits stay finite") {
  Array<double> x = from_vector<double>({1e4, 0, -1e4, 5e3, 1e4, 1e4 - 3}, {2, 3});
  IndexArray t = {1, 2};
  Variable<double> X(x, true);
  Variable<double> loss = cross_entropy(X, t, -100, 0.1);
  CHECK(std::isfinite(loss.item()));
  CHECK(loss.item() == doctest::Approx(naive_cross_entropy(x, t, -100, 0.1)).epsilon(1e-12));
  loss.backward();
  for (double g : X.grad()) CHECK(std::isfinite(g));
}

TEST_CASE("cross_entropy: gradcheck, with ignored rows and label smoothing") {
  const Array<double> x = test::random_array<double>({2, 3, 4}, 3, -2, 2);
  IndexArray t = {{0, 3, -100}, {1, 1, 2}};
  for (double s : {0.0, 0.25}) {
    INFO("smoothing " << s);
    test::check_grad([&](const std::vector<Variable<double>>& v) { return cross_entropy(v[0], t, -100, s); }, {x});
  }
}

TEST_CASE("cross_entropy: the fused gradient equals the composite log_softmax path") {
  // Composite twin: loss = sum_i sum_c -q_ic log_softmax(x)_ic / count, so the upstream gradient of
  // log_softmax is -q / count, with q = (1 - s) one_hot + s / V on counted rows, 0 on ignored ones.
  const double s = 0.15;
  const std::size_t N = 6, V = 7;
  Array<double> x = test::random_array<double>({N, V}, 4, -4, 4);
  IndexArray t = {0, 6, -100, 3, 3, -100};
  Variable<double> X1(x, true), X2(x, true);
  cross_entropy(X1, t, -100, s).backward();
  Array<double> dlogp = zeros<double>({N, V});
  for (std::size_t i = 0; i < N; ++i) {
    if (t(i) == -100) continue;
    for (std::size_t c = 0; c < V; ++c) dlogp(i, c) = -(s / V + (Index(c) == t(i) ? 1 - s : 0)) / 4.0;
  }
  log_softmax(X2, -1).backward(dlogp);
  for (std::size_t i = 0; i < N * V; ++i) CHECK(X1.grad().data()[i] == doctest::Approx(X2.grad().data()[i]).epsilon(1e-13));
  // Ignored rows get exactly zero.
  for (std::size_t c = 0; c < V; ++c) {
    CHECK(X1.grad()(2, c) == 0.0);
    CHECK(X1.grad()(5, c) == 0.0);
  }
}

TEST_CASE("cross_entropy: every target ignored gives loss 0 and zero gradient (PyTorch: NaN)") {
  Variable<double> X(test::random_array<double>({3, 4}, 5), true);
  IndexArray t = {-100, -100, -100};
  Variable<double> loss = cross_entropy(X, t, -100, 0.1);
  CHECK(loss.item() == 0.0);
  loss.backward();
  for (double g : X.grad()) CHECK(g == 0.0);
}

TEST_CASE("cross_entropy: bitwise identical with 1 and 2 threads") {
  const int saved = num_threads();
  const std::size_t N = 256, V = 1000;
  Array<float> x = test::random_array<float>({N, V}, 6, -6, 6);
  IndexArray t = IndexArray::from_shape({N});
  Generator gen(7);
  for (auto& v : t) v = gen.uniform() < 0.1 ? -100 : Index(gen.randint(V));
  float loss[2];
  Array<float> g[2];
  for (int th : {1, 2}) {
    set_num_threads(th);
    Variable<float> X(x, true);
    Variable<float> l = cross_entropy(X, t, -100, 0.1);
    l.backward();
    loss[th - 1] = l.item();
    g[th - 1] = X.grad();
  }
  set_num_threads(saved);
  CHECK(std::memcmp(&loss[0], &loss[1], sizeof(float)) == 0);
  CHECK(test::bitwise_equal(g[0], g[1]));
}

TEST_CASE("cross_entropy: bad targets, shapes and smoothing throw") {
  Variable<float> x(zeros<float>({2, 3, 4}));
  IndexArray bad = {{0, 4, 1}, {2, 3, 1}};
  CHECK_THROWS_WITH_AS(cross_entropy(x, bad),
                       doctest::Contains("cross_entropy: target 4 at flat position 1 is outside the classes [0, 4)"),
                       ValueError);
  IndexArray neg = {{0, 1, 1}, {-1, 3, 1}};
  CHECK_THROWS_AS(cross_entropy(x, neg), ValueError);
  CHECK_NOTHROW(cross_entropy(x, neg, -1));
  IndexArray wrong = {0, 1};
  CHECK_THROWS_WITH_AS(cross_entropy(x, wrong),
                       doctest::Contains("cross_entropy: logits of shape (2, 3, 4) do not fit targets of shape (2)"),
                       ShapeError);
  IndexArray ok = {{0, 1, 1}, {2, 3, 1}};
  CHECK_THROWS_WITH_AS(cross_entropy(x, ok, -100, 1.5),
                       doctest::Contains("cross_entropy: label_smoothing must be in [0, 1], got 1.5"), ValueError);
}
