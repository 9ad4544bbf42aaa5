// Kernel micro-benchmarks at the shapes of the workloads in docs/performance.md (float32):
// matmul (forward and both backward products of a Linear layer), softmax, layer norm,
// cross-entropy, the head split (permute) and fused attention forward + backward; and bfloat16:
// a Linear layer's products, the bf16 peak of MFU (bf16_gemm_peak), and the AVX512-BF16 and
// AMX-BF16 instruction peaks (bf16_dot_peak, amx_bf16_peak).
//   build/bench/bench_kernels --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//   build/bench/bench_kernels --benchmark_filter=gemm     # one family
//   QKV_BENCH_THREADS=2 build/bench/bench_kernels          # OpenMP threads (default 1)
//   QKV_BENCH_GEMM=openblas build/bench/bench_kernels      # kernels::gemm on OpenBLAS alone in a build with oneDNN
// Counters (shown as rates, e.g. GFLOP=95/s): GFLOP/s for GEMM and attention (flops / real time), GB/s for the memory-bound kernels
// (bytes read + written once / real time).

#include "app/runtime.hpp"
#include <benchmark/benchmark.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "qkv/kernels/attention.hpp"
#include "qkv/kernels/bf16.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/cpu.hpp"
#include "qkv/kernels/cross_entropy.hpp"
#include "qkv/kernels/elementwise.hpp"
#include "qkv/kernels/layer_norm.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/kernels/softmax.hpp"
#include "qkv/tensor/random.hpp"
#include "qkv/tensor/tensor.hpp"

#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 on xsimd's AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xsimd/xsimd.hpp>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using namespace qkv;

Array<float> random_array(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  Array<float> a = Array<float>::from_shape(shape);
  for (auto& x : a) x = float(gen.uniform(-1, 1));
  return a;
}

void rate(benchmark::State& state, double per_iteration, const char* name) {
  state.counters[name] = benchmark::Counter(per_iteration * 1e-9 * double(state.iterations()),
                                            benchmark::Counter::kIsRate);
}

// A Linear layer y (R, N) = x (R, K) W^T, W (N, K): the forward product and both backward ones.
//   forward  y  = x W^T        gemm(no, trans)  M=R N=N K=K
//   dx       dx = dy W         gemm(no, no)     M=R N=K K=N
//   dW       dW = dy^T x       gemm(trans, no)  M=N N=K K=R
// serial: one OpenBLAS call for the whole product (kernels::gemm_serial) instead of qkv's
// shape-only blocks (kernels::gemm): at 1 thread the difference is the cost of the blocks.
void gemm_linear(benchmark::State& state, int which, bool serial = false) {
  const std::size_t R = std::size_t(state.range(0)), K = std::size_t(state.range(1)), N = std::size_t(state.range(2));
  Array<float> x = random_array({R, K}, 1), w = random_array({N, K}, 2), dy = random_array({R, N}, 3);
  Array<float> y = Array<float>::from_shape({R, N}), dx = Array<float>::from_shape({R, K});
  Array<float> dw = Array<float>::from_shape({N, K});
  using Gemm = void (*)(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                       const float*, std::size_t, float, float*, std::size_t);
  const Gemm gemm = serial ? Gemm(kernels::gemm_serial<float>) : Gemm(kernels::gemm<float>);
  for (auto _ : state) {
    if (which == 0)
      gemm(false, true, R, N, K, 1.f, x.data(), K, w.data(), K, 0.f, y.data(), N);
    else if (which == 1)
      gemm(false, false, R, K, N, 1.f, dy.data(), N, w.data(), K, 0.f, dx.data(), K);
    else
      gemm(true, false, N, K, R, 1.f, dy.data(), N, x.data(), K, 0.f, dw.data(), K);
    benchmark::ClobberMemory();
  }
  rate(state, 2.0 * double(R) * double(K) * double(N), "GFLOP");
}
void gemm_forward(benchmark::State& s) { gemm_linear(s, 0); }
void gemm_backward_input(benchmark::State& s) { gemm_linear(s, 1); }
void gemm_backward_weight(benchmark::State& s) { gemm_linear(s, 2); }
void gemm_forward_one_call(benchmark::State& s) { gemm_linear(s, 0, true); }
void gemm_backward_input_one_call(benchmark::State& s) { gemm_linear(s, 1, true); }
void gemm_backward_weight_one_call(benchmark::State& s) { gemm_linear(s, 2, true); }

// rows = B*T, in, out of the workloads' Linear layers: small (2048 rows, 64 <-> 256), medium
// (4096 rows, 256 <-> 256 and 256 <-> 1024), long (4096 rows, 128 <-> 512); and of the language
// models of tools/bench_lm.py: configs/fortunes.yaml (4096 rows, 192 <-> 768) and its 10.8M
// variant (384 <-> 1536).
void linear_shapes(benchmark::internal::Benchmark* b) {
  for (auto s : std::vector<std::vector<std::int64_t>>{{2048, 64, 64},    {2048, 64, 256},   {2048, 256, 64},
                                                       {4096, 256, 256},  {4096, 256, 1024}, {4096, 1024, 256},
                                                       {4096, 128, 128},  {4096, 128, 512},  {4096, 192, 192},
                                                       {4096, 192, 768},  {4096, 768, 192},  {4096, 384, 384},
                                                       {4096, 384, 1536}, {4096, 1536, 384}})
    b->Args(s);
  b->ArgNames({"rows", "in", "out"})->UseRealTime();
}
BENCHMARK(gemm_forward)->Apply(linear_shapes);
BENCHMARK(gemm_backward_input)->Apply(linear_shapes);
BENCHMARK(gemm_backward_weight)->Apply(linear_shapes);
BENCHMARK(gemm_forward_one_call)->Apply(linear_shapes);
BENCHMARK(gemm_backward_input_one_call)->Apply(linear_shapes);
BENCHMARK(gemm_backward_weight_one_call)->Apply(linear_shapes);

// One BLAS call on each backend (kernels::sgemm_on; 0 OpenBLAS, 1 oneDNN, in a build with it) at
// the blocks kernels::gemm cuts the language models' and medium's products into (4096 rows in 8
// row blocks of 512; weight gradients, K = 4096, in 4 depth slices of 1024; the 10.8M decoder's
// d_ff weight gradient in row blocks of 192) and at the fused attention's block products (64
// queries x 128 keys, head width D = 32, 48, 64): the measurements behind kernels::gemm_backend.
void gemm_block(benchmark::State& state) {
  const auto backend = state.range(0) ? kernels::GemmBackend::OneDnn : kernels::GemmBackend::OpenBlas;
  if (backend == kernels::GemmBackend::OneDnn && !kernels::onednn_built()) {
    state.SkipWithError("built without oneDNN (cmake -DQKV_ONEDNN=ON)");
    return;
  }
  const bool ta = state.range(1), tb = state.range(2);
  const std::size_t M = std::size_t(state.range(3)), N = std::size_t(state.range(4)), K = std::size_t(state.range(5));
  const float beta = float(state.range(6));
  Array<float> a = random_array(ta ? Shape{K, M} : Shape{M, K}, 1), b = random_array(tb ? Shape{N, K} : Shape{K, N}, 2);
  Array<float> c = random_array({M, N}, 3);
  for (auto _ : state) {
    kernels::sgemm_on(backend, ta, tb, M, N, K, 1.f, a.data(), ta ? M : K, b.data(), tb ? K : N, beta, c.data(), N);
    benchmark::ClobberMemory();
  }
  rate(state, 2.0 * double(M) * double(N) * double(K), "GFLOP");
}
void gemm_block_shapes(benchmark::internal::Benchmark* b) {
  // ta, tb, M, N, K, beta: Linear layers (forward x W^T, dx = dy W, dW = dy^T x), then attention.
  const std::vector<std::vector<std::int64_t>> shapes = {
      {0, 1, 512, 192, 192, 0},  {0, 1, 512, 768, 192, 0},  {0, 1, 512, 192, 768, 0},  {0, 0, 512, 192, 768, 0},
      {0, 0, 512, 768, 192, 0},  {1, 0, 192, 192, 1024, 0}, {1, 0, 768, 192, 1024, 0}, {1, 0, 192, 768, 1024, 0},
      {0, 1, 512, 384, 384, 0},  {0, 1, 512, 1536, 384, 0}, {0, 1, 512, 384, 1536, 0}, {0, 0, 512, 384, 1536, 0},
      {1, 0, 384, 384, 1024, 0}, {1, 0, 192, 384, 4096, 0}, {0, 1, 512, 256, 256, 0},  {0, 1, 512, 1024, 256, 0},
      {1, 0, 256, 256, 1024, 0}, {0, 0, 64, 128, 32, 0},    {0, 0, 64, 32, 128, 1},    {1, 0, 128, 32, 64, 1},
      {0, 0, 64, 128, 48, 0},    {0, 0, 64, 48, 128, 1},    {1, 0, 128, 48, 64, 1},    {0, 0, 64, 128, 64, 0},
      {0, 0, 64, 64, 128, 1},    {1, 0, 128, 64, 64, 1}};
  for (const auto& s : shapes)
    for (std::int64_t backend : {0, 1}) b->Args({backend, s[0], s[1], s[2], s[3], s[4], s[5]});
  b->ArgNames({"onednn", "ta", "tb", "M", "N", "K", "beta"})->UseRealTime();
}
BENCHMARK(gemm_block)->Apply(gemm_block_shapes);

// Square sgemm, to measure the machine's single-precision GEMM peak.
void gemm_square(benchmark::State& state) {
  const std::size_t n = std::size_t(state.range(0));
  Array<float> a = random_array({n, n}, 1), b = random_array({n, n}, 2), c = Array<float>::from_shape({n, n});
  for (auto _ : state) {
    kernels::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    benchmark::ClobberMemory();
  }
  rate(state, 2.0 * double(n) * n * n, "GFLOP");
}
BENCHMARK(gemm_square)->Arg(512)->Arg(1024)->Arg(2048)->UseRealTime();

// The core's single-precision FMA throughput: 12 independent chains of fused multiply-adds on
// the widest xsimd batch the build targets, no memory traffic. No GEMM on this CPU (at this ISA)
// can run faster; gemm_square / fma_peak is the fraction of it OpenBLAS reaches.
void fma_peak(benchmark::State& state) {
  using Batch = xsimd::batch<float>;
  constexpr int kChains = 12, kRepeats = 1000;
  Batch acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = Batch(1.0f + 1e-3f * float(i));
  const Batch a(0.9999999f), b(1e-7f);
  for (auto _ : state) {
    for (int r = 0; r < kRepeats; ++r)
      for (int i = 0; i < kChains; ++i) acc[i] = xsimd::fma(acc[i], a, b);
    for (int i = 0; i < kChains; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  rate(state, 2.0 * double(Batch::size) * kChains * kRepeats, "GFLOP");
  state.SetLabel(std::to_string(Batch::size) + " floats per FMA (" + xsimd::default_arch::name() + ")");
}
BENCHMARK(fma_peak)->UseRealTime();

// ---- bfloat16 (train.precision: bf16; kernels/bf16.hpp) ----

// A Linear layer's three products with bfloat16 operands (kernels::gemm_bf16: oneDNN's matmul,
// qkv's blocks), at the language models' shapes.
void gemm_bf16_linear(benchmark::State& state) {
  const int which = int(state.range(0));
  const std::size_t R = std::size_t(state.range(1)), K = std::size_t(state.range(2)), N = std::size_t(state.range(3));
  const Array<float> xf = random_array({R, K}, 1), wf = random_array({N, K}, 2), dyf = random_array({R, N}, 3);
  const kernels::Bf16Buffer x(xf.data(), xf.size()), w(wf.data(), wf.size()), dy(dyf.data(), dyf.size());
  Array<float> out = Array<float>::from_shape({which == 2 ? N : R, which == 0 ? N : K});
  for (auto _ : state) {
    if (which == 0)
      kernels::gemm_bf16(false, true, R, N, K, 1.f, x.data(), K, w.data(), K, 0.f, out.data(), N);
    else if (which == 1)
      kernels::gemm_bf16(false, false, R, K, N, 1.f, dy.data(), N, w.data(), K, 0.f, out.data(), K);
    else
      kernels::gemm_bf16(true, false, N, K, R, 1.f, dy.data(), N, x.data(), K, 0.f, out.data(), K);
    benchmark::ClobberMemory();
  }
  rate(state, 2.0 * double(R) * double(K) * double(N), "GFLOP");
  state.SetLabel(kernels::bf16_support().kernel);
}
BENCHMARK(gemm_bf16_linear)
    ->ArgsProduct({{0, 1, 2}, {4096}, {192}, {192, 768}})
    ->ArgsProduct({{0, 1, 2}, {4096}, {768}, {192}})
    ->ArgsProduct({{0, 1, 2}, {4096}, {384}, {384, 1536}})
    ->ArgsProduct({{0, 1, 2}, {4096}, {1536}, {384}})
    ->ArgNames({"product", "rows", "in", "out"})
    ->UseRealTime();

// The bf16 peak of MFU (tools/mfu.py, tools/bench_lm.py bf16): a large bf16 GEMM, 4096 x 1024 x
// 1024 through kernels::gemm_bf16 (8 row blocks of 512, one thread each), as qkv runs its products.
void bf16_gemm_peak(benchmark::State& state) {
  const std::size_t M = 4096, N = 1024, K = 1024;
  const Array<float> af = random_array({M, K}, 1), bf = random_array({K, N}, 2);
  const kernels::Bf16Buffer a(af.data(), af.size()), b(bf.data(), bf.size());
  Array<float> c = Array<float>::from_shape({M, N});
  for (auto _ : state) {
    kernels::gemm_bf16(false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 0.f, c.data(), N);
    benchmark::ClobberMemory();
  }
  rate(state, 2.0 * double(M) * double(N) * double(K), "GFLOP");
  state.SetLabel(kernels::bf16_info());
}
BENCHMARK(bf16_gemm_peak)->UseRealTime();

#if defined(__x86_64__)
// AVX512-BF16's instruction peak: 12 independent chains of vdpbf16ps (32 bf16 products summed
// into 16 floats each), no memory traffic.
__attribute__((target("avx512f,avx512bf16"))) void bf16_dot_chains(benchmark::State& state) {
  constexpr int kChains = 12, kRepeats = 1000;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * float(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(0.998f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-7f), _mm512_set1_ps(2e-7f));
  for (auto _ : state) {
    for (int r = 0; r < kRepeats; ++r)
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    for (int i = 0; i < kChains; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  rate(state, 2.0 * 32 * kChains * kRepeats, "GFLOP");
}
void bf16_dot_peak(benchmark::State& state) {
  if (!kernels::cpu_features().avx512_bf16) return state.SkipWithError("this CPU has no AVX512-BF16");
  bf16_dot_chains(state);
}
BENCHMARK(bf16_dot_peak)->UseRealTime();

// AMX-BF16's instruction peak: tdpbf16ps on three independent 16 x 16 accumulator tiles (16 x 32
// bf16 operands, 8192 products each), no memory traffic. Needs the OS's permission for the tile
// data (arch_prctl ARCH_REQ_XCOMP_PERM), which this program asks for.
struct TileConfig {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
__attribute__((target("amx-tile,amx-bf16"))) void amx_chains(benchmark::State& state) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  alignas(64) static std::uint16_t operand[16 * 32];
  for (auto& v : operand) v = 0x3f80;  // 1.0
  alignas(64) static float acc[16 * 16];
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  constexpr int kRepeats = 1000;
  for (auto _ : state) {
    for (int r = 0; r < kRepeats; ++r) {
      _tile_dpbf16ps(0, 4, 5);
      _tile_dpbf16ps(1, 6, 7);
      _tile_dpbf16ps(2, 4, 7);
      _tile_dpbf16ps(3, 6, 5);
    }
    _tile_stored(0, acc, 64);
    benchmark::DoNotOptimize(acc[0]);
  }
  _tile_release();
  rate(state, 2.0 * 16 * 16 * 32 * 4 * kRepeats, "GFLOP");
}
void amx_bf16_peak(benchmark::State& state) {
  if (!kernels::cpu_features().amx_bf16) return state.SkipWithError("this CPU has no AMX-BF16");
  constexpr long kReqPerm = 0x1023, kXtileData = 18;  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
  if (syscall(SYS_arch_prctl, kReqPerm, kXtileData) != 0)
    return state.SkipWithError("the OS does not allow the AMX tile data (arch_prctl)");
  amx_chains(state);
}
BENCHMARK(amx_bf16_peak)->UseRealTime();
#endif

// Softmax over rows of length n (attention-score rows of the composite path), forward + backward.
void softmax(benchmark::State& state) {
  const std::size_t rows = std::size_t(state.range(0)), n = std::size_t(state.range(1));
  Array<float> x = random_array({rows, n}, 1), dy = random_array({rows, n}, 2);
  Array<float> y = Array<float>::from_shape({rows, n}), dx = Array<float>::from_shape({rows, n});
  for (auto _ : state) {
    kernels::softmax_forward(y.data(), x.data(), rows, n, 1);
    kernels::softmax_backward(dx.data(), dy.data(), y.data(), rows, n, 1);
    benchmark::ClobberMemory();
  }
  rate(state, 5.0 * double(rows * n) * sizeof(float), "GB");  // x, y written, dy, y read, dx written
}
BENCHMARK(softmax)->Args({32 * 8 * 128, 128})->Args({4 * 4 * 1024, 1024})->ArgNames({"rows", "n"})->UseRealTime();

// The head split of multi-head attention: (B, T, H, D) -> (B, H, T, D), as split_heads does
// (merge_heads and the backward run the same kernel with the inverse order).
void split_heads(benchmark::State& state) {
  const std::size_t B = std::size_t(state.range(0)), T = std::size_t(state.range(1));
  const std::size_t H = std::size_t(state.range(2)), D = std::size_t(state.range(3));
  Array<float> x = random_array({B, T, H, D}, 1);
  Array<float> y = Array<float>::from_shape({B, H, T, D});
  const std::size_t perm[4] = {0, 2, 1, 3};
  for (auto _ : state) {
    kernels::permute(x.data(), x.shape(), perm, y.data());
    benchmark::ClobberMemory();
  }
  rate(state, 2.0 * double(x.size()) * sizeof(float), "GB");
}
BENCHMARK(split_heads)->Args({64, 32, 4, 16})->Args({32, 128, 8, 32})->Args({4, 1024, 4, 32})
    ->ArgNames({"B", "T", "H", "D"})->UseRealTime();

// LayerNorm over rows of width C, forward and backward separately.
void layer_norm(benchmark::State& state, bool backward) {
  const std::size_t rows = std::size_t(state.range(0)), C = std::size_t(state.range(1));
  Array<float> x = random_array({rows, C}, 1), dy = random_array({rows, C}, 2);
  Array<float> g = random_array({C}, 3), b = random_array({C}, 4);
  Array<float> y = Array<float>::from_shape({rows, C}), dx = Array<float>::from_shape({rows, C});
  Array<float> mean = Array<float>::from_shape({rows}), rstd = Array<float>::from_shape({rows});
  Array<float> dg = Array<float>::from_shape({C}), db = Array<float>::from_shape({C});
  kernels::layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), rows, C, 1e-5f);
  for (auto _ : state) {
    if (backward)
      kernels::layer_norm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), mean.data(), rstd.data(),
                                   g.data(), rows, C);
    else
      kernels::layer_norm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), rows, C, 1e-5f);
    benchmark::ClobberMemory();
  }
  rate(state, (backward ? 3.0 : 2.0) * double(rows * C) * sizeof(float), "GB");
}
void layer_norm_forward(benchmark::State& s) { layer_norm(s, false); }
void layer_norm_backward(benchmark::State& s) { layer_norm(s, true); }
BENCHMARK(layer_norm_forward)->Args({2048, 64})->Args({4096, 256})->Args({4096, 128})->ArgNames({"rows", "C"})->UseRealTime();
BENCHMARK(layer_norm_backward)->Args({2048, 64})->Args({4096, 256})->Args({4096, 128})->ArgNames({"rows", "C"})->UseRealTime();

// Cross-entropy over (N, V) logits, forward + backward.
void cross_entropy(benchmark::State& state) {
  const std::size_t N = std::size_t(state.range(0)), V = std::size_t(state.range(1));
  Array<float> logits = random_array({N, V}, 1), d = Array<float>::from_shape({N, V});
  Array<float> loss = Array<float>::from_shape({N}), lse = Array<float>::from_shape({N});
  std::vector<std::int64_t> targets(N);
  for (std::size_t i = 0; i < N; ++i) targets[i] = std::int64_t(i * 7 % V);
  for (auto _ : state) {
    kernels::cross_entropy_forward(loss.data(), lse.data(), logits.data(), targets.data(), N, V, -100, 0.f);
    kernels::cross_entropy_backward(d.data(), logits.data(), lse.data(), targets.data(), N, V, -100, 0.f, 1.f / N);
    benchmark::ClobberMemory();
  }
  rate(state, 3.0 * double(N * V) * sizeof(float), "GB");
}
BENCHMARK(cross_entropy)->Args({2048, 16})->Args({4096, 64})->Args({4096, 16})->ArgNames({"N", "V"})->UseRealTime();

// Dropout's mask applied to n floats (DropoutDraws::apply, one thread): n = 8192 stays in L1
// (the attention kernel's rows), 4M streams from memory (a feed-forward hidden layer).
void dropout_apply(benchmark::State& state) {
  const std::size_t n = std::size_t(state.range(0));
  Array<float> x = random_array({n}, 1), y = Array<float>::from_shape({n});
  const DropoutDraws draws(7, 0.1);
  std::uint64_t first = 0;
  for (auto _ : state) {
    draws.apply(x.data(), y.data(), n, first, 1.0f / 0.9f);
    first += n;
    benchmark::ClobberMemory();
  }
  rate(state, 8.0 * double(n), "GB");
}
BENCHMARK(dropout_apply)->Arg(8192)->Arg(1 << 22)->ArgName("n")->UseRealTime();

// Fused attention forward + backward at the workloads' shapes (B, H, T, D), no mask, dropout
// p = drop / 1000 (0 or the workloads' 0.1).
void attention(benchmark::State& state) {
  const std::size_t B = std::size_t(state.range(0)), H = std::size_t(state.range(1)), T = std::size_t(state.range(2)),
                    D = std::size_t(state.range(3));
  const kernels::AttentionDropout drop{double(state.range(4)) / 1000.0, 7, 0};
  Array<float> q = random_array({B, H, T, D}, 1), k = random_array({B, H, T, D}, 2), v = random_array({B, H, T, D}, 3);
  Array<float> dout = random_array({B, H, T, D}, 4), out = Array<float>::from_shape({B, H, T, D});
  Array<float> lse = Array<float>::from_shape({B, H, T});
  Array<float> dq = Array<float>::from_shape({B, H, T, D}), dk = dq, dv = dq;
  const float scale = 1.0f / std::sqrt(float(D));
  for (auto _ : state) {
    kernels::attention_forward<float>(out.data(), lse.data(), nullptr, q.data(), k.data(), v.data(), {}, drop, scale,
                                      B, H, T, T, D, D);
    kernels::attention_backward<float>(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                                       out.data(), lse.data(), {}, drop, scale, B, H, T, T, D, D);
    benchmark::ClobberMemory();
  }
  // Forward: QK^T and PV, 2 * 2*T*T*D; backward: recompute QK^T plus dV, dP, dQ, dK, 5 * 2*T*T*D.
  rate(state, 7.0 * 2.0 * double(B * H) * double(T) * double(T) * double(D), "GFLOP");
  state.SetItemsProcessed(std::int64_t(state.iterations() * B * T));
}
BENCHMARK(attention)
    ->Args({64, 4, 32, 16, 0})
    ->Args({32, 8, 128, 32, 0})
    ->Args({4, 4, 1024, 32, 0})
    ->Args({64, 4, 32, 16, 100})
    ->Args({32, 8, 128, 32, 100})
    ->Args({4, 4, 1024, 32, 100})
    ->ArgNames({"B", "H", "T", "D", "drop"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (const std::string e = qkv::app::prepare_process(nullptr); !e.empty()) return std::fprintf(stderr, "%s\n", e.c_str()), 2;
  if (const char* t = std::getenv("QKV_BENCH_THREADS")) qkv::set_num_threads(std::atoi(t));
  else qkv::set_num_threads(1);
  if (const char* g = std::getenv("QKV_BENCH_GEMM")) qkv::kernels::set_onednn_enabled(std::string(g) != "openblas");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas", qkv::app::blas_description());
  benchmark::AddCustomContext("qkv_threads", std::to_string(qkv::num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
