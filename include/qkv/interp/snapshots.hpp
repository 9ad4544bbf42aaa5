#pragma once
/// @file
/// Heads forming during training: the attention weights and head scores of a fixed set of
/// held-out examples, recorded every `train.snapshot_every` steps into `<run>/snapshots.h5`
/// (layout in docs/snapshots.md; readable with h5py). Recording runs the model in eval mode
/// without recording a tape and draws no random numbers: the training trajectory is the same,
/// bit for bit, with and without snapshots (tests/interp/test_snapshots.cpp).
///
/// Letters: S snapshots (training steps), N examples, H heads, Tq/Tk query/key lengths, T the
/// input length, Tt the target length (seq2seq), K score names.

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/tensor/tensor.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

/// One attention layer of the snapshots (-> /layers/<i> of the file).
struct SnapshotLayer {
  std::string name;  ///< dotted name ("blocks.0.attn")
  model::AttentionKind kind = model::AttentionKind::Self;
  /// (S, N, H, Tq, Tk): the weights of the N examples at each of the S steps; each row over Tk
  /// sums to 1 (causal rows put 0 on the future keys).
  Array<float> weights;
  /// (S, H, K): the head scores (score_names() order) at each step, NaN where a score does not
  /// apply. The induction score uses N random repeated sequences (head_scores.hpp, seed 0); the
  /// other scores are pattern_scores over the N examples.
  Array<double> scores;
};

/// Everything a snapshots file holds.
struct Snapshots {
  std::vector<std::int64_t> steps;  ///< S training steps, increasing (0 = before the first update)
  IndexArray inputs;                ///< (N, T) the examples' inputs (seq2seq: the source)
  IndexArray decoder_inputs;        ///< (N, Tt) seq2seq only; shape (0) otherwise
  std::vector<std::string> input_labels;    ///< N*T token labels, row-major (interp::token_labels)
  std::vector<std::string> decoder_labels;  ///< N*Tt (seq2seq), else empty
  std::vector<std::string> score_names;     ///< K names: score_names()
  std::vector<SnapshotLayer> layers;        ///< model order (model::attention_layers)
  std::size_t size() const { return steps.size(); }
};

/// Records snapshots of `examples` (the first N rows of a held-out batch) for `model`.
/// Holds references to `model` and `task`, which must outlive it.
class SnapshotRecorder {
 public:
  /// Sets up the layers with S = 0 (weights (0, N, H, Tq, Tk), scores (0, H, K)) without running
  /// the model. ValueError when `examples` is empty.
  SnapshotRecorder(model::TaskModel& model, const data::Task& task, const data::Batch& examples);
  /// Append the weights and scores at `step` (eval mode, no tape, no random numbers; the model's
  /// mode is restored, also when an exception passes). Steps must increase (ValueError otherwise).
  void record(std::int64_t step);
  /// record(step) when `step` is a multiple of `every` (> 0) or `final` is set, unless the last
  /// recorded step is `step` already (a resumed run meets its checkpoint's step again). Returns
  /// whether it recorded.
  bool record_if_due(std::int64_t step, std::int64_t every, bool final = false);
  /// Keep the snapshots of steps <= `step` only (resuming from a checkpoint of that step).
  void truncate(std::int64_t step);
  /// Continue `loaded` (a snapshots file of the same model and examples; ValueError naming what
  /// differs otherwise: the examples, the score names, or a layer's name, kind or shape).
  void adopt(Snapshots loaded);
  /// Resuming at `step`: load the snapshots file at `path` if it exists, truncate it to steps <=
  /// `step` and adopt it. A file that cannot be read or does not fit (another model, other
  /// examples) is renamed to "<path>.damaged-<n>" (n = 1, 2, ...) and the recorder starts empty.
  /// Never throws for the file's sake. Returns a note for the user ("" when the file was continued
  /// or there was none).
  std::string resume(const std::string& path, std::int64_t step);
  const Snapshots& snapshots() const { return snapshots_; }

 private:
  model::TaskModel& model_;
  const data::Task& task_;
  data::Batch examples_;
  Snapshots snapshots_;
};

/// Write `s` to `path` through a temporary file in the same directory ("<path>.tmp-<pid>",
/// fsync'ed, then renamed into place): a reader never sees half a file and a crash leaves the
/// previous file. The file is HDF5 with a 512-byte user block holding a text header with a
/// CRC-64/XZ of the rest (docs/snapshots.md). Throws io::IoError naming the file; ShapeError when
/// `s` is inconsistent (a layer's first dimensions differ from (S, N), a label count from N*T).
void save_snapshots(const std::string& path, const Snapshots& s);
/// Read a snapshots file. The header and checksum are verified before HDF5 parses a byte (so a
/// truncated or damaged file gives an error, never a crash); then every dataset's type and shape.
/// Throws io::IoError "load_snapshots: <path>: <what>" naming the dataset or attribute that is
/// missing or has the wrong shape or type.
Snapshots load_snapshots(const std::string& path);

/// Whether `s` was recorded from a model of `model`'s shape: the same attention layers in model
/// order (names), kinds and head counts. ValueError naming the first layer that differs ("...:
/// snapshots of another model") otherwise; the studio's saved page (qkv view) shows snapshots
/// only of the model it shows.
void check_snapshots_fit(const Snapshots& s, model::TaskModel& model);

}  // namespace qkv::interp
