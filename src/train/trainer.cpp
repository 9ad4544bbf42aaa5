#include "qkv/train/trainer.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "qkv/dist/data_parallel.hpp"
#include "qkv/interp/snapshots.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/parallel.hpp"
#include "qkv/optim/clip.hpp"
#include "qkv/optim/lr_schedule.hpp"
#include "qkv/train/diagnostics.hpp"
#include "qkv/train/metrics_log.hpp"
#include "qkv/train/progress.hpp"
#include "qkv/train/train_state.hpp"
#include "qkv/train/train_step.hpp"
#include "qkv/version.hpp"

namespace qkv::train {
namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop = true; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Seeds of the independent random streams of a run, all derived from config.seed.
std::uint64_t init_seed(std::uint64_t seed) { return hash64(seed, 0x1417); }
std::uint64_t dropout_seed(std::uint64_t seed) { return hash64(seed, 0xd20f); }

const char* const kDiagnostics[] = {".entropy", ".max_weight", ".grad_q", ".grad_k", ".redundancy", ".qk_var"};

// One run: what it trains (task, data, model, optimizer, schedule), where it writes, and its state.
class Run {
 public:
  Run(const config::Config& cfg, const RunOptions& opt, dist::Comm& comm)
      : cfg_(cfg), opt_(opt), dp_(comm), progress_(std::int64_t(cfg.train.steps), opt.progress && comm.is_root()),
        dir_(opt.out.empty() ? cfg.run.out : opt.out) {
    const int threads = opt.threads > 0 ? opt.threads : cfg.train.threads;
    if (threads > 0) set_num_threads(threads);
    else if (comm.local_size() > 1) set_num_threads(std::max(1, num_threads() / comm.local_size()));  // cores are shared
    if (cfg.train.batch_size % (std::size_t(dp_.size()) * cfg.train.accumulate) != 0)
      throw ValueError("train.batch_size: " + std::to_string(cfg.train.batch_size) + " must be divisible by the number of MPI ranks (" +
                       std::to_string(dp_.size()) + ") times train.accumulate (" + std::to_string(cfg.train.accumulate) + ")");
    task_ = data::make_task(cfg.task);
    data_ = std::make_unique<data::Dataset>(task_, cfg.seed, cfg.task.eval_size, cfg.task.train_size);
    if (cfg.task.train_size > 0) probe_ = data_->train_examples(0, std::min(cfg.task.train_size, cfg.task.eval_size));
    Generator init(init_seed(cfg.seed));
    model_ = make_model(cfg, *task_, init);
    default_generator().set_state(dropout_seed(cfg.seed), 0);
    default_generator().set_shard(std::uint64_t(dp_.rank()), std::uint64_t(dp_.size()));
    perturb_for_tests();
    optimizer_ = optim::make_optimizer(model_->module(), cfg.optimizer);
    optim::ScheduleOptions schedule = cfg.schedule;
    schedule.total_steps = std::int64_t(cfg.train.steps);
    schedule_ = std::make_unique<optim::LrSchedule>(cfg.optimizer.lr, schedule);
    std::vector<std::string> cols = {"step", "lr", "train_loss", "train_token_acc", "grad_norm", "eval_loss",
                                     "eval_token_acc", "eval_seq_acc", "tokens_per_s", "elapsed_s"};
    for (auto& [name, layer] : attention_layers(*model_))
      for (const char* d : kDiagnostics) cols.push_back(name + d);
    metrics_.set_columns(cols);
    const data::Batch& held_out = data_->eval_set();  // its first snapshot_examples rows are the snapshots' examples
    const std::size_t n = std::min(cfg.train.snapshot_examples, held_out.size());
    if (cfg.train.snapshot_every > 0 && comm.is_root())
      snapshots_ = std::make_unique<interp::SnapshotRecorder>(*model_, *task_, rows(held_out, 0, n));
  }

  RunResult run() {
    const auto t0 = Clock::now();
    if (!opt_.resume.empty()) resume(opt_.resume);
    start_files();
    auto previous_handler = std::signal(SIGINT, on_sigint);
    g_stop = false;
    const std::int64_t total = std::int64_t(cfg_.train.steps), started_at = state_.step;
    const double target = cfg_.train.target_accuracy;
    StepOptions step_options{cfg_.train.label_smoothing, cfg_.optimizer.clip_grad_norm, !probe_.size(), cfg_.train.accumulate, {}};
    StepOptions eval_step_options = step_options;
    eval_step_options.after_backward = [this] { read_qk_gradients(); };
    auto window = Clock::now();
    std::int64_t window_tokens = 0;
    std::string reason = "steps";
    snapshot(false);  // step 0 (or nothing new on resume)

    while (state_.step < total) {
      const bool stop = dp_.any(g_stop);  // a signal may reach some ranks only: stop together
      if (stop || (opt_.stop_after > 0 && state_.step - started_at >= opt_.stop_after)) {
        reason = stop ? "interrupted" : "stopped";
        break;
      }
      const bool eval_now = (state_.step + 1) % std::int64_t(cfg_.train.eval_every) == 0 || state_.step + 1 == total;
      optimizer_->set_lr(schedule_->lr_at(state_.step));
      const data::Batch batch = data_->next_train_shard(cfg_.train.batch_size, std::size_t(dp_.rank()), std::size_t(dp_.size()));
      const StepResult s = train_step(*model_, batch, *optimizer_, eval_now ? eval_step_options : step_options, dp_);
      if (*s.diverged) return diverged(s, t0);
      ++state_.step, ++steps_run_, ++state_.train_loss_steps;
      state_.train_loss_sum += s.loss;
      state_.train_correct += std::int64_t(s.correct), state_.train_counted += std::int64_t(s.counted);
      last_grad_norm_ = s.grad_norm;
      window_tokens += std::int64_t(batch.targets.size()) * dp_.size();
      snapshot(false);

      if (state_.step % std::int64_t(cfg_.train.log_every) == 0 || eval_now) {
        tokens_per_s_ = double(window_tokens) / std::max(seconds_since(window), 1e-9);
        progress_.update(state_.step, s.loss, state_.last_eval.token_accuracy, tokens_per_s_);
        window = Clock::now(), window_tokens = 0;
      }
      if (eval_now) {
        evaluate_and_log(t0);
        if (state_.steps_to_target < 0 && state_.last_eval.token_accuracy >= (target > 0 ? target : 0.99))
          state_.steps_to_target = state_.step;
        if (state_.last_eval.token_accuracy > state_.best.token_accuracy) {
          state_.best = state_.last_eval;
          save("best.h5");
        }
      }
      if (state_.step % std::int64_t(cfg_.train.checkpoint_every) == 0) {
        char name[64];
        std::snprintf(name, sizeof name, "checkpoints/step_%07lld.h5", (long long)state_.step);
        save(name);
        save("last.h5");
      }
      if (eval_now && target > 0 && state_.last_eval.token_accuracy >= target) {
        reason = "target";
        break;
      }
    }
    std::signal(SIGINT, previous_handler);
    if (reason == "steps" || reason == "target") snapshot(true);
    // Resumed from the final checkpoint (killed before result.csv was written, e.g. in a sweep):
    // the final evaluation, which the checkpoint does not hold, is recomputed for the result.
    if (steps_run_ == 0 && state_.step >= total && std::isnan(state_.last_eval.loss))
      state_.last_eval = evaluate(*model_, data_->eval_set(), eval_batch());
    save("last.h5");
    progress_.finish();
    if (reason == "interrupted") log("interrupted at step " + std::to_string(state_.step) + ": saved " + path("last.h5"));
    return finish(reason == "interrupted" ? 130 : 0, reason, t0);
  }

 private:
  std::size_t eval_batch() const { return eval_batch_size(cfg_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  void log(const std::string& s) { progress_.message(s); }
  void snapshot(bool final) {
    if (snapshots_) snapshots_->record_if_due(state_.step, std::int64_t(cfg_.train.snapshot_every), final);
  }

  void start_files() {
    if (!dp_.is_root()) return;
    fs::create_directories(fs::path(dir_) / "checkpoints");
    std::ofstream(path("config.yaml")) << config::to_yaml(cfg_);
    metrics_.write_csv(path("metrics.csv"));
    log(std::string("qkv ") + QKV_VERSION + " | " + task_->name() + " | " + std::to_string(model_->module().num_parameters()) +
        " parameters | " + std::to_string(num_threads()) + " thread(s) | " + dp_.comm().description());
    log("BLAS: " + kernels::blas_info());
    if (state_.step > 0) log("resumed from " + opt_.resume + " at step " + std::to_string(state_.step));
  }

  // The raw (averaged, unclipped) gradient norms reaching W_q and W_k, for the metrics.
  void read_qk_gradients() {
    qk_norms_.clear();
    for (auto& [name, layer] : attention_layers(*model_))
      qk_norms_.push_back({gradient_norm(layer->w_q->weight), gradient_norm(layer->w_k->weight)});
  }

  void evaluate_and_log(Clock::time_point t0) {
    state_.last_eval = evaluate(*model_, data_->eval_set(), eval_batch());
    double train_acc = state_.train_counted ? double(state_.train_correct) / double(state_.train_counted) : NAN;
    if (probe_.size()) train_acc = evaluate(*model_, probe_, eval_batch()).token_accuracy;
    const EvalMetrics& e = state_.last_eval;
    std::vector<double> row = {double(state_.step), optimizer_->lr(),
                               state_.train_loss_sum / double(std::max<std::int64_t>(state_.train_loss_steps, 1)),
                               train_acc, last_grad_norm_, e.loss, e.token_accuracy, e.sequence_accuracy, tokens_per_s_,
                               seconds_since(t0)};
    state_.train_correct = state_.train_counted = 0, state_.train_loss_sum = 0, state_.train_loss_steps = 0;
    auto layers = cfg_.train.diagnostics ? attention_diagnostics(*model_, data_->eval_set(), 64, eval_batch())
                                         : std::vector<LayerDiagnostics>{};
    layers.resize(attention_layers(*model_).size());  // without diagnostics: NaN statistics
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto qk = l < qk_norms_.size() ? qk_norms_[l] : std::pair<double, double>{NAN, NAN};
      row.insert(row.end(), {layers[l].stats.entropy, layers[l].stats.max_weight, qk.first, qk.second, layers[l].redundancy,
                                layers[l].qk_var});
    }
    metrics_.add(row);
    if (dp_.is_root()) metrics_.append_csv(path("metrics.csv"));
    char line[200];
    std::snprintf(line, sizeof line, "eval @ %lld: loss %.4f  token acc %.2f%%  seq acc %.2f%%", (long long)state_.step,
                  e.loss, 100 * e.token_accuracy, 100 * e.sequence_accuracy);
    progress_.message(line);
  }

  void save(const std::string& name) {
    // Every rank must hold the same parameters; a mismatch means the ranks diverged.
    const auto sync = dp_.check_in_sync(model_->module());
    if (sync.differing_rank) {
      if (dp_.is_root())  // every rank sees the mismatch and stops; one message
        std::fprintf(stderr, "qkv: rank %d's parameters differ from rank 0's at step %lld (checksums %016llx vs %016llx): "
                     "the ranks no longer train the same model (different builds, libraries or CPUs across nodes, or a "
                     "memory error). Stopping without writing %s; the last checkpoint is %s\n", sync.differing_rank,
                     (long long)state_.step, (unsigned long long)sync.checksum, (unsigned long long)sync.root_checksum,
                     name.c_str(), path("last.h5").c_str());
      dp_.comm().abort(4);
    }
    if (!dp_.is_root()) return;
    io::Checkpoint c;
    c.config_yaml = config::to_yaml(cfg_);
    c.model = model_->module().state_dict();
    auto os = optimizer_->state_dict();
    c.optimizer_step = os.step;
    c.optimizer = std::move(os.tensors);
    state_.data_position = data_->position();
    state_.dropout_rng = {default_generator().seed(), default_generator().offset()};
    state_.save(c);
    c.metrics = metrics_.history();
    save_vocabulary(*task_, c);
    io::save_checkpoint(path(name), c);
    if (snapshots_ && name == "last.h5") interp::save_snapshots(path("snapshots.h5"), snapshots_->snapshots());  // as of last.h5
  }

  void resume(const std::string& file) {
    io::Checkpoint c = io::load_checkpoint(file);
    // Resuming continues the same model on the same data: seed, model and task must match the
    // checkpoint's config (equal shapes are not enough: an activation or a scale would change the
    // model silently). Optimizer, schedule, train and run settings may differ (e.g. more steps).
    const auto differ = config::differences(config::parse_stored_config(c.config_yaml, file + ":/config"), cfg_,
                                            {"seed", "model", "task"}, "checkpoint", "config");
    std::string listed;
    for (auto& d : differ) listed += "\n  " + d;
    if (!listed.empty()) throw ValueError("--resume " + file + ": the checkpoint was trained with another model, task or seed:" + listed);
    io::check_compatible(model_->module().state_dict(), c.model, file);
    check_vocabulary(*task_, c, file);
    model_->module().load_state_dict(c.model);
    optimizer_->load_state_dict({c.optimizer_step, c.optimizer});
    state_ = TrainState::load(c, file);
    default_generator().set_state(state_.dropout_rng[0], state_.dropout_rng[1]);
    data_->set_position(state_.data_position);
    metrics_.restore(c.metrics, file);
    const std::string note = snapshots_ ? snapshots_->resume(path("snapshots.h5"), state_.step) : "";
    if (!note.empty()) std::fprintf(stderr, "qkv: %s\n", note.c_str());
  }

  // QKV_DEBUG_PERTURB_RANK=r nudges a parameter on rank r (tests/dist/mpi_test.sh checksum).
  void perturb_for_tests() {
    const char* r = std::getenv("QKV_DEBUG_PERTURB_RANK");
    if (r && dp_.size() > 1 && std::atoi(r) == dp_.rank()) model_->parameters().front().value().data()[0] += 1e-3f;
  }

  RunResult diverged(const StepResult& s, Clock::time_point t0) {
    progress_.finish();
    const double value = std::string(s.diverged) == "loss" ? s.loss : s.grad_norm;
    if (dp_.is_root())
      std::fprintf(stderr, "qkv: training diverged at step %lld: %s is %g (loss %g, lr %g). Stopped without saving; the "
                   "last good checkpoint is %s\n", (long long)state_.step + 1, s.diverged, value, s.loss, optimizer_->lr(),
                   path("last.h5").c_str());
    return finish(3, "diverged", t0);
  }

  RunResult finish(int exit_code, const std::string& reason, Clock::time_point t0) {
    if (dp_.size() > 1 && dp_.is_root() && state_.step > 0) {
      char line[160];
      std::snprintf(line, sizeof line, "allreduce (loss + gradients): %.3f ms/step, %.1f%% of the run's wall time",
                    1e3 * dp_.seconds() / double(std::max<std::int64_t>(steps_run_, 1)),
                    100 * dp_.seconds() / std::max(seconds_since(t0), 1e-9));
      log(line);
    }
    RunResult r{exit_code, reason, state_.step, state_.last_eval, state_.best, state_.steps_to_target, seconds_since(t0), dir_};
    // A finished run (not an interrupted one) leaves result.csv: `qkv sweep` skips such runs.
    if (dp_.is_root() && (reason == "steps" || reason == "target" || reason == "diverged"))
      write_result_csv(path("result.csv"), r, metrics_, tokens_per_s_);
    return r;
  }

  config::Config cfg_;
  RunOptions opt_;
  dist::DataParallel dp_;
  Progress progress_;
  std::string dir_;
  std::shared_ptr<data::Task> task_;
  std::unique_ptr<data::Dataset> data_;
  data::Batch probe_;  // a slice of the fixed training set, when there is one
  std::unique_ptr<TaskModel> model_;
  std::unique_ptr<optim::Optimizer<float>> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<interp::SnapshotRecorder> snapshots_;  // root rank, train.snapshot_every > 0
  MetricsLog metrics_;
  TrainState state_;
  std::vector<std::pair<double, double>> qk_norms_;
  double last_grad_norm_ = NAN, tokens_per_s_ = 0;
  std::int64_t steps_run_ = 0;  // steps of this invocation
};

}  // namespace

RunResult run_training(const config::Config& cfg, const RunOptions& options, dist::Comm& comm) {
  if (comm.size() == 1) return Run(cfg, options, comm).run();
  // An error on one rank only (a full disk on rank 0, say) must stop them all: the others would
  // wait in the next allreduce forever. Errors every rank meets alike (a bad config) surface in
  // the constructor before any collective call, and keep their usual exit status.
  Run run(cfg, options, comm);
  try {
    return run.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: error on %s: %s; stopping all ranks\n", comm.description().c_str(), e.what());
    comm.abort(1);
  }
  return {};  // not reached: abort does not return
}

}  // namespace qkv::train
