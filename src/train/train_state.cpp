#include "qkv/train/train_state.hpp"

#include <algorithm>
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
};

const std::vector<Scalar>& scalars() {
  static const std::vector<Scalar> table = {
      {"data_position", [](const TrainState& s) { return double(s.data_position); },
       [](TrainState& s, double v) { s.data_position = std::uint64_t(v); }},
      {"best_token_accuracy", [](const TrainState& s) { return s.best.token_accuracy; },
       [](TrainState& s, double v) { s.best.token_accuracy = v; }},
      {"best_sequence_accuracy", [](const TrainState& s) { return s.best.sequence_accuracy; },
       [](TrainState& s, double v) { s.best.sequence_accuracy = v; }},
      {"best_loss", [](const TrainState& s) { return s.best.loss; }, [](TrainState& s, double v) { s.best.loss = v; }},
      {"steps_to_target", [](const TrainState& s) { return double(s.steps_to_target); },
       [](TrainState& s, double v) { s.steps_to_target = std::int64_t(v); }},
      {"train_loss_sum", [](const TrainState& s) { return s.train_loss_sum; },
       [](TrainState& s, double v) { s.train_loss_sum = v; }},
      {"train_loss_steps", [](const TrainState& s) { return double(s.train_loss_steps); },
       [](TrainState& s, double v) { s.train_loss_steps = std::int64_t(v); }},
      {"train_correct", [](const TrainState& s) { return double(s.train_correct); },
       [](TrainState& s, double v) { s.train_correct = std::int64_t(v); }},
      {"train_counted", [](const TrainState& s) { return double(s.train_counted); },
       [](TrainState& s, double v) { s.train_counted = std::int64_t(v); }},
      {"last_eval_token_accuracy", [](const TrainState& s) { return s.last_eval.token_accuracy; },
       [](TrainState& s, double v) { s.last_eval.token_accuracy = v; }},
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
    s.set(state, it->second);
  }
  return state;
}

void save_vocabulary(const data::Task& task, io::Checkpoint& c) {
  if (const data::Tokenizer* t = task.tokenizer()) {
    c.tokenizer = data::name(t->kind());
    c.vocab = t->to_vocab();
  }
}

std::optional<data::Tokenizer> stored_tokenizer(const io::Checkpoint& c, const std::string& path) {
  if (c.tokenizer.empty()) return std::nullopt;
  try {
    return data::Tokenizer::from_vocab(data::parse_tokenizer(c.tokenizer), c.vocab);
  } catch (const ValueError& e) {
    throw io::IoError(path + ": /data: " + e.what());
  }
}

void check_vocabulary(const data::Task& task, const io::Checkpoint& c, const std::string& path) {
  const data::Tokenizer* t = task.tokenizer();
  if (t && (c.tokenizer != data::name(t->kind()) || c.vocab != t->to_vocab()))
    throw ValueError("--resume " + path + ": the corpus gives another vocabulary than the checkpoint's (" +
                     std::to_string(t->to_vocab().size()) + " vs " + std::to_string(c.vocab.size()) +
                     " characters): task.path must name the same text");
}

}  // namespace qkv::train
