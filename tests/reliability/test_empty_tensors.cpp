// Empty tensors (a dimension of size 0) through every op, forward and backward: the result has
// the shape the op's rule gives, the gradients have the shapes of the inputs, nothing is NaN
// where a value is defined, and nothing crashes. Where an empty input has no defined result
// (max over an empty axis, a class id into an empty vocabulary) the op throws a qkv::Error
// naming itself.

#include <cmath>
#include <functional>

#include "qkv/ops/attention.hpp"
#include "qkv/ops/dropout.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/embedding.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/norm.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/ops/shape.hpp"
#include "qkv/ops/softmax.hpp"
#include "test_util.hpp"

using namespace qkv;
using V = Variable<float>;
using Fn = std::function<V(const std::vector<V>&)>;

namespace {

bool all_finite(const Array<float>& a) {
  for (float x : a)
    if (!std::isfinite(x)) return false;
  return true;
}

// Runs f on leaves of the given shapes (values in [0.5, 1.5), so log/sqrt/div are defined),
// checks the output shape, then back-propagates ones and checks every gradient's shape.
void check_op(const char* what, const Fn& f, const std::vector<Shape>& shapes, const Shape& want) {
  CAPTURE(what);
  std::vector<V> xs;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    xs.emplace_back(test::random_array<float>(shapes[i], 100 + i, 0.5, 1.5), true);
  V y = f(xs);
  CHECK(shape_str(y.shape()) == shape_str(want));
  CHECK(all_finite(y.value()));
  y.backward(full<float>(Shape(y.shape().begin(), y.shape().end()), 1.0f));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(i);
    if (!xs[i].has_grad()) continue;  // an op may skip a gradient that is all zeros of size 0
    CHECK(shape_str(xs[i].grad().shape()) == shape_str(shapes[i]));
    CHECK(all_finite(xs[i].grad()));
  }
}

}  // namespace

TEST_CASE("empty tensors: elementwise ops and broadcasting") {
  const Shape e{0, 3};
  check_op("add", [](auto& x) { return add(x[0], x[1]); }, {e, e}, e);
  check_op("sub broadcast (0,3)-(3)", [](auto& x) { return sub(x[0], x[1]); }, {e, {3}}, e);
  check_op("mul broadcast (0,1)*(1,3)", [](auto& x) { return mul(x[0], x[1]); }, {{0, 1}, {1, 3}}, e);
  check_op("div", [](auto& x) { return div(x[0], x[1]); }, {e, e}, e);
  check_op("neg", [](auto& x) { return neg(x[0]); }, {e}, e);
  check_op("scalars", [](auto& x) { return rdiv_scalar(rsub_scalar(mul_scalar(add_scalar(x[0], 1.f), 2.f), 9.f), 1.f); },
           {e}, e);
  check_op("exp log sqrt pow", [](auto& x) { return pow(sqrt(log(exp(x[0]))), 3.f); }, {e}, e);
  check_op("tanh relu gelu", [](auto& x) { return gelu(relu(tanh(x[0])), GeluApprox::Tanh); }, {e}, e);
  check_op("gelu exact", [](auto& x) { return gelu(x[0]); }, {{2, 0, 4}}, {2, 0, 4});
  check_op("masked_fill", [](auto& x) { return masked_fill(x[0], Mask::from_shape({0, 3}), 0.f); }, {e}, e);
  check_op("a (3) against b (0,3)", [](auto& x) { return add(x[0], x[1]); }, {{3}, e}, e);
  CHECK_THROWS_AS(add(V(zeros<float>({0})), V(zeros<float>({2}))), ShapeError);
}

TEST_CASE("empty tensors: matmul and linear with a zero size in every position") {
  check_op("matmul (0,4)@(4,3)", [](auto& x) { return matmul(x[0], x[1]); }, {{0, 4}, {4, 3}}, {0, 3});
  check_op("matmul (2,4)@(4,0)", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 4}, {4, 0}}, {2, 0});
  check_op("batched matmul (0,2,4)@(0,4,3)", [](auto& x) { return matmul(x[0], x[1]); }, {{0, 2, 4}, {0, 4, 3}},
           {0, 2, 3});
  check_op("linear x (0,4)", [](auto& x) { return linear(x[0], x[1], x[2]); }, {{0, 4}, {3, 4}, {3}}, {0, 3});
  check_op("linear out 0", [](auto& x) { return linear(x[0], x[1], x[2]); }, {{2, 4}, {0, 4}, {0}}, {2, 0});

  // Inner size 0: the product is a sum of nothing, so exactly zero, and the gradients are empty.
  V a(zeros<float>({2, 0}), true), b(zeros<float>({0, 3}), true);
  V y = matmul(a, b);
  REQUIRE(shape_str(y.shape()) == "(2, 3)");
  for (float v : y.value()) CHECK(v == 0.0f);
  y.backward(full<float>({2, 3}, 1.0f));
  if (a.has_grad()) CHECK(shape_str(a.grad().shape()) == "(2, 0)");
  if (b.has_grad()) CHECK(shape_str(b.grad().shape()) == "(0, 3)");

  V x(zeros<float>({2, 0}), true), w(zeros<float>({3, 0}), true), bias(full<float>({3}, 0.5f), true);
  V z = linear(x, w, bias);
  REQUIRE(shape_str(z.shape()) == "(2, 3)");
  for (float v : z.value()) CHECK(v == 0.5f);
}

TEST_CASE("empty tensors: reductions") {
  check_op("sum all of (0,3)", [](auto& x) { return sum(x[0]); }, {{0, 3}}, {});
  check_op("sum axis 0 of (0,3)", [](auto& x) { return sum(x[0], {0}); }, {{0, 3}}, {3});
  check_op("sum axis 1 of (0,3) keepdims", [](auto& x) { return sum(x[0], {1}, true); }, {{0, 3}}, {0, 1});
  check_op("mean axis 1 of (0,3)", [](auto& x) { return mean(x[0], {1}); }, {{0, 3}}, {0});
  check_op("max axis 1 of (0,3)", [](auto& x) { return max(x[0], 1); }, {{0, 3}}, {0});
  // The sum of nothing is 0.
  CHECK(sum(V(zeros<float>({0, 3}))).value()() == 0.0f);
  V col_sums = sum(V(zeros<float>({0, 3})), {0});
  for (float v : col_sums.value()) CHECK(v == 0.0f);
  // The max of nothing is undefined: an error naming the op, never garbage or a crash.
  CHECK_THROWS_WITH_AS(max(V(zeros<float>({0, 3})), 0), doctest::Contains("max"), Error);
  CHECK_THROWS_WITH_AS(max(V(zeros<float>({2, 0})), -1), doctest::Contains("max"), Error);
}

TEST_CASE("empty tensors: shape ops") {
  check_op("reshape", [](auto& x) { return reshape(x[0], {3, 0}); }, {{0, 3}}, {3, 0});
  check_op("reshape infers a zero size", [](auto& x) { return reshape(x[0], {-1, 5}); }, {{2, 0, 5}}, {0, 5});
  check_op("transpose", [](auto& x) { return transpose(x[0], 0, 1); }, {{0, 3}}, {3, 0});
  check_op("permute", [](auto& x) { return permute(x[0], {2, 0, 1}); }, {{2, 0, 4}}, {4, 2, 0});
  check_op("concat with an empty piece", [](auto& x) { return concat<float>({x[0], x[1]}, 0); }, {{0, 3}, {2, 3}},
           {2, 3});
  check_op("concat of empties", [](auto& x) { return concat<float>({x[0], x[1]}, 1); }, {{0, 3}, {0, 2}}, {0, 5});
  check_op("split into an empty piece", [](auto& x) { return split(x[0], {0, 3}, 1)[0]; }, {{2, 3}}, {2, 0});
  check_op("slice empty range", [](auto& x) { return slice(x[0], 1, 2, 2); }, {{2, 3}}, {2, 0});
  check_op("select from (2,0)", [](auto& x) { return select(x[0], 0, 1); }, {{2, 0}}, {0});
  // -1 next to a 0 size is ambiguous (any size fits): an error, not a division by zero.
  CHECK_THROWS_AS(reshape(V(zeros<float>({0, 3})), {-1, 0}), ShapeError);
  CHECK_THROWS_AS(select(V(zeros<float>({0, 3})), 0, 0), ShapeError);
}

TEST_CASE("empty tensors: softmax, layer_norm, dropout") {
  check_op("softmax (0,5)", [](auto& x) { return softmax(x[0]); }, {{0, 5}}, {0, 5});
  check_op("softmax rows of length 0", [](auto& x) { return softmax(x[0]); }, {{3, 0}}, {3, 0});
  check_op("log_softmax (0,5) axis 0", [](auto& x) { return log_softmax(x[0], 0); }, {{0, 5}}, {0, 5});
  check_op("log_softmax (4,0,2) axis 1", [](auto& x) { return log_softmax(x[0], 1); }, {{4, 0, 2}}, {4, 0, 2});
  check_op("layer_norm (0,4)", [](auto& x) { return layer_norm(x[0], x[1], x[2]); }, {{0, 4}, {4}, {4}}, {0, 4});
  check_op("layer_norm (2,0)", [](auto& x) { return layer_norm(x[0], x[1], x[2]); }, {{2, 0}, {0}, {0}}, {2, 0});
  Generator gen(5);
  check_op("dropout (0,3)", [&](auto& x) { return dropout(x[0], 0.5, true, gen); }, {{0, 3}}, {0, 3});
}

// g++ 12 at -O3 warns, wrongly, that xtensor's svector copy of a zero-size shape reads an
// uninitialized value (-Wmaybe-uninitialized inside xstorage.hpp) in the lambdas below.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
TEST_CASE("empty tensors: embedding and cross_entropy") {
  check_op("embedding of no ids", [](auto& x) { return embedding(x[0], IndexArray::from_shape({0})); }, {{5, 3}},
           {0, 3});
  check_op("embedding (2,0) ids", [](auto& x) { return embedding(x[0], IndexArray::from_shape({2, 0})); }, {{5, 3}},
           {2, 0, 3});
  check_op("embedding of width 0", [](auto& x) { return embedding(x[0], IndexArray{1, 2}); }, {{5, 0}}, {2, 0});
  // An empty vocabulary has no valid id.
  CHECK_THROWS_WITH_AS(embedding(V(zeros<float>({0, 3})), IndexArray{0}), doctest::Contains("embedding"), ValueError);

  // No targets: like every target ignored, the loss is 0 with a zero gradient.
  V logits(zeros<float>({0, 4}), true);
  V loss = cross_entropy(logits, IndexArray::from_shape({0}));
  CHECK(loss.value()() == 0.0f);
  loss.backward();
  if (logits.has_grad()) CHECK(shape_str(logits.grad().shape()) == "(0, 4)");
  check_op("cross_entropy (2,0,4)", [](auto& x) { return cross_entropy(x[0], IndexArray::from_shape({2, 0})); },
           {{2, 0, 4}}, {});
  // V = 0: no class exists, so any target is out of range.
  CHECK_THROWS_WITH_AS(cross_entropy(V(zeros<float>({2, 0})), IndexArray{0, 0}), doctest::Contains("cross_entropy"),
                       ValueError);
}

#pragma GCC diagnostic pop

TEST_CASE("empty tensors: attention with zero batch, heads, queries or keys") {
  for (auto impl : {AttentionImpl::Fused, AttentionImpl::Composite}) {
    CAPTURE(impl == AttentionImpl::Fused);
    AttentionOptions opt;
    opt.impl = impl;
    auto attn = [&](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, opt).output; };
    check_op("B = 0", attn, {{0, 2, 3, 4}, {0, 2, 5, 4}, {0, 2, 5, 4}}, {0, 2, 3, 4});
    check_op("H = 0", attn, {{1, 0, 3, 4}, {1, 0, 5, 4}, {1, 0, 5, 4}}, {1, 0, 3, 4});
    check_op("Tq = 0", attn, {{1, 2, 0, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}}, {1, 2, 0, 4});
    check_op("Dv = 0", attn, {{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 0}}, {1, 2, 3, 0});
    // Tk = 0: every query has no key to attend, which the contract says gives a zero row.
    V q(test::random_array<float>({1, 2, 3, 4}, 1), true), k(zeros<float>({1, 2, 0, 4}), true),
        v(zeros<float>({1, 2, 0, 4}), true);
    V out = scaled_dot_product_attention(q, k, v, {}, opt).output;
    REQUIRE(shape_str(out.shape()) == "(1, 2, 3, 4)");
    for (float x : out.value()) CHECK(x == 0.0f);
    out.backward(full<float>({1, 2, 3, 4}, 1.0f));
    if (q.has_grad())
      for (float g : q.grad()) CHECK(g == 0.0f);
  }
}
