// Training-step throughput of nn::EncoderModel on the sort task, the qkv side of
// tools/bench_vs_torch.py, or of any config's run (--config: the trainer's own step,
// train::Session). One process = one measurement: warm-up steps, then timed steps.
//   build/bench/bench_train --workload medium --threads 2 [--steps 20 --warmup 5 --dropout 0.1]
//   build/bench/bench_train --config configs/fortunes.yaml [--set model.d_model=384 ...] --threads 1
//   ... --gemm openblas     # every product on OpenBLAS in a build with oneDNN (A/B in one binary)
//   ... --config CFG --set train.precision=bf16 [--force-bf16]   # bf16 products (forced: even where
//        they do not pay, e.g. with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, to measure them there)
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
#include <vector>

#include "qkv/autograd/tape.hpp"
#include "qkv/config/config.hpp"
#include "qkv/dist/comm.hpp"
#include "qkv/train/session.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/kernels/bf16.hpp"
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
               "bench_train: %s\nusage: bench_train --workload small|medium|long | --config FILE [--set KEY=VALUE ...]\n"
               "       [--threads N] [--steps N] [--warmup N] [--dropout P] [--impl fused|composite] [--seed S]\n"
               "       [--gemm default|openblas] [--force-bf16]\n",
               why);
  std::exit(2);
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

rusage usage_now() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru;
}

// The steps of `qkv train CONFIG` (train::Session::step: batch, forward, loss, backward, clip,
// update at the schedule's rate), no evaluation, checkpoint or log. The model FLOPs are for
// tools/mfu.py to count: this prints the resolved config and the output layer's classes.
int run_config(const std::string& path, const std::vector<std::string>& sets, int threads, int steps, int warmup,
               bool force_bf16) {
  std::vector<std::string> overrides = sets;
  // The schedule fitted into the steps run (the rate does not change a step's speed).
  overrides.push_back("train.steps=" + std::to_string(warmup + steps));
  overrides.push_back("schedule.warmup_steps=" + std::to_string(warmup));
  config::Config cfg;
  try {
    cfg = config::load_config(path, overrides);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 2;
  }
  train::Session session(cfg, dist::world());
  if (force_bf16) session.set_precision(kernels::Precision::BFloat16);
  for (int s = 0; s < warmup; ++s) session.step();
  const pool::Stats p0 = pool::stats();
  const std::uint64_t n0 = test::g_operator_new_calls.load();
  double loss = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) loss = session.step().loss;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t news = test::g_operator_new_calls.load() - n0;
  const pool::Stats p1 = pool::stats();
  const rusage ru = usage_now();
  const double tokens = double(steps) * double(session.tokens_per_batch());
  std::printf(
      "{\"framework\": \"qkv\", \"config\": \"%s\", \"threads\": %d, \"steps\": %d, \"warmup\": %d, "
      "\"tokens_per_s\": %.1f, \"step_ms\": %.3f, \"max_rss_mib\": %.1f, \"pool_requests_per_step\": %.1f, "
      "\"pool_system_allocs_per_step\": %.2f, \"operator_new_per_step\": %.1f, \"final_loss\": %.4f, "
      "\"params\": %zu, \"num_classes\": %zu, \"blas\": \"%s\", \"precision\": \"%s\", \"bf16\": %s, "
      "\"precision_note\": %s, \"config_yaml\": %s}\n",
      path.c_str(), threads, steps, warmup, tokens / secs, 1e3 * secs / steps, double(ru.ru_maxrss) / 1024.0,
      double(p1.requests - p0.requests) / steps, double(p1.system_allocations - p0.system_allocations) / steps,
      double(news) / steps, loss, session.model().module().num_parameters(), session.task().num_classes(),
      app::blas_description().c_str(),
      session.precision().precision == kernels::Precision::BFloat16 ? "bf16" : "fp32",
      json_string(kernels::bf16_info()).c_str(), json_string(session.precision().note).c_str(),
      json_string(config::to_yaml(cfg)).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const std::string e = qkv::app::prepare_process(argv); !e.empty()) return std::fprintf(stderr, "%s\n", e.c_str()), 2;  // as the qkv command does
  const Workload* w = nullptr;
  int threads = 1, steps = 20, warmup = 5;
  double dropout = 0.1;
  std::string impl = "fused", config_path, gemm = "default";
  bool force_bf16 = false;
  std::vector<std::string> sets;
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
    else if (a == "--config") config_path = next();
    else if (a == "--set") sets.push_back(next());
    else if (a == "--gemm") gemm = next();
    else if (a == "--force-bf16") force_bf16 = true;
    else usage(("unknown argument " + a).c_str());
  }
  if (!w == config_path.empty()) usage("give one of --workload and --config");
  if (threads < 1 || steps < 1 || warmup < 0) usage("--threads and --steps must be >= 1, --warmup >= 0");
  if (gemm != "default" && gemm != "openblas") usage(("--gemm: expected default or openblas, found " + gemm).c_str());
  kernels::set_onednn_enabled(gemm == "default");
  set_num_threads(threads);
  if (!config_path.empty()) return run_config(config_path, sets, threads, steps, warmup, force_bf16);

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
