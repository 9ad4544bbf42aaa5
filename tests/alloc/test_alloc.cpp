// Steady-state heap use of a training step. This executable replaces the global operator new with
// a counting one (which is why it is not part of qkv_tests), then checks that after two warm-up
// steps a full step -- batch, forward, loss, backward, clipping, AdamW, zero_grad -- makes no
// operator new call and no system allocation for tensor data.
//
// Built with QKV_SANITIZE the pool and the tape arena hand everything to the system allocator on
// purpose (so AddressSanitizer sees it), and the test is skipped.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/config/config.hpp"
#include "qkv/data/tasks.hpp"
#include "qkv/dist/comm.hpp"
#include "qkv/train/session.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/optim/adam.hpp"
#include "qkv/optim/clip.hpp"
#include "qkv/tensor/allocator.hpp"

#include "support/counting_new.hpp"

#ifdef QKV_SANITIZE
constexpr bool kSanitize = true;
#else
constexpr bool kSanitize = false;
#endif

using namespace qkv;

namespace {

struct StepCounts {
  std::uint64_t news = 0, system_allocations = 0, pool_requests = 0;
};

// Five training steps of `model` on `data`: the counts of each step, after those of building the
// model (counted from `setup`) and the optimizer.
template <class Model>
std::vector<StepCounts> count_steps(Model& model, data::Dataset& data, std::uint64_t setup) {
  model.train();
  const auto params = model.parameters();
  optim::AdamWOptions ao;
  ao.weight_decay = 0.01;
  optim::AdamW<float> opt(model.named_parameters(), ao);

  std::vector<StepCounts> counts;
  counts.reserve(6);
  counts.push_back({test::g_operator_new_calls.load() - setup, 0, 0});
  for (int step = 0; step < 5; ++step) {
    const std::uint64_t n0 = test::g_operator_new_calls.load();
    const pool::Stats p0 = pool::stats();
    {
      data::Batch b = data.next_train(8);
      Variable<float> loss = cross_entropy(model.forward(b.inputs), b.targets, data::kIgnore);
      loss.backward();
      optim::clip_grad_norm(params, 0.5);
      opt.step();
      opt.zero_grad();
    }
    const pool::Stats p1 = pool::stats();
    counts.push_back({test::g_operator_new_calls.load() - n0, p1.system_allocations - p0.system_allocations, p1.requests - p0.requests});
  }
  return counts;
}

// A small encoder on the sort task, or a decoder-only language model reading the sort task's
// sequences as text (Positional::Learned or Rope), trained for five steps (count_steps).
std::vector<StepCounts> train_steps(AttentionImpl impl, double dropout, int threads, bool decoder = false,
                                    nn::Positional positional = nn::Positional::Learned) {
  const std::uint64_t setup = test::g_operator_new_calls.load();
  set_num_threads(threads);
  data::TaskOptions t;
  t.name = "sort";
  t.vocab = 12;
  t.length = 16;
  data::Dataset data(std::shared_ptr<data::Task>(data::make_task(t)), 7, 0);
  nn::TransformerOptions o;
  o.d_model = 32;
  o.attn.num_heads = 4;
  o.layers = 2;
  o.ff.hidden = 64;
  o.dropout = dropout;
  o.attn.dropout = dropout;
  o.max_len = t.length;
  o.attn.impl = impl;
  Generator init(3);
  std::vector<StepCounts> counts;
  if (decoder) {
    o.arch = nn::Arch::Decoder;
    o.positional = positional;
    nn::DecoderModel<float> model(t.vocab, o, init);
    counts = count_steps(model, data, setup);
  } else {
    nn::EncoderModel<float> model(t.vocab, t.vocab, o, init);
    counts = count_steps(model, data, setup);
  }
  set_num_threads(1);
  return counts;
}

// Steps 3, 4 and 5 (1 and 2 warm up) allocate tensors, all from the pool's cache.
void check_steady_state(const std::vector<StepCounts>& counts) {
  CHECK(counts[0].news > 0);  // the counter works: building the model allocates
  for (std::size_t s = 3; s < counts.size(); ++s) {
    CAPTURE(s);
    CHECK(counts[s].news == 0);
    CHECK(counts[s].system_allocations == 0);
    CHECK(counts[s].pool_requests > 0);
  }
}

}  // namespace

TEST_CASE("alloc: a training step in steady state makes no heap allocation" * doctest::skip(kSanitize)) {
  for (auto impl : {AttentionImpl::Fused, AttentionImpl::Composite})
    for (double dropout : {0.1, 0.0})
      for (int threads : {1, 2}) {
        const std::string attention = impl == AttentionImpl::Fused ? "fused" : "composite";
        CAPTURE(attention);
        CAPTURE(dropout);
        CAPTURE(threads);
        check_steady_state(train_steps(impl, dropout, threads));
      }
}

TEST_CASE("alloc: a decoder language model's training step in steady state makes no heap allocation" *
          doctest::skip(kSanitize)) {
  for (auto positional : {nn::Positional::Learned, nn::Positional::Rope})
    for (int threads : {1, 2}) {
      const bool rope = positional == nn::Positional::Rope;
      CAPTURE(rope);
      CAPTURE(threads);
      check_steady_state(train_steps(AttentionImpl::Fused, 0.1, threads, true, positional));
    }
}

TEST_CASE("alloc: requests that grow a little at a time reuse cached blocks (generation without the KV cache)" *
          doctest::skip(kSanitize)) {
  // A forward pass over a window one token longer each time: every tensor a few hundred bytes
  // larger than the last. With exact-size free lists each of these missed the cache.
  const std::uint64_t misses0 = pool::stats().system_allocations;
  for (std::size_t t = 300; t < 364; ++t) {
    PooledBuffer<float> a(t * 192), b(t * 768);  // (t, C) and (t, 4C) activations
    a.data()[0] = b.data()[0] = 1.0f;
  }
  const std::uint64_t misses = pool::stats().system_allocations - misses0;
  CHECK(misses <= 8);  // a new block only when a size passes into the next of 8 sizes per doubling
  CHECK(misses >= 2);  // and the first time each size is met (the counter works)
  // A block is at most 1/8 larger than the request.
  pool::reset_peak();
  const std::uint64_t before = pool::stats().in_use_bytes;
  {
    PooledBuffer<char> c(1000001);
    CHECK(pool::stats().in_use_bytes - before >= 1000001);
    CHECK(pool::stats().in_use_bytes - before <= 1000001 + 1000001 / 8);
  }
  CHECK(pool::stats().in_use_bytes == before);
}

// The trainer's own step (train::Session::step: the schedule's rate, the batch, train_step with
// its clipping and the optimizer), as `qkv train` and bench_train --config run it.
TEST_CASE("alloc: the trainer's step (train::Session) in steady state makes no heap allocation" *
          doctest::skip(kSanitize)) {
  // A small corpus for the text task (the masked objective: BERT's masking drawn per batch).
  const std::string corpus = (std::filesystem::temp_directory_path() / "qkv_alloc_corpus.txt").string();
  {
    std::ofstream f(corpus);
    for (int i = 0; i < 400; ++i) f << "the quick brown fox " << i << " jumps over the lazy dog; 我爱吃苹果。\n";
  }
  // (The grammar task is not here: its generator builds each sentence from the lexicon, which
  // allocates; docs/performance.md.)
  const std::vector<std::vector<std::string>> configs = {
      {"task.name=sort", "model.d_model=32", "model.layers=2"},
      {"task.name=text", "task.path=" + corpus, "task.objective=masked", "task.length=32", "model.d_model=32"},
      {"task.name=sort", "model.arch=decoder", "model.positional=rope", "model.d_model=32", "optimizer.qk_gain=0.5",
       "model.scale=1"}};
  // train.precision: bf16 (where it pays, else float32): qkv's code allocates nothing either; the
  // operator new calls oneDNN makes inside its matmul calls are counted apart and reported.
  for (const char* precision : {"fp32", "bf16"})
    for (const auto& sets : configs)
      for (int threads : {1, 2}) {
        const std::string precision_name = precision;
        CAPTURE(precision_name);
        CAPTURE(sets[0]);
        CAPTURE(sets[1]);
        CAPTURE(threads);
        std::vector<std::string> overrides = sets;
        overrides.insert(overrides.end(), {"train.batch_size=8", "train.steps=10", "schedule.warmup_steps=2",
                                           "train.threads=" + std::to_string(threads),
                                           std::string("train.precision=") + precision});
        set_num_threads(threads);
        const config::Config cfg = config::parse_config("seed: 1\n", "alloc_test.yaml", overrides);
        train::Session session(cfg, dist::world());
        for (int step = 0; step < 6; ++step) {
          const std::uint64_t n0 = test::g_operator_new_calls.load(), d0 = test::g_onednn_new_calls.load();
          const pool::Stats p0 = pool::stats();
          session.step();
          const std::uint64_t news = test::g_operator_new_calls.load() - n0;  // before CAPTURE, which may allocate
          const std::uint64_t misses = pool::stats().system_allocations - p0.system_allocations;
          if (step < 3) continue;
          CAPTURE(step);
          CHECK(news == 0);
          CHECK(misses == 0);
          if (step == 5 && session.precision().precision == kernels::Precision::BFloat16)
            MESSAGE("oneDNN's operator new calls inside its bf16 matmuls, one step: " << test::g_onednn_new_calls.load() - d0);
        }
        set_num_threads(1);
      }
}
