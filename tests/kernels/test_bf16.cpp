#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <array>
#include <vector>

#include "qkv/kernels/attention.hpp"
#include "qkv/kernels/bf16.hpp"
#include "qkv/kernels/cpu.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/tensor/random.hpp"
#include "test_util.hpp"

using namespace qkv;
using kernels::bf16;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// op(A) op(B) in long double on the bf16 values (exact products), scaled and added as gemm does.
void reference(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16* A,
               std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      long double s = 0;
      for (std::size_t k = 0; k < K; ++k)
        s += (long double)kernels::from_bf16(ta ? A[k * lda + i] : A[i * lda + k]) *
             kernels::from_bf16(tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = float(alpha * s + (beta == 0 ? 0.0L : (long double)beta * C[i * ldc + j]));
    }
}

std::vector<bf16> random_bf16(std::size_t n, std::uint64_t seed) {
  const Array<float> a = test::random_array<float>({n}, seed);
  std::vector<bf16> out(n);
  kernels::to_bf16(out.data(), a.data(), n);
  return out;
}

// gemm_bf16 of (M, N, K) at `threads` threads, on fixed random operands and C.
Array<float> bf16_with_threads(int threads, bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K) {
  const int before = num_threads();
  set_num_threads(threads);
  const std::vector<bf16> A = random_bf16(M * K, 21), B = random_bf16(K * N, 22);
  Array<float> C = test::random_array<float>({M, N}, 23);
  kernels::gemm_bf16(ta, tb, M, N, K, 1.f, A.data(), ta ? M : K, B.data(), tb ? K : N, 1.f, C.data(), N);
  set_num_threads(before);
  return C;
}

}  // namespace

TEST_CASE("bf16: rounding to nearest even, zeros and denormals to signed zero, infinities and NaN kept") {
  using kernels::to_bf16;
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(-2.0f) == 0xc000);
  CHECK(to_bf16(from_bits(0x3f808000)) == 0x3f80);  // halfway between 0x3f80 and 0x3f81: to the even one
  CHECK(to_bf16(from_bits(0x3f818000)) == 0x3f82);  // halfway between 0x3f81 and 0x3f82: to the even one
  CHECK(to_bf16(from_bits(0x3f808001)) == 0x3f81);  // above halfway: up
  CHECK(to_bf16(from_bits(0x3f807fff)) == 0x3f80);  // below halfway: down
  CHECK(to_bf16(1e-40f) == 0x0000);                  // a denormal: zero
  CHECK(to_bf16(-1e-40f) == 0x8000);                 // of its sign
  CHECK(to_bf16(-0.0f) == 0x8000);
  CHECK(to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to infinity
  CHECK(to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(to_bf16(from_bits(0x7f800001)) == 0x7fc0);  // a signalling NaN becomes a quiet one
  CHECK(std::isnan(kernels::from_bf16(to_bf16(std::nanf("")))));
  CHECK(kernels::from_bf16(0x3f81) == 1.0f + 1.0f / 128);
  // Rounding error at most half a unit in the last of 8 significant bits.
  for (float x : {0.1f, 3.14159f, -123.456f, 6.02e23f}) CHECK(std::abs(kernels::from_bf16(to_bf16(x)) - x) <= std::abs(x) / 256);
}

TEST_CASE("bf16: the vectorised conversion gives the bits of the scalar rule, any length and any input") {
  // Random bit patterns (every class: normals, denormals, NaNs, infinities) and lengths around the
  // 32 values the AVX512-BF16 path converts at once.
  Generator g(5);
  std::vector<float> src(1000);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = from_bits(std::uint32_t(g.next_u64()));
  src[3] = from_bits(0x00000001), src[4] = from_bits(0x807fffff), src[5] = from_bits(0x7f800000);
  src[6] = from_bits(0x3f808000), src[7] = from_bits(0x7fffffff);
  for (std::size_t n : {0, 1, 31, 32, 33, 64, 95, 1000}) {
    CAPTURE(n);
    std::vector<bf16> got(n + 1, 0xabcd);
    kernels::to_bf16(got.data(), src.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(got[i] == kernels::to_bf16(src[i]));
    }
    CHECK(got[n] == 0xabcd);  // nothing written past the end
  }
  const kernels::Bf16Buffer b(src.data(), src.size());
  CHECK(b.size() == src.size());
  for (std::size_t i = 0; i < src.size(); ++i) CHECK(b.data()[i] == kernels::to_bf16(src[i]));
  INFO("this CPU: " << kernels::cpu_features_text());
}

TEST_CASE("bf16: gemm_bf16 is the float32 sum of the exact products, all transposes, strided, alpha and beta") {
  // Products of bf16 values are exact in float32; only the additions round (order not fixed).
  struct Case { std::size_t M, N, K; };
  const Case cases[] = {{1, 1, 1}, {3, 5, 7}, {65, 31, 9}, {130, 67, 45}, {257, 129, 65}, {64, 48, 2048}, {512, 192, 64}};
  std::uint64_t seed = 1;
  for (const Case& c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.f, 1.f, 0.5f}) {
          const std::size_t lda = (ta ? c.M : c.K) + 3, ldb = (tb ? c.K : c.N) + 2, ldc = c.N + 1;
          const std::vector<bf16> A = random_bf16((ta ? c.K : c.M) * lda, seed++);
          const std::vector<bf16> B = random_bf16((tb ? c.N : c.K) * ldb, seed++);
          const Array<float> C0 = test::random_array<float>({c.M, ldc}, seed++);
          Array<float> want = C0, got = C0;
          reference(ta, tb, c.M, c.N, c.K, 0.75f, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
          kernels::gemm_bf16(ta, tb, c.M, c.N, c.K, 0.75f, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
          INFO("M " << c.M << " N " << c.N << " K " << c.K << " ta " << ta << " tb " << tb << " beta " << beta);
          double worst = 0;
          for (std::size_t i = 0; i < c.M; ++i)
            for (std::size_t j = 0; j < c.N; ++j)
              worst = std::max(worst, std::abs(double(got(i, j)) - double(want(i, j))) / double(c.K));
          CHECK(worst < 1e-6);
          for (std::size_t i = 0; i < c.M; ++i) CHECK(got(i, c.N) == C0(i, c.N));  // padding untouched
        }
}

TEST_CASE("bf16: gemm_bf16 gives the same bits at 1, 2 and 3 threads, split by rows, by columns and along K") {
  struct Case { std::size_t M, N, K; };
  const Case cases[] = {{2048, 64, 64}, {1000, 64, 64}, {64, 2048, 64}, {4096, 192, 192}, {300, 70, 100},
                        {192, 192, 4096}, {40, 70, 4000}};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Case& c : cases) {
        CAPTURE(c.M);
        CAPTURE(c.N);
        CAPTURE(c.K);
        const Array<float> one = bf16_with_threads(1, ta, tb, c.M, c.N, c.K);
        CHECK(test::bitwise_equal(one, bf16_with_threads(2, ta, tb, c.M, c.N, c.K)));
        CHECK(test::bitwise_equal(one, bf16_with_threads(3, ta, tb, c.M, c.N, c.K)));
        CHECK(test::bitwise_equal(one, bf16_with_threads(1, ta, tb, c.M, c.N, c.K)));  // run to run
      }
}

TEST_CASE("bf16: operands of either precision, and a mix refused") {
  const Array<float> a = test::random_array<float>({4, 6}, 1), b = test::random_array<float>({6, 5}, 2);
  const kernels::Bf16Buffer al(a.data(), a.size()), bl(b.data(), b.size());
  Array<float> f = zeros<float>({4, 5}), l = zeros<float>({4, 5}), want = zeros<float>({4, 5});
  kernels::gemm<float>(false, false, 4, 5, 6, 1.f, {a.data()}, 6, {b.data()}, 5, 0.f, f.data(), 5);
  kernels::gemm<float>(false, false, 4, 5, 6, 1.f, {nullptr, al.data()}, 6, {nullptr, bl.data()}, 5, 0.f, l.data(), 5);
  reference(false, false, 4, 5, 6, 1.f, al.data(), 6, bl.data(), 5, 0.f, want.data(), 5);
  for (std::size_t i = 0; i < f.size(); ++i) {
    CHECK(std::abs(l.data()[i] - want.data()[i]) < 1e-6);
    CHECK(std::abs(f.data()[i] - l.data()[i]) < 0.05);  // rounding the operands: a few 2^-9
  }
  CHECK_THROWS_AS(kernels::gemm<float>(false, false, 4, 5, 6, 1.f, {a.data()}, 6, {nullptr, bl.data()}, 5, 0.f,
                                       f.data(), 5),
                  std::logic_error);
  CHECK(kernels::lowered(a.data(), a.size(), false).empty());
  CHECK(kernels::lowered(static_cast<const double*>(nullptr), 3, true).empty());  // double never lowers
}

TEST_CASE("bf16: the per-thread product precision and its guard") {
  CHECK(kernels::product_precision() == kernels::Precision::Float32);
  {
    kernels::ProductPrecisionGuard g(kernels::Precision::BFloat16);
    CHECK(kernels::lower_products<float>());
    CHECK_FALSE(kernels::lower_products<double>());
    {
      kernels::ProductPrecisionGuard inner(kernels::Precision::Float32);
      CHECK_FALSE(kernels::lower_products<float>());
    }
    CHECK(kernels::lower_products<float>());
  }
  CHECK(kernels::product_precision() == kernels::Precision::Float32);
}

TEST_CASE("bf16: support is decided by the CPU's AMX-BF16 and the kernel oneDNN runs") {
  const kernels::Bf16Support& s = kernels::bf16_support();
  INFO(kernels::bf16_info());
  CHECK(s.fast == s.reason.empty());
  if (s.fast) {
    CHECK(kernels::cpu_features().amx_bf16);
    CHECK(s.kernel.find("amx") != std::string::npos);
  }
  if (!kernels::cpu_features().amx_bf16) CHECK_FALSE(s.fast);
  if (!s.library.empty()) CHECK_FALSE(s.kernel.empty());
  CHECK(kernels::bf16_info().rfind("bf16 products: ", 0) == 0);
}

TEST_CASE("bf16: fused attention with bfloat16 products, close to float32 and the same bits at 1 and 2 threads") {
  const std::size_t B = 2, H = 3, T = 150, D = 16;
  const Array<float> q = test::random_array<float>({B, H, T, D}, 1), k = test::random_array<float>({B, H, T, D}, 2),
                     v = test::random_array<float>({B, H, T, D}, 3), dout = test::random_array<float>({B, H, T, D}, 4);
  kernels::AttentionMasks<float> m;
  m.causal = true;
  const kernels::AttentionDropout drop{0.1, 9, 0};
  auto run = [&](kernels::Precision p, int threads) {
    const int before = num_threads();
    set_num_threads(threads);
    std::vector<Array<float>> r = {zeros<float>({B, H, T, D}), zeros<float>({B, H, T}), zeros<float>({B, H, T, D}),
                                   zeros<float>({B, H, T, D}), zeros<float>({B, H, T, D})};
    const kernels::AttentionLowered low = kernels::lower_attention(q.data(), k.data(), v.data(), q.size(), k.size(),
                                                                   v.size(), p == kernels::Precision::BFloat16);
    kernels::attention_forward<float>(r[0].data(), r[1].data(), nullptr, q.data(), k.data(), v.data(), m, drop, 0.25f,
                                      B, H, T, T, D, D, 0, &low);
    kernels::attention_backward<float>(r[2].data(), r[3].data(), r[4].data(), dout.data(), q.data(), k.data(), v.data(),
                                       r[0].data(), r[1].data(), m, drop, 0.25f, B, H, T, T, D, D, &low);
    set_num_threads(before);
    return r;
  };
  const auto f32 = run(kernels::Precision::Float32, 1), low = run(kernels::Precision::BFloat16, 1),
             low2 = run(kernels::Precision::BFloat16, 2);
  for (std::size_t i = 0; i < f32.size(); ++i) {
    CAPTURE(i);
    CHECK(test::bitwise_equal(low[i], low2[i]));
    double diff = 0, norm = 0;
    for (std::size_t j = 0; j < f32[i].size(); ++j) {
      diff += std::pow(double(low[i].data()[j]) - f32[i].data()[j], 2);
      norm += std::pow(double(f32[i].data()[j]), 2);
    }
    CHECK(std::sqrt(diff / norm) < 1e-2);  // relative to the float32 result, in the 2-norm
    CHECK(std::sqrt(diff / norm) > 0);     // the products did change
  }
}

TEST_CASE("bf16: a bias fused into gemm_bf16, every cut, and column sums taken while rounding") {
  // 4096 x 192 x 64 is cut into row blocks, 64 x 2048 x 64 into column blocks; the bias follows.
  for (auto [M, N, K] : {std::array<std::size_t, 3>{4096, 192, 64}, {64, 2048, 64}, {5, 7, 3}}) {
    CAPTURE(M);
    CAPTURE(N);
    const std::vector<bf16> A = random_bf16(M * K, 1), B = random_bf16(N * K, 2);
    const Array<float> bias = test::random_array<float>({N}, 3);
    Array<float> got = zeros<float>({M, N}), want = zeros<float>({M, N});
    kernels::gemm_bf16(false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, got.data(), N, bias.data());
    reference(false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, want.data(), N);
    double worst = 0;
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) worst = std::max(worst, std::abs(double(got(i, j)) - want(i, j) - bias(j)));
    CHECK(worst < 1e-5);
  }
  const std::size_t rows = 300, cols = 37;
  const Array<float> g = test::random_array<float>({rows, cols}, 4);
  std::vector<float> sums(cols, 1.f);
  const kernels::Bf16Buffer low = kernels::lowered_with_column_sums(g.data(), rows, cols, sums.data());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(low.data()[i] == kernels::to_bf16(g.data()[i]));
  for (std::size_t j = 0; j < cols; ++j) {
    double s = 1;
    for (std::size_t r = 0; r < rows; ++r) s += g(r, j);
    CHECK(std::abs(sums[j] - s) < 1e-4);
  }
  std::vector<float> two_threads(cols, 1.f);  // the same bits at 2 threads (blocks of 64 rows, added in order)
  const int before = num_threads();
  set_num_threads(2);
  const std::size_t big = 4096;
  const Array<float> h = test::random_array<float>({big, cols}, 5);
  std::vector<float> one(cols, 0.f), two(cols, 0.f);
  kernels::lowered_with_column_sums(h.data(), big, cols, two.data());
  set_num_threads(1);
  kernels::lowered_with_column_sums(h.data(), big, cols, one.data());
  set_num_threads(before);
  CHECK(one == two);
}
