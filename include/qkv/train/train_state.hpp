#pragma once
/// @file
/// What a run is, apart from its model and optimizer: everything --resume restores.

#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "qkv/io/checkpoint.hpp"
#include "qkv/model/evaluate.hpp"

namespace qkv::train {

struct TrainState {
  std::int64_t step = 0;                         ///< optimizer steps done
  std::uint64_t data_position = 0;               ///< next training example (data::Dataset)
  std::array<std::uint64_t, 2> dropout_rng{};    ///< (seed, offset) of the dropout generator
  model::EvalMetrics best{NAN, -1, -1};                 ///< best held-out metrics so far (by token accuracy)
  model::EvalMetrics last_eval{NAN, -1, -1};            ///< the last evaluation
  std::int64_t steps_to_target = -1;             ///< first evaluated step reaching the target, -1 never
  double train_loss_sum = 0;                     ///< training loss summed since the last evaluation ...
  std::int64_t train_loss_steps = 0;             ///< ... over this many steps
  std::int64_t train_correct = 0, train_counted = 0;  ///< training-token argmax hits since then

  /// Into a checkpoint: step, the dropout stream under /rng/dropout, the rest as /train
  /// attributes (names in docs/checkpoint.md).
  void save(io::Checkpoint& checkpoint) const;
  /// Back from a checkpoint; throws IoError naming `path` and the missing attribute.
  static TrainState load(const io::Checkpoint& checkpoint, const std::string& path);
};

}  // namespace qkv::train
