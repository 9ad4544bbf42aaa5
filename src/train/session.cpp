#include "qkv/train/session.hpp"

#include <cmath>
#include <cstdio>

#include "qkv/model/load.hpp"
#include "qkv/optim/clip.hpp"
#include "qkv/train/diagnostics.hpp"

namespace qkv::train {
namespace {

// Seeds of the independent random streams of a run, all derived from config.seed.
std::uint64_t init_seed(std::uint64_t seed) { return hash64(seed, 0x1417); }
std::uint64_t dropout_seed(std::uint64_t seed) { return hash64(seed, 0xd20f); }

const char* const kDiagnostics[] = {".entropy", ".max_weight", ".grad_q", ".grad_k", ".redundancy", ".qk_var"};

}  // namespace

PrecisionChoice choose_precision(const config::Config& cfg) {
  PrecisionChoice c;
  if (cfg.train.precision != config::TrainPrecision::Bf16) return c;
  const kernels::Bf16Support& s = kernels::bf16_support();
  if (s.fast)
    c.precision = kernels::Precision::BFloat16;
  else
    c.note = "train.precision: bf16: " + s.reason + "; training in float32";
  return c;
}

Session::Session(const config::Config& cfg, dist::Comm& comm) : cfg_(cfg), dp_(comm) {
  if (cfg.train.batch_size % (std::size_t(dp_.size()) * cfg.train.accumulate) != 0)
    throw ValueError("train.batch_size: " + std::to_string(cfg.train.batch_size) +
                     " must be divisible by the number of MPI ranks (" + std::to_string(dp_.size()) +
                     ") times train.accumulate (" + std::to_string(cfg.train.accumulate) + ")");
  task_ = data::make_task(cfg.task);
  data_ = std::make_unique<data::Dataset>(task_, cfg.seed, cfg.task.eval_size, cfg.task.train_size);
  if (cfg.task.train_size > 0) probe_ = data_->train_examples(0, std::min(cfg.task.train_size, cfg.task.eval_size));
  Generator init(init_seed(cfg.seed));
  model_ = model::make_model(cfg, *task_, init);
  default_generator().set_state(dropout_seed(cfg.seed), 0);
  default_generator().set_shard(std::uint64_t(dp_.rank()), std::uint64_t(dp_.size()));
  optimizer_ = optim::make_optimizer(model_->module(), cfg.optimizer);
  optim::ScheduleOptions schedule = cfg.schedule;
  schedule.total_steps = std::int64_t(cfg.train.steps);
  schedule_ = std::make_unique<optim::LrSchedule>(cfg.optimizer.lr, schedule);
  std::vector<std::string> cols = {"step", "lr", "train_loss", "train_token_acc", "grad_norm", "eval_loss",
                                   "eval_token_acc", "eval_seq_acc", "tokens_per_s", "elapsed_s"};
  for (auto& [name, layer] : model::attention_layers(*model_))
    for (const char* d : kDiagnostics) cols.push_back(name + d);
  metrics_.set_columns(cols);
  precision_ = choose_precision(cfg);
  step_options_ = {cfg.train.label_smoothing, cfg.optimizer.clip_grad_norm, !probe_.size(), cfg.train.accumulate,
                   precision_.precision, {}};
  diagnose_options_ = step_options_;
  // The raw (averaged, unclipped) gradient norms reaching W_q and W_k, for the metrics.
  diagnose_options_.after_backward = [this] {
    qk_norms_.clear();
    for (auto& [name, layer] : model::attention_layers(*model_))
      qk_norms_.push_back({gradient_norm(layer->w_q->weight), gradient_norm(layer->w_k->weight)});
  };
}

Session::~Session() = default;

void Session::set_precision(kernels::Precision precision) {
  precision_ = {precision, ""};
  step_options_.precision = diagnose_options_.precision = precision;
}

double Session::lr() const { return optimizer_->lr(); }

std::size_t Session::tokens_per_batch() const { return cfg_.train.batch_size * task_->target_length(); }

StepResult Session::step(bool diagnose) {
  optimizer_->set_lr(schedule_->lr_at(state_.step));
  const data::Batch batch = data_->next_train_shard(cfg_.train.batch_size, std::size_t(dp_.rank()), std::size_t(dp_.size()));
  const StepResult s = train_step(*model_, batch, *optimizer_, diagnose ? diagnose_options_ : step_options_, dp_);
  if (*s.diverged) return s;
  ++state_.step, ++state_.train_loss_steps;
  state_.train_loss_sum += s.loss;
  state_.train_correct += std::int64_t(s.correct), state_.train_counted += std::int64_t(s.counted);
  last_grad_norm_ = s.grad_norm;
  return s;
}

bool Session::evaluate(double tokens_per_s, double elapsed_s) {
  const std::size_t chunk = model::eval_batch_size(cfg_);
  state_.last_eval = model::evaluate(*model_, data_->eval_set(), chunk);
  double train_acc = state_.train_counted ? double(state_.train_correct) / double(state_.train_counted) : NAN;
  if (probe_.size()) train_acc = model::evaluate(*model_, probe_, chunk).token_accuracy;
  const model::EvalMetrics& e = state_.last_eval;
  std::vector<double> row = {double(state_.step), optimizer_->lr(),
                             state_.train_loss_sum / double(std::max<std::int64_t>(state_.train_loss_steps, 1)),
                             train_acc, last_grad_norm_, e.loss, e.token_accuracy, e.sequence_accuracy, tokens_per_s,
                             elapsed_s};
  state_.train_correct = state_.train_counted = 0, state_.train_loss_sum = 0, state_.train_loss_steps = 0;
  auto layers = cfg_.train.diagnostics ? attention_diagnostics(*model_, data_->eval_set(), 64, chunk)
                                       : std::vector<LayerDiagnostics>{};
  layers.resize(model::attention_layers(*model_).size());  // without diagnostics: NaN statistics
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto qk = l < qk_norms_.size() ? qk_norms_[l] : std::pair<double, double>{NAN, NAN};
    row.insert(row.end(), {layers[l].stats.entropy, layers[l].stats.max_weight, qk.first, qk.second, layers[l].redundancy,
                           layers[l].qk_var});
  }
  metrics_.add(row);
  const double target = cfg_.train.target_accuracy;
  if (state_.steps_to_target < 0 && e.token_accuracy >= (target > 0 ? target : 0.99)) state_.steps_to_target = state_.step;
  if (e.token_accuracy <= state_.best.token_accuracy) return false;
  state_.best = e;
  return true;
}

io::Checkpoint Session::checkpoint() {
  // Every rank must hold the same parameters; a mismatch means the ranks diverged.
  const auto sync = dp_.check_in_sync(model_->module());
  if (sync.differing_rank) {
    char msg[300];
    std::snprintf(msg, sizeof msg,
                  "rank %d's parameters differ from rank 0's at step %lld (checksums %016llx vs %016llx): the ranks no "
                  "longer train the same model (different builds, libraries or CPUs across nodes, or a memory error)",
                  sync.differing_rank, (long long)state_.step, (unsigned long long)sync.checksum,
                  (unsigned long long)sync.root_checksum);
    throw RanksOutOfSync(msg);
  }
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
  model::save_vocabulary(*task_, c);
  return c;
}

void Session::resume(const io::Checkpoint& c, const std::string& file) {
  // Resuming continues the same model on the same data: seed, model and task must match the
  // checkpoint's config (equal shapes are not enough: an activation or a scale would change the
  // model silently). Optimizer, schedule, train and run settings may differ (e.g. more steps).
  const auto differ = config::differences(config::parse_stored_config(c.config_yaml, file + ":/config"), cfg_,
                                          {"seed", "model", "task"}, "checkpoint", "config");
  std::string listed;
  for (auto& d : differ) listed += "\n  " + d;
  if (!listed.empty())
    throw ValueError("--resume " + file + ": the checkpoint was trained with another model, task or seed:" + listed);
  io::check_compatible(model_->module().state_dict(), c.model, file);
  model::check_vocabulary(*task_, c, file);
  // Everything is checked before anything changes: a refused checkpoint leaves the session new.
  TrainState state = TrainState::load(c, file);
  MetricsLog metrics = metrics_;
  metrics.restore(c.metrics, c.step, file);
  model_->module().load_state_dict(c.model);
  optimizer_->load_state_dict({c.optimizer_step, c.optimizer});
  state_ = state;
  metrics_ = std::move(metrics);
  default_generator().set_state(state_.dropout_rng[0], state_.dropout_rng[1]);
  data_->set_position(state_.data_position);
}

}  // namespace qkv::train
