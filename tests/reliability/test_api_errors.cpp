// Library API misuse that tests/ops, tests/optim and tests/io do not already cover: NaN options,
// gradients of the wrong shape, values that are not scalars, a checkpoint tensor of the wrong
// dtype, extreme token ids. Each gives a qkv::Error whose message names the op or object, never a
// crash or a silently wrong result.

#include <hdf5.h>

#include <cmath>
#include <limits>

#include "qkv/io/checkpoint.hpp"
#include "qkv/ops/attention.hpp"
#include "qkv/ops/dropout.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/embedding.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/ops/matmul.hpp"
#include "qkv/ops/norm.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/optim/clip.hpp"
#include "test_util.hpp"

using namespace qkv;
using V = Variable<float>;
static const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST_CASE("api errors: NaN options are rejected, not propagated") {
  V x(test::random_array<float>({2, 4}, 1), true);
  Generator gen(1);
  CHECK_THROWS_WITH_AS(dropout(x, kNaN, true, gen), doctest::Contains("dropout"), ValueError);
  CHECK_THROWS_WITH_AS(layer_norm(x, V(), V(), kNaN), doctest::Contains("layer_norm"), ValueError);
  CHECK_THROWS_WITH_AS(cross_entropy(x, IndexArray{0, 1}, -100, kNaN), doctest::Contains("cross_entropy"), ValueError);
  V q(test::random_array<float>({1, 1, 2, 4}, 2)), k(test::random_array<float>({1, 1, 3, 4}, 3)),
      v(test::random_array<float>({1, 1, 3, 4}, 4));
  AttentionOptions opt;
  opt.dropout_p = kNaN;
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, {}, opt), doctest::Contains("dropout_p"), ValueError);
  CHECK_THROWS_WITH_AS(optim::clip_grad_norm<float>({x}, kNaN), doctest::Contains("max_norm"), ValueError);
}

TEST_CASE("api errors: backward with a gradient of the wrong shape or from a non-scalar") {
  V x(test::random_array<float>({2, 3}, 1), true);
  V y = mul_scalar(x, 2.0f);
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("(2, 3)"), Error);
  V y2 = mul_scalar(x, 2.0f);
  CHECK_THROWS_WITH_AS(y2.backward(zeros<float>({3, 2})), doctest::Contains("(3, 2)"), Error);
  CHECK_THROWS_WITH_AS(x.accumulate_grad(zeros<float>({4})), doctest::Contains("(4)"), Error);
  V fresh(zeros<float>({2}), true);
  CHECK_THROWS_WITH_AS(fresh.grad(), doctest::Contains("no gradient"), Error);
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), Error);
}

TEST_CASE("api errors: extreme token ids name the id and the position") {
  V w(zeros<float>({10, 4}), true);
  const Index big = std::numeric_limits<Index>::max(), small = std::numeric_limits<Index>::min();
  CHECK_THROWS_WITH_AS(embedding(w, IndexArray{{0, 1}, {2, big}}),
                       doctest::Contains(("id " + std::to_string(big) + " at position (1, 1)").c_str()), ValueError);
  CHECK_THROWS_WITH_AS(embedding(w, IndexArray{small}), doctest::Contains(std::to_string(small).c_str()), ValueError);
  CHECK_THROWS_WITH_AS(embedding(w, IndexArray{10}), doctest::Contains("[0, 10)"), ValueError);
  CHECK_THROWS_WITH_AS(cross_entropy(V(zeros<float>({1, 10})), IndexArray{big}), doctest::Contains("cross_entropy"),
                       ValueError);
}

TEST_CASE("api errors: a checkpoint tensor of the wrong dtype or rank is named on load") {
  const std::string dir = test::temp_dir("api_errors_ckpt");
  io::Checkpoint ck;
  ck.model = {{"w", full<float>({2, 2}, 1.0f)}};
  for (const char* kind : {"int", "string"}) {
    CAPTURE(kind);
    const std::string path = dir + "/" + kind + ".h5";
    io::save_checkpoint(path, ck);
    // Replace /model/w with a dataset of another type.
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(f >= 0);
    REQUIRE(H5Ldelete(f, "/model/w", H5P_DEFAULT) >= 0);
    hsize_t dims[2] = {2, 2};
    hid_t space = H5Screate_simple(2, dims, nullptr);
    if (std::string(kind) == "int") {
      long long data[4] = {1, 2, 3, 4};
      hid_t d = H5Dcreate2(f, "/model/w", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
      H5Dclose(d);
    } else {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, 4);
      char data[16] = "abcdefghijklmno";
      hid_t d = H5Dcreate2(f, "/model/w", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
      H5Dclose(d);
      H5Tclose(t);
    }
    H5Sclose(space);
    H5Fclose(f);
    io::seal_checkpoint_file(path);  // an edit on purpose: past the checksum, to the dtype check
    CHECK_THROWS_WITH_AS(io::load_checkpoint(path), doctest::Contains("/model/w: expected float32"), io::IoError);
  }
  // A loaded tensor of another shape is caught by check_compatible, naming both shapes.
  StateDict<float> expected = {{"w", zeros<float>({2, 3})}};
  CHECK_THROWS_WITH_AS(io::check_compatible(expected, ck.model, "x.h5"), doctest::Contains("(2, 3)"), ValueError);
}
