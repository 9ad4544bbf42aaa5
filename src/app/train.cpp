// qkv train: the training run of the library (train::run_training) with what the process adds:
// Ctrl-C, progress on stderr, training snapshots, exit statuses, MPI aborts.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "commands.hpp"
#include "loaded.hpp"
#include "probe.hpp"
#include "progress.hpp"
#include "qkv/runs/training.hpp"
#include "runtime.hpp"
#include "qkv/dist/comm.hpp"
#include "qkv/kernels/bf16.hpp"
#include "qkv/io/files.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/version.hpp"

namespace qkv::app {
namespace fs = std::filesystem;
namespace {

// QKV_DEBUG_PERTURB_RANK=r nudges a parameter on rank r (tests/dist/mpi_test.sh checksum).
void perturb_for_tests(train::Session& s) {
  const char* r = std::getenv("QKV_DEBUG_PERTURB_RANK");
  if (r && s.dp().size() > 1 && std::atoi(r) == s.dp().rank())
    s.model().parameters().front().value().data()[0] += 1e-3f;
}

}  // namespace

int train(const TrainArgs& a) {
  return guarded([&] {
    if (a.has_out && a.out.empty()) throw ValueError("--out: empty; give the run directory");
    config::Config cfg = config::load_config(a.config, a.overrides, io::physical_memory_bytes());
    if (a.strict && !train::choose_precision(cfg).note.empty())
      throw config::ConfigError(cfg.source, 0, "train.precision",
                                "bf16 refused by --strict: " + kernels::bf16_support().reason +
                                    " (set train.precision: fp32, or drop --strict to train in float32)");
    if (!a.resume.empty()) {
      io::check_input_file(a.resume, "--resume");
      probe_checkpoint(a.resume);
    }
    dist::Comm& comm = dist::world();
    int threads = a.threads > 0 ? a.threads : cfg.train.threads;
    if (threads == 0 && comm.local_size() > 1) threads = std::max(1, num_threads() / comm.local_size());  // cores are shared

    const train::RunOptions o = runs::run_options(a.resume, a.out, a.overwrite, a.stop_after);
    const std::string dir = a.out.empty() ? cfg.run.out : a.out;
    Progress progress(std::int64_t(cfg.train.steps), !a.quiet && comm.is_root());
    InterruptScope interrupt;
    train::Callbacks cb;
    cb.stop_requested = [] { return InterruptScope::requested(); };
    cb.on_start = [&](train::Session& s) {
      perturb_for_tests(s);
      progress.message(std::string("qkv ") + QKV_VERSION + " | " + s.task().name() + " | " +
                       std::to_string(s.model().module().num_parameters()) + " parameters | " +
                       std::to_string(num_threads()) + " thread(s) | " + comm.description());
      progress.message("BLAS: " + blas_description());
      if (const std::string m = runs::precision_message(s); !m.empty()) progress.message(m);
      if (s.state().step > 0) progress.message("resumed from " + a.resume + " at step " + std::to_string(s.state().step));
    };
    cb.on_step = [&](train::Session& s, const train::StepResult& r, double tokens_per_s, bool log) {
      if (log) progress.update(s.state().step, r.loss, s.state().last_eval.token_accuracy, tokens_per_s);
    };
    cb.on_evaluation = [&](train::Session& s) {
      const model::EvalMetrics& e = s.state().last_eval;
      char line[200];
      std::snprintf(line, sizeof line, "eval @ %lld: loss %.4f  token acc %.2f%%  seq acc %.2f%%",
                    (long long)s.state().step, e.loss, 100 * e.token_accuracy, 100 * e.sequence_accuracy);
      progress.message(line);
    };
    cb.on_end = [&](train::Session& s, const train::RunResult& r) {
      if (r.stop_reason == "interrupted")
        progress.message("interrupted at step " + std::to_string(r.step) + ": saving " + (fs::path(dir) / "last.h5").string());
      if (s.dp().size() > 1 && r.step > 0) {
        char line[160];
        std::snprintf(line, sizeof line, "allreduce (loss + gradients): %.1f%% of the run's wall time",
                      100 * s.dp().seconds() / std::max(r.wall_seconds, 1e-9));
        progress.message(line);
      }
    };

    train::RunResult r;
    try {
      r = runs::train_with_snapshots(cfg, o, cb, comm, [&](const std::string& note) { progress.message("qkv: " + note); }, threads);
    } catch (const train::RanksOutOfSync& e) {
      if (comm.is_root())  // every rank sees the mismatch and stops; one message
        std::fprintf(stderr, "qkv: %s. Stopping without writing the checkpoint; the last one is %s\n", e.what(),
                     (fs::path(dir) / "last.h5").c_str());
      comm.abort(4);
    } catch (const std::exception& e) {
      // An error on one rank only (a full disk on rank 0, say) must stop them all: the others
      // would wait in the next allreduce forever.
      if (comm.size() == 1) throw;
      std::fprintf(stderr, "qkv: error on %s: %s; stopping all ranks\n", comm.description().c_str(), e.what());
      comm.abort(1);
    }
    progress.finish();
    if (!comm.is_root()) return r.stop_reason == "diverged" ? 3 : r.stop_reason == "interrupted" ? 130 : 0;
    if (r.stop_reason == "diverged") {
      // Name the checkpoint the user can go back to, and only one that exists.
      std::string good;
      for (const char* name : {"last.h5", "best.h5"})
        if (good.empty() && fs::exists(fs::path(dir) / name)) good = (fs::path(dir) / name).string();
      std::fprintf(stderr, "qkv: %s. Stopped without saving; %s\n", r.message.c_str(),
                   !good.empty() ? ("the last good checkpoint is " + good).c_str()
                                 : "no checkpoint was saved before (lower optimizer.lr, or clip with optimizer.clip_grad_norm)");
      return 3;
    }
    std::printf("%s after %lld steps (%.1f s): held-out token accuracy %s, sequence accuracy %s (best %s)\n",
                r.stop_reason == "target" ? "reached the target" : r.stop_reason == "steps" ? "done" : r.stop_reason.c_str(),
                (long long)r.step, r.wall_seconds, percent(r.last.token_accuracy).c_str(),
                percent(r.last.sequence_accuracy).c_str(), percent(r.best.token_accuracy).c_str());
    std::printf("run directory: %s\n  checkpoints: %s/last.h5, %s/best.h5\n  metrics:     %s/metrics.csv\n", dir.c_str(),
                dir.c_str(), dir.c_str(), dir.c_str());
    std::printf("look inside:\n  qkv eval %s/best.h5\n  qkv heads %s/best.h5\n  qkv view %s/best.h5 --out %s/view.html\n",
                dir.c_str(), dir.c_str(), dir.c_str(), dir.c_str());
    return r.stop_reason == "interrupted" ? 130 : 0;
  });
}

}  // namespace qkv::app
