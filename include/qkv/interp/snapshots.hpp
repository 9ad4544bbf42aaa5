#pragma once
/// @file
/// Heads forming during training: the attention weights and head scores of a fixed set of
/// held-out examples, recorded every `train.snapshot_every` steps into `<run>/snapshots.h5`
/// (layout in docs/instruments.md; readable with h5py). Recording runs the model in eval mode
/// without recording a tape and draws no random numbers: the training trajectory is the same,
/// bit for bit, with and without snapshots.

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/tensor/tensor.hpp"
#include "qkv/train/model.hpp"

namespace qkv::interp {

/// One attention layer of the snapshots.
struct SnapshotLayer {
  std::string name;  ///< dotted name ("blocks.0.attn")
  train::AttentionKind kind = train::AttentionKind::Self;
  /// (S, N, H, Tq, Tk): the weights of the N examples at each of the S steps.
  Array<float> weights;
  /// (S, H, K): the head scores (score_names() order) at each step, NaN where a score does not
  /// apply. The induction score uses N random repeated sequences (head_scores.hpp).
  Array<double> scores;
};

struct Snapshots {
  std::vector<std::int64_t> steps;  ///< S training steps, increasing
  IndexArray inputs;                ///< (N, T) the examples' inputs (seq2seq: the source)
  IndexArray decoder_inputs;        ///< (N, Tt) seq2seq only; shape (0) otherwise
  std::vector<std::string> input_labels;    ///< N*T token labels, row-major (interp::token_labels)
  std::vector<std::string> decoder_labels;  ///< N*Tt (seq2seq), else empty
  std::vector<std::string> score_names;     ///< K names: score_names()
  std::vector<SnapshotLayer> layers;        ///< model order
  std::size_t size() const { return steps.size(); }
};

/// Records snapshots of `examples` (the first N rows of a held-out batch) for `model`.
class SnapshotRecorder {
 public:
  SnapshotRecorder(train::TaskModel& model, const data::Task& task, const data::Batch& examples);
  /// Append the weights and scores at `step` (eval mode, no tape, no random numbers; the model's
  /// mode is restored). Steps must increase.
  void record(std::int64_t step);
  /// Keep the snapshots of steps <= `step` only (resuming from a checkpoint of that step).
  void truncate(std::int64_t step);
  /// Continue `loaded` (a snapshots file of the same model and examples; ValueError naming what
  /// differs otherwise).
  void adopt(Snapshots loaded);
  const Snapshots& snapshots() const { return snapshots_; }

 private:
  train::TaskModel& model_;
  const data::Task& task_;
  data::Batch examples_;
  Snapshots snapshots_;
};

/// Write `s` to `path` through a temporary file renamed into place (a reader never sees half a
/// file; a crash leaves the previous file). Throws io::IoError naming the file.
void save_snapshots(const std::string& path, const Snapshots& s);
/// Read a snapshots file; io::IoError naming the file and the dataset that is missing or has the
/// wrong shape.
Snapshots load_snapshots(const std::string& path);

}  // namespace qkv::interp
