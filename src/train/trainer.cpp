#include "qkv/train/trainer.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qkv/io/checkpoint.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/parallel.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/optim/adam.hpp"
#include "qkv/optim/clip.hpp"
#include "qkv/optim/lr_schedule.hpp"
#include "qkv/optim/optimizer.hpp"
#include "qkv/optim/sgd.hpp"
#include "qkv/train/diagnostics.hpp"
#include "qkv/train/progress.hpp"
#include "qkv/version.hpp"

namespace qkv::train {
namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop = true; }

double elapsed_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seeds of the independent random streams of a run, all derived from config.seed.
std::uint64_t init_seed(std::uint64_t seed) { return hash64(seed, 0x1417); }
std::uint64_t dropout_seed(std::uint64_t seed) { return hash64(seed, 0xd20f); }

// Metric history: named columns, one row per evaluation; mirrored to metrics.csv.
class MetricsLog {
 public:
  void set_columns(std::vector<std::string> columns) { columns_ = std::move(columns); }
  const std::vector<std::string>& columns() const { return columns_; }
  std::size_t rows() const { return rows_.size(); }

  void add(const std::vector<double>& row) { rows_.push_back(row); }
  std::vector<std::pair<std::string, std::vector<double>>> history() const {
    std::vector<std::pair<std::string, std::vector<double>>> out;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      std::vector<double> col;
      for (auto& r : rows_) col.push_back(r[c]);
      out.emplace_back(columns_[c], std::move(col));
    }
    return out;
  }
  void restore(const std::vector<std::pair<std::string, std::vector<double>>>& history, const std::string& path) {
    rows_.clear();
    std::size_t n = history.empty() ? 0 : history.front().second.size();
    for (std::size_t r = 0; r < n; ++r) {
      std::vector<double> row(columns_.size(), NAN);
      for (auto& [name, values] : history) {
        auto it = std::find(columns_.begin(), columns_.end(), name);
        if (it == columns_.end())
          throw ValueError(path + ": metric column '" + name + "' does not belong to this model's metrics");
        row[std::size_t(it - columns_.begin())] = values.at(r);
      }
      rows_.push_back(std::move(row));
    }
  }
  /// Rewrite the whole CSV (used at start and on resume, so rows past a checkpoint disappear).
  void write_csv(const std::string& path) const {
    std::ofstream f(path, std::ios::trunc);
    write_header(f);
    for (auto& r : rows_) write_row(f, r);
    if (!f) throw io::IoError("cannot write " + path);
  }
  void append_csv(const std::string& path) const {
    std::ofstream f(path, std::ios::app);
    write_row(f, rows_.back());
    if (!f) throw io::IoError("cannot append to " + path);
  }

 private:
  void write_header(std::ostream& f) const {
    for (std::size_t c = 0; c < columns_.size(); ++c) f << (c ? "," : "") << columns_[c];
    f << "\n";
  }
  static void write_row(std::ostream& f, const std::vector<double>& r) {
    char buf[40];
    for (std::size_t c = 0; c < r.size(); ++c) {
      std::snprintf(buf, sizeof buf, "%.9g", r[c]);
      f << (c ? "," : "") << buf;
    }
    f << "\n";
  }
  std::vector<std::string> columns_;
  std::vector<std::vector<double>> rows_;
};

// Sum of squares of a gradient, or 0 when it has none.
double grad_norm(const Variable<float>& p) {
  if (!p.has_grad()) return 0;
  double s = 0;
  const float* g = p.grad().data();
  for (std::size_t i = 0, n = p.size(); i < n; ++i) s += double(g[i]) * g[i];
  return std::sqrt(s);
}

std::uint64_t checksum(const nn::Module<float>& m) {
  std::uint64_t h = 0;
  for (auto& p : m.parameters()) {
    const auto* bytes = reinterpret_cast<const std::uint32_t*>(p.data());
    for (std::size_t i = 0; i < p.size(); ++i) h = hash64(h, bytes[i]);
  }
  return h;
}

class Trainer {
 public:
  Trainer(const config::Config& cfg, const RunOptions& opt, dist::Comm& comm)
      : cfg_(cfg), opt_(opt), comm_(comm), progress_(std::int64_t(cfg.train.steps), opt.progress && comm.is_root()) {
    run_dir_ = opt.out.empty() ? cfg.run.out : opt.out;
    const int threads = opt.threads > 0 ? opt.threads : cfg.train.threads;
    if (threads > 0)
      set_num_threads(threads);
    else if (comm.local_size() > 1)  // "all cores" is shared by the ranks on this machine
      set_num_threads(std::max(1, num_threads() / comm.local_size()));

    task_ = data::make_task(cfg.task);
    data_ = std::make_unique<data::Dataset>(task_, cfg.seed, cfg.task.eval_size, cfg.task.train_size);
    has_probe_ = cfg.task.train_size > 0;
    if (has_probe_)
      train_probe_ = data_->train_examples(0, std::min(cfg.task.train_size, cfg.task.eval_size));

    Generator init(init_seed(cfg.seed));
    model_ = make_model(cfg, *task_, init);
    default_generator().set_state(dropout_seed(cfg.seed), 0);
    default_generator().set_shard(std::uint64_t(comm.rank()), std::uint64_t(comm.size()));
    params_ = model_->module().parameters();
    debug_perturb();
    optimizer_ = optim::make_optimizer(model_->module(), cfg.optimizer);
    optim::ScheduleOptions schedule = cfg.schedule;
    schedule.total_steps = std::int64_t(cfg.train.steps);
    schedule_ = std::make_unique<optim::LrSchedule>(cfg.optimizer.lr, schedule);

    if (cfg.train.batch_size % std::size_t(comm.size()) != 0)
      throw ValueError("train.batch_size: " + std::to_string(cfg.train.batch_size) +
                       " must be divisible by the number of MPI ranks (" + std::to_string(comm.size()) + ")");

    std::vector<std::string> cols = {"step", "lr", "train_loss", "train_token_acc", "grad_norm", "eval_loss",
                                     "eval_token_acc", "eval_seq_acc", "tokens_per_s", "elapsed_s"};
    for (auto& [name, layer] : attention_layers(*model_))
      for (const char* s : {".entropy", ".max_weight", ".grad_q", ".grad_k", ".redundancy"}) cols.push_back(name + s);
    metrics_.set_columns(cols);
  }

  RunResult run() {
    const auto t0 = std::chrono::steady_clock::now();
    RunResult result;
    result.run_dir = run_dir_;
    if (!opt_.resume.empty()) resume(opt_.resume);
    if (comm_.is_root()) {
      fs::create_directories(fs::path(run_dir_) / "checkpoints");
      std::ofstream(fs::path(run_dir_) / "config.yaml") << config::to_yaml(cfg_);
      metrics_.write_csv(csv_path());
      log(std::string("qkv ") + QKV_VERSION + " | " + task_->name() + " | " +
          std::to_string(model_->module().num_parameters()) + " parameters | " + std::to_string(num_threads()) +
          " thread(s) | " + comm_.description());
      log("BLAS: " + kernels::blas_info());
      if (step_ > 0) log("resumed from " + opt_.resume + " at step " + std::to_string(step_));
    }

    auto prev_handler = std::signal(SIGINT, on_sigint);
    g_stop = false;
    const std::int64_t total = std::int64_t(cfg_.train.steps);
    const double target = cfg_.train.target_accuracy;
    auto window_start = std::chrono::steady_clock::now();
    std::int64_t window_tokens = 0, started_at = step_;
    std::string reason = "steps";

    while (step_ < total) {
      // A signal may reach some ranks only: stop together, or the others wait in allreduce forever.
      const bool stop = comm_.size() > 1 ? any_rank(g_stop) : bool(g_stop);
      if (stop || (opt_.stop_after > 0 && step_ - started_at >= opt_.stop_after)) {
        reason = stop ? "interrupted" : "stopped";
        break;
      }
      const bool eval_now = (step_ + 1) % std::int64_t(cfg_.train.eval_every) == 0 || step_ + 1 == total;
      optimizer_->set_lr(schedule_->lr_at(step_));

      data::Batch batch = comm_.size() > 1 ? data_->next_train_shard(cfg_.train.batch_size, std::size_t(comm_.rank()), std::size_t(comm_.size()))
                                           : data_->next_train(cfg_.train.batch_size);
      Variable<float> logits = model_->logits(batch);
      Variable<float> loss = cross_entropy(logits, batch.targets, data::kIgnore, cfg_.train.label_smoothing);
      // The loss is a mean over this rank's scored tokens: the mean of the rank means is the global
      // mean because every rank scores the same number of tokens (fixed scored positions per example).
      double sums[3] = {loss.item(), 0, 0};  // loss, correct, counted (this step)
      if (!has_probe_) count_correct(logits.value(), batch.targets, sums[1], sums[2]);
      if (comm_.size() > 1) {
        const auto c0 = std::chrono::steady_clock::now();
        comm_.allreduce_sum(sums, 3);
        comm_seconds_ += elapsed_since(c0);
        sums[0] /= comm_.size();
      }
      const double loss_value = sums[0];
      train_correct_ += std::int64_t(sums[1]);
      train_counted_ += std::int64_t(sums[2]);
      if (!std::isfinite(loss_value)) return diverged(result, "loss is " + fmt(loss_value), loss_value, t0);
      loss.backward();
      if (comm_.size() > 1) {
        const auto c0 = std::chrono::steady_clock::now();
        average_gradients();
        comm_seconds_ += elapsed_since(c0);
      }
      if (eval_now) record_qk_grad_norms();
      const double norm = cfg_.optimizer.clip_grad_norm > 0 ? optim::clip_grad_norm(params_, cfg_.optimizer.clip_grad_norm)
                                                           : optim::clip_grad_norm(params_, INFINITY);
      if (!std::isfinite(norm)) return diverged(result, "gradient norm is " + fmt(norm), loss_value, t0);
      optimizer_->step();
      optimizer_->zero_grad();
      ++step_;
      ++steps_run_;
      loss_sum_ += loss_value;
      ++loss_steps_;
      last_grad_norm_ = norm;
      window_tokens += std::int64_t(batch.targets.size()) * comm_.size();

      if (step_ % std::int64_t(cfg_.train.log_every) == 0 || eval_now) {
        tokens_per_s_ = window_tokens / std::max(elapsed_since(window_start), 1e-9);
        progress_.update(step_, loss_value, last_eval_.token_accuracy, tokens_per_s_);
        window_start = std::chrono::steady_clock::now();
        window_tokens = 0;
      }
      if (eval_now) {
        evaluate_and_log(t0);
        if (result.steps_to_target < 0 && last_eval_.token_accuracy >= (target > 0 ? target : 0.99))
          result.steps_to_target = step_;
        steps_to_target_ = result.steps_to_target;
        if (last_eval_.token_accuracy > best_.token_accuracy) {
          best_ = last_eval_;
          save("best.h5");
        }
      }
      if (step_ % std::int64_t(cfg_.train.checkpoint_every) == 0) {
        char name[64];
        std::snprintf(name, sizeof name, "checkpoints/step_%07lld.h5", (long long)step_);
        save(name);
        save("last.h5");
      }
      if (eval_now && target > 0 && last_eval_.token_accuracy >= target) {
        reason = "target";
        break;
      }
    }
    std::signal(SIGINT, prev_handler);
    // Resumed from the final checkpoint (killed before result.csv was written, e.g. in a sweep):
    // the final evaluation, which the checkpoint does not hold, is recomputed for the result.
    if (steps_run_ == 0 && step_ >= total && std::isnan(last_eval_.loss))
      last_eval_ = evaluate(*model_, data_->eval_set(), std::max<std::size_t>(cfg_.train.batch_size, 256));
    save("last.h5");
    progress_.finish();
    result.exit_code = reason == "interrupted" ? 130 : 0;
    if (reason == "interrupted") log("interrupted at step " + std::to_string(step_) + ": saved " + path("last.h5"));
    return finish(result, reason, t0);
  }

 private:
  // Sum the gradients of every rank in a few large allreduce calls, then divide by the rank count.
  void average_gradients() {
    constexpr std::size_t kBucket = std::size_t(1) << 22;  // floats per allreduce call
    std::size_t total = 0;
    for (auto& p : params_) total += p.size();
    flat_.resize(total);
    std::size_t off = 0;
    for (auto& p : params_) {
      if (p.has_grad())
        std::copy(p.grad().data(), p.grad().data() + p.size(), flat_.data() + off);
      else
        std::fill(flat_.data() + off, flat_.data() + off + p.size(), 0.0f);
      off += p.size();
    }
    for (std::size_t i = 0; i < total; i += kBucket) comm_.allreduce_sum(flat_.data() + i, std::min(kBucket, total - i));
    const float inv = 1.0f / float(comm_.size());
    off = 0;
    for (auto& p : params_) {
      Array<float> g = Array<float>::from_shape(p.shape());
      for (std::size_t i = 0; i < p.size(); ++i) g.data()[i] = flat_[off + i] * inv;
      p.zero_grad();
      p.accumulate_grad(std::move(g), "allreduce");
      off += p.size();
    }
  }

  void record_qk_grad_norms() {
    qk_norms_.clear();
    for (auto& [name, layer] : attention_layers(*model_))
      qk_norms_.push_back({grad_norm(layer->w_q->weight), grad_norm(layer->w_k->weight)});
  }

  static void count_correct(const Array<float>& logits, const IndexArray& targets, double& correct, double& counted) {
    IndexArray pred = argmax_last(logits);
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (targets.data()[i] == data::kIgnore) continue;
      ++counted;
      correct += pred.data()[i] == targets.data()[i];
    }
  }

  bool any_rank(bool flag) {
    double f = flag ? 1 : 0;
    comm_.allreduce_sum(&f, 1);
    return f > 0;
  }

  // QKV_DEBUG_PERTURB_RANK=r: nudge one parameter on rank r, so that the ranks' parameters differ
  // (tests the checksum comparison at checkpoints).
  void debug_perturb() {
    const char* r = std::getenv("QKV_DEBUG_PERTURB_RANK");
    if (!r || comm_.size() < 2 || std::atoi(r) != comm_.rank() || params_.empty()) return;
    params_.front().value().data()[0] += 1e-3f;
  }

  void evaluate_and_log(std::chrono::steady_clock::time_point t0) {
    const std::size_t eval_batch = std::max<std::size_t>(cfg_.train.batch_size, 256);
    last_eval_ = evaluate(*model_, data_->eval_set(), eval_batch);
    double train_acc = train_counted_ ? double(train_correct_) / double(train_counted_) : NAN;
    if (has_probe_) train_acc = evaluate(*model_, train_probe_, eval_batch).token_accuracy;
    train_correct_ = train_counted_ = 0;

    std::vector<double> row = {double(step_), optimizer_->lr(), loss_sum_ / std::max<std::int64_t>(loss_steps_, 1),
                               train_acc, last_grad_norm_, last_eval_.loss, last_eval_.token_accuracy,
                               last_eval_.sequence_accuracy, tokens_per_s_, elapsed_since(t0)};
    loss_sum_ = 0;
    loss_steps_ = 0;
    auto layers = attention_layers(*model_);
    std::vector<Array<float>> maps;
    if (cfg_.train.diagnostics) maps = attention_maps(*model_, data_->eval_set(), 64);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      AttentionStats s = maps.empty() ? AttentionStats{NAN, NAN} : attention_stats(maps[l]);
      const double redundancy = maps.empty() ? NAN : head_redundancy(maps[l]);
      const auto qk = l < qk_norms_.size() ? qk_norms_[l] : std::pair<double, double>{NAN, NAN};
      row.insert(row.end(), {s.entropy, s.max_weight, qk.first, qk.second, redundancy});
    }
    metrics_.add(row);
    if (comm_.is_root()) metrics_.append_csv(csv_path());
    char line[200];
    std::snprintf(line, sizeof line, "eval @ %lld: loss %.4f  token acc %.2f%%  seq acc %.2f%%", (long long)step_,
                  last_eval_.loss, 100 * last_eval_.token_accuracy, 100 * last_eval_.sequence_accuracy);
    progress_.message(line);
  }

  io::Checkpoint snapshot() const {
    io::Checkpoint c;
    c.step = step_;
    c.config_yaml = config::to_yaml(cfg_);
    c.model = model_->module().state_dict();
    auto os = optimizer_->state_dict();
    c.optimizer_step = os.step;
    c.optimizer = std::move(os.tensors);
    c.rng.push_back({"dropout", {default_generator().seed(), default_generator().offset()}});
    c.scalars = {{"data_position", double(data_->position())},
                 {"best_token_accuracy", best_.token_accuracy},
                 {"best_sequence_accuracy", best_.sequence_accuracy},
                 {"best_loss", best_.loss},
                 {"steps_to_target", double(steps_to_target_)},
                 {"train_loss_sum", loss_sum_},
                 {"train_loss_steps", double(loss_steps_)},
                 {"train_correct", double(train_correct_)},
                 {"train_counted", double(train_counted_)},
                 {"last_eval_token_accuracy", last_eval_.token_accuracy}};
    c.metrics = metrics_.history();
    return c;
  }

  void save(const std::string& name) {
    if (comm_.size() > 1) {
      // Every rank must hold the same parameters; a mismatch means the ranks diverged.
      auto sums = comm_.allgather(checksum(model_->module()));
      for (std::size_t r = 1; r < sums.size(); ++r)
        if (sums[r] != sums[0]) {
          if (comm_.is_root())  // every rank sees the mismatch and stops; one message
            std::fprintf(stderr, "qkv: rank %zu's parameters differ from rank 0's at step %lld (checksums %016llx vs %016llx): "
                         "the ranks no longer train the same model (different builds, libraries or CPUs across "
                         "nodes, or a memory error). Stopping without writing %s; the last checkpoint is %s\n",
                         r, (long long)step_, (unsigned long long)sums[r], (unsigned long long)sums[0], name.c_str(),
                         path("last.h5").c_str());
          comm_.abort(4);
        }
    }
    if (!comm_.is_root()) return;
    io::save_checkpoint(path(name), snapshot());
  }

  void resume(const std::string& file) {
    io::Checkpoint c = io::load_checkpoint(file);
    check_same_model_and_data(config::parse_config(c.config_yaml, file + ":/config"), file);
    io::check_compatible(model_->module().state_dict(), c.model, file);
    model_->module().load_state_dict(c.model);
    optimizer_->load_state_dict({c.optimizer_step, c.optimizer});
    for (auto& [name, state] : c.rng)
      if (name == "dropout") default_generator().set_state(state[0], state[1]);
    auto scalar = [&](const char* key) -> double {
      for (auto& [k, v] : c.scalars)
        if (k == key) return v;
      throw io::IoError(file + ": /train has no attribute '" + key + "'");
    };
    data_->set_position(std::uint64_t(scalar("data_position")));
    best_ = {scalar("best_loss"), scalar("best_token_accuracy"), scalar("best_sequence_accuracy")};
    steps_to_target_ = std::int64_t(scalar("steps_to_target"));
    loss_sum_ = scalar("train_loss_sum");
    loss_steps_ = std::int64_t(scalar("train_loss_steps"));
    train_correct_ = std::int64_t(scalar("train_correct"));
    train_counted_ = std::int64_t(scalar("train_counted"));
    last_eval_.token_accuracy = scalar("last_eval_token_accuracy");
    metrics_.restore(c.metrics, file);
    step_ = c.step;
  }

  // Resuming continues the same model on the same data: seed, model and task must match the
  // checkpoint's config (equal shapes are not enough: an activation or a scale would change the
  // model silently). Optimizer, schedule, train and run settings may differ (e.g. more steps).
  void check_same_model_and_data(const config::Config& stored, const std::string& file) const {
    config::Config now = cfg_;
    now.optimizer = stored.optimizer;
    now.schedule = stored.schedule;
    now.train = stored.train;
    now.run = stored.run;
    now.source = stored.source;
    if (now == stored) return;
    std::string listed;
    for (auto& d : config::differences(stored, now, {"seed", "model", "task"}, "checkpoint", "config")) listed += "\n  " + d;
    throw ValueError("--resume " + file + ": the checkpoint was trained with another model, task or seed:" + listed);
  }

  RunResult diverged(RunResult& r, const std::string& what, double loss, std::chrono::steady_clock::time_point t0) {
    progress_.finish();
    char line[400];
    std::snprintf(line, sizeof line,
                  "qkv: training diverged at step %lld: %s (loss %g, lr %g). Stopped without saving; the last good checkpoint is %s",
                  (long long)step_ + 1, what.c_str(), loss, optimizer_->lr(), path("last.h5").c_str());
    if (comm_.is_root()) std::fprintf(stderr, "%s\n", line);
    r.exit_code = 3;
    return finish(r, "diverged", t0);
  }

  RunResult finish(RunResult& r, const std::string& reason, std::chrono::steady_clock::time_point t0) {
    if (comm_.size() > 1 && comm_.is_root() && step_ > 0) {
      char line[160];
      std::snprintf(line, sizeof line, "allreduce (loss + gradients): %.3f ms/step, %.1f%% of the run's wall time",
                    1e3 * comm_seconds_ / double(std::max<std::int64_t>(steps_run_, 1)),
                    100 * comm_seconds_ / std::max(elapsed_since(t0), 1e-9));
      log(line);
    }
    r.stop_reason = reason;
    r.step = step_;
    r.last = last_eval_;
    r.best = best_;
    r.steps_to_target = steps_to_target_;
    r.wall_seconds = elapsed_since(t0);
    // A finished run (not an interrupted one) leaves result.csv: `qkv sweep` skips such runs.
    if (comm_.is_root() && (reason == "steps" || reason == "target" || reason == "diverged")) write_result(r);
    return r;
  }

  // One-row summary of the run for sweeps: final/best metrics and the last diagnostics, averaged
  // over attention layers.
  void write_result(const RunResult& r) const {
    std::vector<std::pair<std::string, double>> diag = {{"entropy", 0}, {"max_weight", 0}, {"grad_q", 0},
                                                        {"grad_k", 0}, {"redundancy", 0}};
    double train_acc = NAN;
    auto hist = metrics_.history();
    const std::size_t layers = attention_layers(*model_).size();
    for (auto& [name, values] : hist) {
      if (values.empty()) continue;
      if (name == "train_token_acc") train_acc = values.back();
      for (auto& [key, sum] : diag)
        if (name.size() > key.size() && name.compare(name.size() - key.size(), key.size(), key) == 0 &&
            name[name.size() - key.size() - 1] == '.')
          sum += values.back() / double(layers);
    }
    std::ofstream f(path("result.csv"));
    f << "status,steps,final_loss,final_token_acc,final_seq_acc,best_token_acc,best_seq_acc,steps_to_target,"
         "wall_s,tokens_per_s,train_token_acc";
    for (auto& [key, v] : diag) f << ",attn_" << key;
    f << "\n" << r.stop_reason << ',' << r.step;
    char buf[40];
    for (double v : {r.last.loss, r.last.token_accuracy, r.last.sequence_accuracy, r.best.token_accuracy,
                     r.best.sequence_accuracy, double(r.steps_to_target), r.wall_seconds, tokens_per_s_, train_acc}) {
      std::snprintf(buf, sizeof buf, "%.9g", v);
      f << ',' << buf;
    }
    for (auto& [key, v] : diag) {
      std::snprintf(buf, sizeof buf, "%.9g", v);
      f << ',' << buf;
    }
    f << "\n";
  }

  void log(const std::string& s) { progress_.message(s); }
  static std::string fmt(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  }
  std::string path(const std::string& name) const { return (fs::path(run_dir_) / name).string(); }
  std::string csv_path() const { return path("metrics.csv"); }

  static std::vector<Array<float>> attention_maps(TaskModel& model, const data::Batch& eval, std::size_t n);

  config::Config cfg_;
  RunOptions opt_;
  dist::Comm& comm_;
  Progress progress_;
  std::string run_dir_;
  std::shared_ptr<data::Task> task_;
  std::unique_ptr<data::Dataset> data_;
  data::Batch train_probe_;  // a slice of the fixed training set, when there is one
  bool has_probe_ = false;
  std::unique_ptr<TaskModel> model_;
  std::vector<Variable<float>> params_;
  std::unique_ptr<optim::Optimizer<float>> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  MetricsLog metrics_;
  std::vector<float> flat_;
  std::vector<std::pair<double, double>> qk_norms_;
  std::int64_t step_ = 0, loss_steps_ = 0, train_correct_ = 0, train_counted_ = 0, steps_to_target_ = -1;
  double loss_sum_ = 0, last_grad_norm_ = NAN, tokens_per_s_ = 0;
  double comm_seconds_ = 0;      // time in allreduce calls (loss and gradients) of this invocation
  std::int64_t steps_run_ = 0;   // steps of this invocation
  EvalMetrics last_eval_{NAN, -1, -1}, best_{NAN, -1, -1};
};

data::Batch rows(const data::Batch& b, std::size_t lo, std::size_t hi) {
  auto take = [&](const IndexArray& a) {
    if (a.dimension() != 2) return a;  // no decoder inputs
    const std::size_t T = a.shape()[1];
    IndexArray out = IndexArray::from_shape({hi - lo, T});
    std::copy(a.data() + lo * T, a.data() + hi * T, out.data());
    return out;
  };
  return {take(b.inputs), take(b.targets), take(b.decoder_inputs)};
}

std::vector<Array<float>> Trainer::attention_maps(TaskModel& model, const data::Batch& eval, std::size_t n) {
  NoGradGuard no_grad;
  model.module().eval();
  data::Batch b = rows(eval, 0, std::min(n, eval.inputs.shape()[0]));
  auto cache = nn::run_with_cache(model.module(), [&] { model.logits(b); }, {"*.hook_pattern"});
  std::vector<Array<float>> maps;
  for (auto& [name, w] : cache.entries()) maps.push_back(w);
  model.module().train();
  return maps;
}

}  // namespace

EvalMetrics evaluate(TaskModel& model, const data::Batch& eval, std::size_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const std::size_t N = eval.inputs.shape()[0];
  double loss_sum = 0;
  std::size_t counted = 0, correct = 0, seq_correct = 0;
  for (std::size_t lo = 0; lo < N; lo += batch_size) {
    data::Batch b = rows(eval, lo, std::min(N, lo + batch_size));
    Variable<float> logits = model.logits(b);
    std::size_t n_scored = 0;
    for (std::size_t i = 0; i < b.targets.size(); ++i) n_scored += b.targets.data()[i] != data::kIgnore;
    loss_sum += double(cross_entropy(logits, b.targets, data::kIgnore).item()) * double(n_scored);
    IndexArray pred = model.predict(b, logits.value());
    const std::size_t T = b.targets.shape()[1];
    for (std::size_t r = 0; r < b.targets.shape()[0]; ++r) {
      bool all = true;
      for (std::size_t t = 0; t < T; ++t) {
        const Index y = b.targets(r, t);
        if (y == data::kIgnore) continue;
        ++counted;
        const bool ok = pred(r, t) == y;
        correct += ok;
        all = all && ok;
      }
      seq_correct += all;
    }
  }
  if (was_training) model.module().train();
  return {counted ? loss_sum / double(counted) : 0.0, counted ? double(correct) / double(counted) : 0.0,
          N ? double(seq_correct) / double(N) : 0.0};
}

RunResult run_training(const config::Config& cfg, const RunOptions& options, dist::Comm& comm) {
  if (comm.size() == 1) {
    Trainer trainer(cfg, options, comm);
    return trainer.run();
  }
  // An error on one rank only (a full disk on rank 0, say) must stop them all: the others would
  // wait in the next allreduce forever. Errors every rank meets alike (a bad config) surface in
  // the constructor before any collective call, and keep their usual exit status.
  std::unique_ptr<Trainer> trainer = std::make_unique<Trainer>(cfg, options, comm);
  try {
    return trainer->run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv: error on %s: %s; stopping all ranks\n", comm.description().c_str(), e.what());
    comm.abort(1);
  }
  return {};  // not reached: abort does not return
}

void request_stop() { g_stop = true; }

}  // namespace qkv::train
