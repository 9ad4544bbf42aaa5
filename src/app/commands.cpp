// The qkv subcommands. Errors become a message on stderr and an exit status (see commands.hpp).
#include "commands.hpp"
#include "loaded.hpp"
#include "probe.hpp"
#include "runtime.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "qkv/config/config.hpp"
#include "qkv/dist/comm.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/io/files.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/bf16.hpp"
#include "qkv/kernels/cpu.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/model/evaluate.hpp"
#include "qkv/model/fill.hpp"
#include "qkv/model/input.hpp"
#include "qkv/model/generate.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "gradchecks.hpp"
#include "sweep.hpp"
#include "qkv/version.hpp"

namespace qkv::app {
namespace fs = std::filesystem;
int eval(const std::string& path, const std::vector<std::string>& overrides, int threads, bool with_train, bool json) {
  return guarded([&] {
    if (threads > 0) set_num_threads(threads);
    Loaded l = load(path, overrides);
    model::EvalRequest request;
    request.train = with_train;
    const model::EvalResult r = model::evaluate(l, request);
    if (json) {
      print_json(model::to_json(r));
      return 0;
    }
    std::printf("%s: %s, ", path.c_str(), l.task->name().c_str());
    for (auto& s : r.splits) std::printf("%zu %s%s", s.examples, s.split.c_str(), s.split == "test" ? " examples\n" : s.split == "validation" ? " and " : ", ");
    std::printf("  %-24s", "");
    for (auto& s : r.splits) std::printf(" %12s", s.split.c_str());
    std::printf("\n");
    auto row = [&](const char* name, auto cell) {
      std::printf("  %-24s", name);
      for (auto& s : r.splits) std::printf(" %12s", cell(s.metrics).c_str());
      std::printf("\n");
    };
    auto fixed = [](double v, int digits) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*f", digits, v);
      return std::string(buf);
    };
    const bool masked = l.task->masked();
    row(masked ? "masked loss (nats/token)" : "loss (nats/token)", [&](const model::EvalMetrics& m) { return fixed(m.loss, 6); });
    if (const data::Tokenizer* t = l.task->tokenizer()) {
      const data::TokenizerKind k = t->kind();
      if (!masked)
        row(k == data::TokenizerKind::Char ? "bits/char" : k == data::TokenizerKind::Word ? "bits/word" : "bits/byte",
            [&](const model::EvalMetrics& m) { return fixed(m.loss / std::log(2.0), 6); });
      row("perplexity", [&](const model::EvalMetrics& m) { return fixed(std::exp(m.loss), 4); });
    }
    row(masked ? "masked accuracy" : "token accuracy", [&](const model::EvalMetrics& m) { return percent(m.token_accuracy); });
    // A masked model scores the chosen positions only: "every position of the row right" says nothing.
    if (!masked) row("sequence accuracy", [&](const model::EvalMetrics& m) { return percent(m.sequence_accuracy); });
    return 0;
  });
}

int inspect(const std::string& path) {
  return guarded([&] {
    io::check_input_file(path, "checkpoint");
    probe_checkpoint(path, ProbeRead::Inspect);
    std::cout << io::inspect(path);
    return 0;
  });
}

int attention(const std::string& path, std::size_t example, const std::string& out_arg) {
  return guarded([&] {
    Loaded l = load(path, {});
    const data::Batch& eval = l.data->eval_set();
    const std::size_t N = eval.inputs.shape()[0];
    if (example >= N)
      throw ValueError("--example " + std::to_string(example) + ": the held-out set has " + std::to_string(N) +
                       " examples (0.." + std::to_string(N - 1) + ")");
    auto row = [&](const IndexArray& a) {
      IndexArray r = IndexArray::from_shape({1, a.shape()[1]});
      std::copy(a.data() + example * a.shape()[1], a.data() + (example + 1) * a.shape()[1], r.data());
      return r;
    };
    data::Batch b{row(eval.inputs), row(eval.targets), eval.decoder_inputs.dimension() == 2 ? row(eval.decoder_inputs) : eval.decoder_inputs};
    nn::ActivationCache<float> cache;
    {
      NoGradGuard no_grad;
      cache = nn::run_with_cache(l.model->module(), [&] { l.model->logits(b); }, {"*.hook_pattern"});
    }
    const std::string out = out_arg.empty() ? (fs::path(path).parent_path() / ("attention_" + std::to_string(example) + ".csv")).string() : out_arg;
    io::check_output_path(out, {path}, "--out");
    std::ostringstream csv;
    csv.precision(9);  // %.9g, as every CSV qkv writes
    csv << "layer,head,query,key,query_token,key_token,weight\n";
    std::printf("held-out example %zu of %s: input", example, l.task->name().c_str());
    for (std::size_t t = 0; t < b.inputs.shape()[1]; ++t) std::printf(" %lld", (long long)b.inputs(0, t));
    std::printf("\n");
    for (auto& [name, layer] : model::attention_layers(*l.model)) {
      const Array<float>& w = cache[name + ".hook_pattern"];  // (1, H, Tq, Tk)
      const std::size_t H = w.shape()[1], Tq = w.shape()[2], Tk = w.shape()[3];
      auto [qtokens, ktokens] = l.model->attention_tokens(*layer, b);
      const IndexArray& qt = *qtokens;
      const IndexArray& kt = *ktokens;
      std::printf("\n%s: %zu heads, %zu queries x %zu keys; per query: the key it attends most (weight)\n", name.c_str(), H, Tq, Tk);
      std::printf("%8s", "query");
      for (std::size_t h = 0; h < H; ++h) std::printf("  %-14s", ("head " + std::to_string(h)).c_str());
      std::printf("\n");
      for (std::size_t i = 0; i < Tq; ++i) {
        std::printf("%3zu:%-4lld", i, (long long)qt(0, i));
        for (std::size_t h = 0; h < H; ++h) {
          const float* p = &w(0, h, i, 0);
          const std::size_t j = std::size_t(std::max_element(p, p + Tk) - p);
          char cell[40];
          std::snprintf(cell, sizeof cell, "k%zu:%lld (%.2f)", j, (long long)kt(0, j), p[j]);
          std::printf("  %-14s", cell);
          for (std::size_t k = 0; k < Tk; ++k)
            csv << name << ',' << h << ',' << i << ',' << k << ',' << qt(0, i) << ',' << kt(0, k) << ',' << p[k] << '\n';
        }
        std::printf("\n");
      }
    }
    io::write_file_atomic(out, csv.str());
    std::printf("\nwrote %s\n", out.c_str());
    return 0;
  });
}

int logits(const std::string& path, std::size_t count, const std::string& out) {
  return guarded([&] {
    io::check_output_path(out, {path}, "--out");
    Loaded l = load(path, {});
    if (l.task->seq2seq()) throw ValueError("logits: " + path + " is an encoder-decoder model; only encoder models are supported");
    const IndexArray& all = l.data->eval_set().inputs;
    const std::size_t N = std::min(count, all.shape()[0]), T = all.shape()[1];
    data::Batch b;
    b.inputs = IndexArray::from_shape({N, T});
    std::copy(all.data(), all.data() + N * T, b.inputs.data());
    NoGradGuard no_grad;
    const Array<float> y = l.model->logits(b).value();
    const std::size_t V = y.shape()[2];
    std::string text;
    char line[64];
    std::snprintf(line, sizeof line, "%zu %zu %zu\n", N, T, V);
    text += line;
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t t = 0; t < T; ++t) {
        std::snprintf(line, sizeof line, "%lld%c", (long long)b.inputs(i, t), t + 1 < T ? ' ' : '\n');
        text += line;
      }
    for (std::size_t r = 0; r < N * T; ++r)
      for (std::size_t c = 0; c < V; ++c) {
        std::snprintf(line, sizeof line, "%.9g%c", y.data()[r * V + c], c + 1 < V ? ' ' : '\n');
        text += line;
      }
    io::write_file_atomic(out, text);
    std::printf("wrote logits (%zu, %zu, %zu) of %s to %s\n", N, T, V, path.c_str(), out.c_str());
    return 0;
  });
}

int gradcheck(bool list, const std::string& only) {
  return guarded([&] {
    if (list) {
      std::size_t n = 0;
      for (auto& e : app::gradcheck_suite())
        if (app::gradcheck_selected(e.name, only)) std::printf("%-6s %s\n", e.kind.c_str(), e.name.c_str()), ++n;
      if (n == 0) throw ValueError("--only '" + only + "' selects no check (qkv gradcheck --list shows them)");
      return 0;
    }
    auto results = app::run_layer_gradchecks(only);
    if (results.empty()) throw ValueError("--only '" + only + "' selects no check (qkv gradcheck --list shows them)");
    std::printf("%-58s %12s %12s  %s\n", "op, layer or model (float64)", "worst error", "of tolerance", "pass");
    bool all = true;
    for (auto& r : results) {
      std::printf("%-58s %12.3e %12.3f  %s\n", r.name.c_str(), r.worst_error, r.worst_ratio, r.ok ? "yes" : "NO");
      all = all && r.ok;
    }
    std::printf("%s: %zu checked (eps 1e-6, atol 1e-5, rtol 1e-3)\n", all ? "all passed" : "FAILED", results.size());
    return all ? 0 : 1;
  });
}

int sweep(const SweepArgs& a) {
  return guarded([&] {
    app::SweepPlan plan = app::load_sweep(a.file, a.overrides, a.seeds, a.grid);
    if (a.dry_run) {
      for (auto& r : plan.runs) std::printf("%s\n", r.name.c_str());
      std::printf("%zu runs from %s into %s\n", plan.runs.size(), plan.base.c_str(), (a.out.empty() ? plan.out : a.out).c_str());
      return 0;
    }
    app::SweepOptions o;
    o.executable = fs::read_symlink("/proc/self/exe").string();
    o.out = a.out;
    o.jobs = a.jobs;
    o.threads = a.threads;
    dist::Comm& comm = dist::world();
    const int failed = app::run_sweep(plan, o, comm);
    if (comm.is_root())
      std::printf("sweep: %zu runs; results in %s/results.csv\n", plan.runs.size(), (a.out.empty() ? plan.out : a.out).c_str());
    return failed ? 1 : 0;
  });
}

int info() {
  const std::string brand = kernels::cpu_brand(), cpu = kernels::cpu_kind() + (brand.empty() ? "" : " (" + brand + ")");
  std::printf("qkv %s\nCPU: %s; %s\nBLAS: %s\n%s\nthreads: %d\nMPI: %s\n", QKV_VERSION, cpu.c_str(),
              kernels::cpu_features_text().c_str(), blas_description().c_str(), kernels::bf16_info().c_str(), num_threads(),
#ifdef QKV_HAVE_MPI
              "built in"
#else
              "not built"
#endif
  );
  return 0;
}

int generate(const GenerateArgs& a) {
  return guarded_with({{"text", "--prompt"}, {"ids", "--prompt"}}, [&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load(a.checkpoint, {}, false);
    model::GenerateRequest r;
    if (a.ids) {
      as_field("ids", [&] { r.ids = model::parse_ids(a.prompt, l.task->input_vocab(), "ids"); });
    } else {
      r.text = a.prompt;
    }
    r.options.max_tokens = a.max_tokens;
    r.options.sampling = {a.temperature, a.top_k, a.top_p};
    r.options.seed = a.seed;
    r.options.cache = !a.no_cache;
    const data::Tokenizer* tokenizer = l.task->tokenizer();
    if (!a.json) {
      std::printf("%s", a.prompt.c_str());
      std::fflush(stdout);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const model::GenerateResult g = model::generate(l, r, [&](Index t) {
      if (a.json) return;
      if (a.ids || !tokenizer) std::printf(" %lld", (long long)t);
      else std::printf("%s", tokenizer->decode(&t, 1).c_str());
      std::fflush(stdout);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a.json) print_json(model::to_json(g));
    else std::printf("\n");
    std::fflush(stdout);  // the text ends before the statistics begin, on a terminal and in a log alike
    std::fprintf(stderr, "qkv: %zu tokens in %.2f s: %.1f tokens/s (%s, context %zu, %d thread(s))\n", a.max_tokens, s,
                 double(a.max_tokens) / std::max(s, 1e-9), r.options.cache ? "KV cache" : "no cache",
                 l.task->input_length(), num_threads());
    return 0;
  });
}

int fill(const FillArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load(a.checkpoint, {}, false);
    model::FillRequest r;
    r.input.text = a.text;
    r.input.mask_text = a.mask_text;
    r.top_k = a.top_k;
    const model::FillResult f = model::fill(l, r);
    if (a.json) {
      print_json(model::to_json(f, *l.task));
      return 0;
    }
    std::printf("%s: %s\n", a.checkpoint.c_str(), a.text.c_str());
    for (std::size_t i = 0; i < f.fills.size(); ++i) {
      std::printf("  mask %zu (position %zu):", i + 1, f.fills[i].position);
      for (auto& c : f.fills[i].top) std::printf("  %s %.4f", l.task->token_label(c.id).c_str(), c.p);
      std::printf("\n");
    }
    std::printf("most likely: %s\n", f.most_likely.c_str());
    return 0;
  });
}

}  // namespace qkv::app
