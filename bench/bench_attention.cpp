// Attention forward + backward, fused kernel vs composite engine ops, float32, B = 1, H = 8, D = 64.
//   build/bench/bench_attention --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// Reports time, items/s (query tokens B*T per second) and peak_MiB: the most memory the qkv pool
// held at once during one forward + backward, above what was held before (inputs excluded).

#include "app/runtime.hpp"
#include <benchmark/benchmark.h>

#include <algorithm>

#include "qkv/kernels/blas.hpp"
#include "qkv/ops/attention.hpp"
#include "qkv/tensor/allocator.hpp"

namespace {

using namespace qkv;

constexpr std::size_t kB = 1, kH = 8, kD = 64;

Array<float> random_array(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  Array<float> a = Array<float>::from_shape(shape);
  for (auto& x : a) x = float(gen.uniform(-1, 1));
  return a;
}

void attention(benchmark::State& state, AttentionImpl impl) {
  const std::size_t T = std::size_t(state.range(0));
  Variable<float> q(random_array({kB, kH, T, kD}, 1), true);
  Variable<float> k(random_array({kB, kH, T, kD}, 2), true);
  Variable<float> v(random_array({kB, kH, T, kD}, 3), true);
  const Array<float> grad_out = random_array({kB, kH, T, kD}, 4);
  AttentionOptions opt;
  opt.impl = impl;
  std::uint64_t peak = 0;
  for (auto _ : state) {
    for (const auto* x : {&q, &k, &v}) x->zero_grad();
    pool::reset_peak();
    const std::uint64_t before = pool::stats().in_use_bytes;
    {
      AttentionOutput<float> r = scaled_dot_product_attention(q, k, v, {}, opt);
      r.output.backward(grad_out);
    }
    peak = std::max(peak, pool::stats().peak_in_use_bytes - before);
    benchmark::DoNotOptimize(q.grad().data());
  }
  state.SetItemsProcessed(std::int64_t(state.iterations() * kB * T));
  state.counters["peak_MiB"] = double(peak) / (1 << 20);
}

void fused(benchmark::State& state) { attention(state, AttentionImpl::Fused); }
void composite(benchmark::State& state) { attention(state, AttentionImpl::Composite); }

BENCHMARK(fused)->RangeMultiplier(2)->Range(128, 4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(composite)->RangeMultiplier(2)->Range(128, 4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (const std::string e = qkv::app::prepare_process(nullptr); !e.empty()) return std::fprintf(stderr, "%s\n", e.c_str()), 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas", qkv::app::blas_description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
