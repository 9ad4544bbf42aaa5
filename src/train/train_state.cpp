#include "qkv/train/train_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

namespace qkv::train {
namespace {

// The /train attributes, in file order, each bound to its field (one table for both ways).
struct Scalar {
  const char* name;
  std::function<double(const TrainState&)> get;
  std::function<void(TrainState&, double)> set;
  /// "" when a stored value is possible at checkpoint step `step`, else what was expected.
  std::string (*check)(double value, std::int64_t step);
};

std::string number_text(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// A count stored as a double: a whole number in [lo, 2^53] (every such integer is exact).
std::string whole(double v, double lo) {
  return std::isfinite(v) && v == std::floor(v) && v >= lo && v <= 9007199254740992.0
             ? ""
             : "a whole number >= " + number_text(lo);
}
std::string count(double v, std::int64_t) { return whole(v, 0); }
std::string target_step(double v, std::int64_t step) {
  if (!whole(v, -1).empty()) return "a whole number >= -1 (-1: never)";
  return v <= double(step) ? "" : "at most the checkpoint's step " + std::to_string(step);
}
// Accuracies: -1 before the first evaluation, else in [0, 1].
std::string accuracy(double v, std::int64_t) { return v == -1 || (v >= 0 && v <= 1) ? "" : "-1 (not measured) or in [0, 1]"; }
// Losses: NaN before the first evaluation, else finite and >= 0.
std::string loss(double v, std::int64_t) { return std::isnan(v) || (std::isfinite(v) && v >= 0) ? "" : "NaN (not measured) or a finite loss >= 0"; }
std::string loss_sum(double v, std::int64_t) { return std::isfinite(v) && v >= 0 ? "" : "a finite sum of losses >= 0"; }

const std::vector<Scalar>& scalars() {
  static const std::vector<Scalar> table = {
      {"data_position", [](const TrainState& s) { return double(s.data_position); },
       [](TrainState& s, double v) { s.data_position = std::uint64_t(v); }, count},
      {"best_token_accuracy", [](const TrainState& s) { return s.best.token_accuracy; },
       [](TrainState& s, double v) { s.best.token_accuracy = v; }, accuracy},
      {"best_sequence_accuracy", [](const TrainState& s) { return s.best.sequence_accuracy; },
       [](TrainState& s, double v) { s.best.sequence_accuracy = v; }, accuracy},
      {"best_loss", [](const TrainState& s) { return s.best.loss; }, [](TrainState& s, double v) { s.best.loss = v; }, loss},
      {"steps_to_target", [](const TrainState& s) { return double(s.steps_to_target); },
       [](TrainState& s, double v) { s.steps_to_target = std::int64_t(v); }, target_step},
      {"train_loss_sum", [](const TrainState& s) { return s.train_loss_sum; },
       [](TrainState& s, double v) { s.train_loss_sum = v; }, loss_sum},
      {"train_loss_steps", [](const TrainState& s) { return double(s.train_loss_steps); },
       [](TrainState& s, double v) { s.train_loss_steps = std::int64_t(v); }, count},
      {"train_correct", [](const TrainState& s) { return double(s.train_correct); },
       [](TrainState& s, double v) { s.train_correct = std::int64_t(v); }, count},
      {"train_counted", [](const TrainState& s) { return double(s.train_counted); },
       [](TrainState& s, double v) { s.train_counted = std::int64_t(v); }, count},
      {"last_eval_token_accuracy", [](const TrainState& s) { return s.last_eval.token_accuracy; },
       [](TrainState& s, double v) { s.last_eval.token_accuracy = v; }, accuracy},
  };
  return table;
}

}  // namespace

void TrainState::save(io::Checkpoint& c) const {
  c.step = step;
  c.rng.push_back({"dropout", dropout_rng});
  for (auto& s : scalars()) c.scalars.emplace_back(s.name, s.get(*this));
}

TrainState TrainState::load(const io::Checkpoint& c, const std::string& path) {
  TrainState state;
  state.step = c.step;
  auto rng = std::find_if(c.rng.begin(), c.rng.end(), [](auto& kv) { return kv.first == "dropout"; });
  if (rng == c.rng.end()) throw io::IoError(path + ": the checkpoint has no /rng/dropout stream");
  state.dropout_rng = rng->second;
  for (auto& s : scalars()) {
    auto it = std::find_if(c.scalars.begin(), c.scalars.end(), [&](auto& kv) { return kv.first == s.name; });
    if (it == c.scalars.end()) throw io::IoError(path + ": /train has no attribute '" + s.name + "'");
    if (const std::string bad = s.check(it->second, c.step); !bad.empty())
      throw io::IoError(path + ": /train attribute '" + s.name + "' is " + number_text(it->second) + ": expected " + bad);
    s.set(state, it->second);
  }
  return state;
}

}  // namespace qkv::train
