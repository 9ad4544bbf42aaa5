#include "qkv/runs/training.hpp"

#include <filesystem>

#include "qkv/kernels/bf16.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::runs {

SnapshotsDuringTraining::SnapshotsDuringTraining(std::string dir, std::function<void(const std::string&)> note)
    : file_((std::filesystem::path(dir) / "snapshots.h5").string()), note_(std::move(note)) {}

train::Callbacks SnapshotsDuringTraining::callbacks() {
  train::Callbacks c;
  auto every = [](train::Session& s) { return std::int64_t(s.config().train.snapshot_every); };
  c.on_start = [this, every](train::Session& s) {
    const std::size_t n = std::min(s.config().train.snapshot_examples, s.data().eval_set().size());
    recorder_ = std::make_unique<interp::SnapshotRecorder>(s.model(), s.task(), data::rows(s.data().eval_set(), 0, n));
    if (s.state().step > 0)
      if (const std::string note = recorder_->resume(file_, s.state().step); !note.empty() && note_) note_(note);
    recorder_->record_if_due(s.state().step, every(s));
  };
  c.on_step = [this, every](train::Session& s, const train::StepResult&, double, bool) {
    recorder_->record_if_due(s.state().step, every(s));
  };
  c.on_end = [this, every](train::Session& s, const train::RunResult& r) {
    if (r.stop_reason == "steps" || r.stop_reason == "target") recorder_->record_if_due(s.state().step, every(s), true);
  };
  c.on_checkpoint = [this](train::Session&, const std::string& name) {
    if (name == "last.h5") interp::save_snapshots(file_, recorder_->snapshots());  // as of last.h5
  };
  return c;
}

std::string precision_message(const train::Session& s) {
  if (!s.precision().note.empty()) return "qkv: " + s.precision().note;
  return s.precision().precision == kernels::Precision::BFloat16 ? "precision: bf16, " + kernels::bf16_info() : "";
}

train::RunOptions run_options(const std::string& resume, const std::string& out, bool overwrite, std::int64_t stop_after) {
  train::RunOptions o;
  o.resume = resume;
  o.out = out;
  o.existing = overwrite ? train::ExistingRun::Overwrite : train::ExistingRun::Refuse;
  o.loop.stop_after = stop_after;
  return o;
}

train::RunResult train_with_snapshots(const config::Config& cfg, const train::RunOptions& options, const train::Callbacks& extra,
                              dist::Comm& comm, const std::function<void(const std::string&)>& note, int threads) {
  // The run's thread count (a setting of the process: the library leaves it to its caller).
  if (threads <= 0) threads = cfg.train.threads;
  if (threads > 0) set_num_threads(threads);
  if (cfg.train.snapshot_every == 0 || !comm.is_root()) return train::run_training(cfg, options, extra, comm);
  SnapshotsDuringTraining snapshots(options.out.empty() ? cfg.run.out : options.out, note);
  return train::run_training(cfg, options, train::chain(extra, snapshots.callbacks()), comm);
}

}  // namespace qkv::runs
