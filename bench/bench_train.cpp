// Training-step throughput of nn::EncoderModel on the sort task, the qkv side of
// tools/bench_vs_torch.py. One process = one measurement: warm-up steps, then timed steps.
//   build/bench/bench_train --workload medium --threads 2 [--steps 20 --warmup 5 --dropout 0.1]
// Prints one JSON line: tokens/s over the timed steps, peak RSS, and per-step heap use in steady
// state: pool requests (tensors, autograd nodes, index arrays, scratch vectors), pool system
// allocations (cache misses) and operator new calls (anything else; 0 since the tape's closure
// arena, see docs/performance.md).
//
// A step is what the trainer does: next batch, forward, cross-entropy, backward, clip the global
// gradient norm to 1, AdamW (weight decay 0.01 on every parameter), zero_grad.

#include "app/runtime.hpp"
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "qkv/autograd/tape.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/optim/adam.hpp"
#include "qkv/optim/clip.hpp"
#include "qkv/tensor/allocator.hpp"

#include "support/counting_new.hpp"  // operator new counting for the whole binary

namespace {

using namespace qkv;

struct Workload {
  const char* name;
  std::size_t vocab, seq, d_model, heads, layers, d_ff, batch;
};
// The workloads of docs/performance.md (same table in tools/bench_vs_torch.py).
constexpr Workload kWorkloads[] = {
    {"small", 16, 32, 64, 4, 2, 256, 64},
    {"medium", 64, 128, 256, 8, 4, 1024, 32},
    {"long", 16, 1024, 128, 4, 1, 512, 4},
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bench_train: %s\nusage: bench_train --workload small|medium|long [--threads N] [--steps N] "
               "[--warmup N] [--dropout P] [--impl fused|composite] [--seed S]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (const std::string e = qkv::app::prepare_process(argv); !e.empty()) return std::fprintf(stderr, "%s\n", e.c_str()), 2;  // as the qkv command does
  const Workload* w = nullptr;
  int threads = 1, steps = 20, warmup = 5;
  double dropout = 0.1;
  std::string impl = "fused";
  std::uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage((std::string("missing value after ") + argv[i]).c_str());
      return argv[++i];
    };
    const std::string a = argv[i];
    if (a == "--workload") {
      const std::string n = next();
      for (const auto& x : kWorkloads)
        if (n == x.name) w = &x;
      if (!w) usage(("unknown workload " + n).c_str());
    } else if (a == "--threads") threads = std::atoi(next());
    else if (a == "--steps") steps = std::atoi(next());
    else if (a == "--warmup") warmup = std::atoi(next());
    else if (a == "--dropout") dropout = std::atof(next());
    else if (a == "--impl") impl = next();
    else if (a == "--seed") seed = std::strtoull(next(), nullptr, 10);
    else usage(("unknown argument " + a).c_str());
  }
  if (!w) usage("--workload is required");
  if (threads < 1 || steps < 1 || warmup < 0) usage("--threads and --steps must be >= 1, --warmup >= 0");
  set_num_threads(threads);

  data::TaskOptions t;
  t.name = "sort";
  t.vocab = w->vocab;
  t.length = w->seq;
  auto task = std::shared_ptr<data::Task>(data::make_task(t));
  data::Dataset data(task, seed, 0);

  nn::TransformerOptions o;
  o.d_model = w->d_model;
  o.attn.num_heads = w->heads;
  o.layers = w->layers;
  o.ff.hidden = w->d_ff;
  o.dropout = dropout;
  o.attn.dropout = dropout;
  o.max_len = w->seq;
  o.attn.impl = nn::attention_impl_names().parse(impl, "--impl");
  Generator init(seed);
  nn::EncoderModel<float> model(w->vocab, w->vocab, o, init);
  model.train();
  const auto params = model.parameters();
  optim::AdamWOptions ao;
  ao.lr = 1e-3;
  ao.weight_decay = 0.01;
  optim::AdamW<float> opt(model.named_parameters(), ao);

  double loss_value = 0;
  std::size_t tape_ops = 0;
  auto step = [&] {
    data::Batch b = data.next_train(w->batch);
    Variable<float> loss = cross_entropy(model.forward(b.inputs), b.targets, data::kIgnore);
    tape_ops = autograd::Tape::current().size();
    loss_value = loss.item();
    loss.backward();
    optim::clip_grad_norm(params, 1.0);
    opt.step();
    opt.zero_grad();
  };

  for (int s = 0; s < warmup; ++s) step();
  const pool::Stats p0 = pool::stats();
  const std::uint64_t n0 = test::g_operator_new_calls.load();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t news = test::g_operator_new_calls.load() - n0;
  const pool::Stats p1 = pool::stats();

  // Model FLOPs per step (matmuls only, training = 3x forward): per token and layer
  // 2 (4 C^2 + 2 C F) for the projections and the feed-forward, 2 * 2 T C for QK^T and PV; the
  // head 2 C V. Against the measured peak: the best of a few 1024^3 sgemm on the same threads.
  const double C = double(w->d_model), F = double(w->d_ff), T = double(w->seq), V = double(w->vocab);
  const double flops_per_token = 3.0 * (double(w->layers) * (2.0 * (4.0 * C * C + 2.0 * C * F) + 4.0 * T * C) + 2.0 * C * V);
  double peak = 0;
  {
    const std::size_t n = 1024;
    Array<float> a = full<float>({n, n}, 0.5f), b = full<float>({n, n}, 0.25f), c = empty<float>({n, n});
    for (int r = 0; r < 5; ++r) {
      const auto g0 = std::chrono::steady_clock::now();
      kernels::gemm<float>(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
      const double gs = std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count();
      peak = std::max(peak, 2.0 * double(n) * n * n / gs * 1e-9);
    }
  }

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double tokens = double(steps) * double(w->batch * w->seq);
  std::printf(
      "{\"framework\": \"qkv\", \"workload\": \"%s\", \"threads\": %d, \"steps\": %d, \"warmup\": %d, "
      "\"impl\": \"%s\", \"tokens_per_s\": %.1f, \"step_ms\": %.3f, \"max_rss_mib\": %.1f, "
      "\"pool_peak_mib\": %.1f, \"pool_requests_per_step\": %.1f, \"pool_system_allocs_per_step\": %.2f, "
      "\"operator_new_per_step\": %.1f, \"tape_ops_per_step\": %zu, \"model_gflops\": %.2f, \"sgemm_peak_gflops\": %.2f, "
      "\"final_loss\": %.4f, \"params\": %zu, \"blas\": \"%s\"}\n",
      w->name, threads, steps, warmup, impl.c_str(), tokens / secs, 1e3 * secs / steps, double(ru.ru_maxrss) / 1024.0,
      double(p1.peak_in_use_bytes) / (1 << 20), double(p1.requests - p0.requests) / steps,
      double(p1.system_allocations - p0.system_allocations) / steps, double(news) / steps, tape_ops, flops_per_token * tokens / secs * 1e-9, peak, loss_value,
      model.num_parameters(), app::blas_description().c_str());
  return 0;
}
