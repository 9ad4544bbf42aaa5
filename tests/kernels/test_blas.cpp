#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "qkv/kernels/blas.hpp"
#include "qkv/tensor/parallel.hpp"
#include "test_util.hpp"

using namespace qkv;

namespace {

// C = alpha op(A) op(B) + beta C with plain loops in long double, on stored matrices with row
// strides lda/ldb/ldc (op = transpose when the flag is set).
template <class T>
void naive_gemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A, std::size_t lda,
                const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      long double s = 0;
      for (std::size_t k = 0; k < K; ++k)
        s += (long double)(ta ? A[k * lda + i] : A[i * lda + k]) * (long double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = T((long double)alpha * s + (beta == T(0) ? 0.0L : (long double)beta * C[i * ldc + j]));
    }
}

struct Case {
  std::size_t M, N, K;
};

// Errors are compared per unit of K (the rounding bound grows with K). Odd sizes, a size below and above the 64-row split granularity, and ones big enough for gemm()
// to split across threads (M*N*K >= 2^18).
// The last two are cut along K (K >= 4 max(M, N): 2 slices, and 4 with a short last one).
const Case kCases[] = {{1, 1, 1},     {3, 5, 7},      {17, 1, 33},    {65, 31, 9}, {130, 67, 45},
                       {67, 200, 41}, {257, 129, 65}, {64, 48, 2048}, {40, 70, 4000}};

template <class T>
void check_against_naive(double tol) {
  std::uint64_t seed = 1;
  for (const Case& c : kCases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (T beta : {T(0), T(0.5)}) {
          // Padded row strides (ld > row length) check that strides are honoured.
          const std::size_t lda = (ta ? c.M : c.K) + 3, ldb = (tb ? c.K : c.N) + 2, ldc = c.N + 1;
          Array<T> A = test::random_array<T>({ta ? c.K : c.M, lda}, seed++);
          Array<T> B = test::random_array<T>({tb ? c.N : c.K, ldb}, seed++);
          Array<T> C0 = test::random_array<T>({c.M, ldc}, seed++);
          Array<T> want = C0, got = C0;
          naive_gemm<T>(ta, tb, c.M, c.N, c.K, T(1.5), A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
          kernels::gemm<T>(ta, tb, c.M, c.N, c.K, T(1.5), A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
          INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << ta << " tb " << tb << " beta " << beta);
          double worst = 0;
          for (std::size_t i = 0; i < c.M; ++i)
            for (std::size_t j = 0; j < c.N; ++j)
              worst = std::max(worst, std::abs(double(got(i, j)) - double(want(i, j))) / double(c.K));
          CHECK(worst < tol);
          // Padding columns of C are not written.
          for (std::size_t i = 0; i < c.M; ++i) CHECK(got(i, c.N) == C0(i, c.N));
        }
}

template <class T>
Array<T> gemm_with_threads(int threads, bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K) {
  const int before = num_threads();
  set_num_threads(threads);
  Array<T> A = test::random_array<T>(ta ? Shape{K, M} : Shape{M, K}, 11);
  Array<T> B = test::random_array<T>(tb ? Shape{N, K} : Shape{K, N}, 12);
  Array<T> C = test::random_array<T>({M, N}, 13);
  kernels::gemm<T>(ta, tb, M, N, K, T(1), A.data(), ta ? M : K, B.data(), tb ? K : N, T(1), C.data(), N);
  set_num_threads(before);
  return C;
}

}  // namespace

TEST_CASE("gemm: float matches a naive loop, all transposes, odd sizes, strided") { check_against_naive<float>(1e-6); }

TEST_CASE("gemm: double matches a naive loop, all transposes, odd sizes, strided") { check_against_naive<double>(1e-14); }

TEST_CASE("gemm: 1, 2 and 3 threads give the same bits, split by rows, by columns and along K") {
  // Shapes of the models qkv trains (2048 rows of width 64: batch 64 x length 32), shapes whose
  // blocks do not divide evenly, and one left whole. Before the blocks depended on the shape only,
  // the first three differed in the last bits at 2 threads with OpenBLAS's Haswell kernels.
  struct Case { std::size_t M, N, K; };
  // The last three: weight gradients (K = rows of the batch), cut along K.
  const Case cases[] = {{2048, 64, 64},  {1000, 64, 64},   {64, 2048, 64},  {2048, 256, 64}, {300, 70, 100},
                        {70, 300, 100}, {64, 64, 2048},   {256, 64, 4096}, {40, 70, 4000}};
  CHECK(kernels::gemm_block_count(64, 64, 2048) == 4);
  CHECK(kernels::gemm_block_count(40, 70, 4000) == 4);
  CHECK(kernels::gemm_block_count(2048, 64, 64) == 4);
  CHECK(kernels::gemm_block_count(64, 2048, 64) == 4);
  CHECK(kernels::gemm_block_count(2048, 256, 64) == 8);
  CHECK(kernels::gemm_block_count(100, 100, 100) == 1);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Case& c : cases) {
        CAPTURE(c.M);
        CAPTURE(c.N);
        const Array<float> one = gemm_with_threads<float>(1, ta, tb, c.M, c.N, c.K);
        CHECK(test::bitwise_equal(one, gemm_with_threads<float>(2, ta, tb, c.M, c.N, c.K)));
        CHECK(test::bitwise_equal(one, gemm_with_threads<float>(3, ta, tb, c.M, c.N, c.K)));
        const Array<double> d1 = gemm_with_threads<double>(1, ta, tb, c.M, c.N, c.K);
        CHECK(test::bitwise_equal(d1, gemm_with_threads<double>(2, ta, tb, c.M, c.N, c.K)));
      }
}

TEST_CASE("gemm: blocks are multiples of 64 lines, each above the small-matrix line, and cover C") {
  for (std::size_t M : {64, 127, 128, 500, 1000, 2048, 4096, 10000})
    for (std::size_t N : {16, 64, 300})
      for (std::size_t K : {8, 64, 512, 4096}) {
        const std::size_t blocks = kernels::gemm_block_count(M, N, K);
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        CHECK(blocks >= 1);
        CHECK(blocks <= 8);
        if (blocks > 1) {
          const bool deep = K >= 4 * std::max(M, N);  // cut along K: lines of M x N multiply-adds
          const std::size_t extent = deep ? K : std::max(M, N), line = deep ? M * N : std::min(M, N) * K;
          const std::size_t block = ((extent + blocks - 1) / blocks + 63) / 64 * 64;
          CHECK((blocks - 1) * block < extent);
          CHECK(double(extent - (blocks - 1) * block) * double(line) >= 2e6);
        }
      }
  // A big product is cut into 8, whatever the thread count (the same calls at 1 thread).
  CHECK(kernels::gemm_block_count(4096, 512, 512) == 8);
}

TEST_CASE("gemm: K = 0 scales C by beta, and the BLAS in use is reported") {
  Array<float> C = full<float>({2, 3}, 4.0f);
  kernels::gemm<float>(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.5f, C.data(), 3);
  CHECK(C(1, 2) == 2.0f);
  kernels::gemm<float>(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.0f, C.data(), 3);
  CHECK(C(0, 0) == 0.0f);
  CHECK(kernels::blas_info().find("OpenBLAS") != std::string::npos);
}

TEST_CASE("gemm: the backend is a rule on the shape, oneDNN only above 100^3 multiply-adds in a build with it") {
  using kernels::GemmBackend;
  const GemmBackend big = kernels::onednn_built() ? GemmBackend::OneDnn : GemmBackend::OpenBlas;
  CHECK(kernels::gemm_backend(100, 100, 100) == GemmBackend::OpenBlas);  // OpenBLAS's small-matrix line
  CHECK(kernels::gemm_backend(64, 128, 48) == GemmBackend::OpenBlas);    // an attention block
  CHECK(kernels::gemm_backend(101, 100, 100) == big);
  CHECK(kernels::gemm_backend(512, 192, 192) == big);  // a Linear layer's block
  CHECK((kernels::blas_info().find("oneDNN") != std::string::npos) == kernels::onednn_built());
}

TEST_CASE("gemm: both backends match a naive loop, all transposes, strided") {
  using kernels::GemmBackend;
  std::vector<GemmBackend> backends{GemmBackend::OpenBlas};
  if (kernels::onednn_built()) backends.push_back(GemmBackend::OneDnn);
  else
    CHECK_THROWS_AS(kernels::sgemm_on(GemmBackend::OneDnn, false, false, 1, 1, 1, 1.f, nullptr, 1, nullptr, 1, 0.f,
                                      nullptr, 1),
                    std::invalid_argument);
  std::uint64_t seed = 100;
  for (GemmBackend backend : backends)
    for (const Case& c : {Case{130, 67, 45}, Case{200, 96, 130}, Case{40, 70, 4000}})
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (float beta : {0.f, 0.5f}) {
            const std::size_t lda = (ta ? c.M : c.K) + 3, ldb = (tb ? c.K : c.N) + 2, ldc = c.N + 1;
            Array<float> A = test::random_array<float>({ta ? c.K : c.M, lda}, seed++);
            Array<float> B = test::random_array<float>({tb ? c.N : c.K, ldb}, seed++);
            Array<float> want = test::random_array<float>({c.M, ldc}, seed++), got = want;
            naive_gemm<float>(ta, tb, c.M, c.N, c.K, 1.5f, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
            kernels::sgemm_on(backend, ta, tb, c.M, c.N, c.K, 1.5f, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
            INFO("backend " << int(backend) << " M " << c.M << " N " << c.N << " K " << c.K << " ta " << ta << " tb " << tb);
            double worst = 0;
            for (std::size_t i = 0; i < c.M; ++i)
              for (std::size_t j = 0; j < c.N; ++j)
                worst = std::max(worst, std::abs(double(got(i, j)) - double(want(i, j))) / double(c.K));
            CHECK(worst < 1e-6);
            for (std::size_t i = 0; i < c.M; ++i) CHECK(got(i, c.N) == want(i, c.N));  // padding untouched
          }
}

TEST_CASE("gemm: a oneDNN call runs on one thread, inside a parallel region or not, and leaves the thread count (without oneDNN: asking for it throws)") {
  // dnnl_sgemm outside a parallel region would use every OpenMP thread and cut the product its own
  // way: at this shape (A B^T, 128 x 256 x 1024) oneDNN 2.6 on 2 threads changed 84% of the values
  // in the last bits (Zen 5). qkv runs every call on one thread, so the product called at 2 or 3
  // threads, outside a region, equals the one called inside a region (where oneDNN always runs on
  // the calling thread) and the one at 1 thread.
  if (!kernels::onednn_built()) {
    float a = 1, b = 1, c = 0;
    CHECK_THROWS_AS(kernels::sgemm_on(kernels::GemmBackend::OneDnn, false, false, 1, 1, 1, 1.f, &a, 1, &b, 1, 0.f, &c, 1),
                    std::invalid_argument);
    return;
  }
  const std::size_t M = 128, N = 256, K = 1024;
  Array<float> A = test::random_array<float>({M, K}, 21), B = test::random_array<float>({N, K}, 22);
  auto product = [&](int threads, bool in_region) {
    const int before = num_threads();
    set_num_threads(threads);
    Array<float> C = full<float>({M, N}, 0.f);
    auto call = [&] {
      kernels::sgemm_on(kernels::GemmBackend::OneDnn, false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f,
                        C.data(), N);
    };
    if (in_region) {
#pragma omp parallel num_threads(2)
      {
#pragma omp single
        call();
      }
    } else {
      call();
    }
    CHECK(num_threads() == threads);
    set_num_threads(before);
    return C;
  };
  const Array<float> one = product(1, false);
  CHECK(test::bitwise_equal(one, product(2, false)));
  CHECK(test::bitwise_equal(one, product(3, false)));
  CHECK(test::bitwise_equal(one, product(2, true)));
  // And through gemm: a one-block product above the line (128^3), called at 2 threads.
  CHECK(kernels::gemm_block_count(128, 128, 128) == 1);
  CHECK(test::bitwise_equal(gemm_with_threads<float>(1, false, true, 128, 128, 128),
                            gemm_with_threads<float>(2, false, true, 128, 128, 128)));
}
