#include "qkv/train/loop.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>

namespace qkv::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string checkpoint_name(std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoints/step_%07lld.h5", (long long)step);
  return name;
}

}  // namespace

RunResult train_loop(Session& s, const LoopOptions& options, const Callbacks& cb) {
  const auto t0 = Clock::now();
  const config::TrainConfig& t = s.config().train;
  const std::int64_t total = std::int64_t(t.steps), started_at = s.state().step;
  RunResult r{"steps"};
  auto window = Clock::now();
  std::int64_t window_tokens = 0;
  if (cb.on_start) cb.on_start(s);

  while (s.state().step < total) {
    // A request may reach some ranks only (a signal): they stop together.
    if (s.dp().any(cb.stop_requested && cb.stop_requested())) {
      r.stop_reason = "interrupted";
      break;
    }
    if (options.stop_after > 0 && s.state().step - started_at >= options.stop_after) {
      r.stop_reason = "stopped";
      break;
    }
    const std::int64_t next = s.state().step + 1;
    const bool eval_now = next % std::int64_t(t.eval_every) == 0 || next == total;
    const StepResult step = s.step(eval_now);
    if (*step.diverged) {
      char msg[240];
      std::snprintf(msg, sizeof msg, "training diverged at step %lld: %s is %g (loss %g, lr %g)", (long long)next,
                    step.diverged, std::string(step.diverged) == "loss" ? step.loss : step.grad_norm, step.loss, s.lr());
      r.stop_reason = "diverged", r.message = msg;
      break;
    }
    window_tokens += std::int64_t(s.tokens_per_batch());
    const bool log = s.state().step % std::int64_t(t.log_every) == 0 || eval_now;
    if (log) {
      r.tokens_per_s = double(window_tokens) / std::max(seconds_since(window), 1e-9);
      window = Clock::now(), window_tokens = 0;
    }
    if (cb.on_step) cb.on_step(s, step, r.tokens_per_s, log);
    if (eval_now) {
      const bool best = s.evaluate(r.tokens_per_s, seconds_since(t0));
      if (cb.on_evaluation) cb.on_evaluation(s);
      if (best && cb.on_checkpoint) cb.on_checkpoint(s, "best.h5");
    }
    if (s.state().step % std::int64_t(t.checkpoint_every) == 0 && cb.on_checkpoint) {
      cb.on_checkpoint(s, checkpoint_name(s.state().step));
      cb.on_checkpoint(s, "last.h5");
    }
    if (eval_now && t.target_accuracy > 0 && s.state().last_eval.token_accuracy >= t.target_accuracy) {
      r.stop_reason = "target";
      break;
    }
  }
  // Resumed from the final checkpoint (killed before the run's end was recorded, e.g. in a
  // sweep): the final evaluation, which the checkpoint does not hold, is recomputed.
  if (s.state().step == started_at && s.state().step >= total && std::isnan(s.state().last_eval.loss))
    s.state().last_eval = model::evaluate(s.model(), s.data().eval_set(), model::eval_batch_size(s.config()));
  const TrainState& st = s.state();
  r.step = st.step, r.last = st.last_eval, r.best = st.best, r.steps_to_target = st.steps_to_target;
  r.wall_seconds = seconds_since(t0);
  if (r.stop_reason == "diverged") return r;  // nothing saved: the last checkpoint stays the last good one
  if (cb.on_end) cb.on_end(s, r);
  if (cb.on_checkpoint) cb.on_checkpoint(s, "last.h5");
  r.wall_seconds = seconds_since(t0);
  return r;
}

Callbacks chain(Callbacks a, Callbacks b) {
  auto both = [](auto f, auto g) -> decltype(f) {
    if (!f) return g;
    if (!g) return f;
    return [f, g](auto&&... args) {
      f(args...);
      g(args...);
    };
  };
  Callbacks c;
  if (a.stop_requested && b.stop_requested)
    c.stop_requested = [f = a.stop_requested, g = b.stop_requested] { return f() || g(); };
  else
    c.stop_requested = a.stop_requested ? a.stop_requested : b.stop_requested;
  c.on_start = both(a.on_start, b.on_start);
  c.on_step = both(a.on_step, b.on_step);
  c.on_evaluation = both(a.on_evaluation, b.on_evaluation);
  c.on_checkpoint = both(a.on_checkpoint, b.on_checkpoint);
  c.on_end = both(a.on_end, b.on_end);
  return c;
}

}  // namespace qkv::train
