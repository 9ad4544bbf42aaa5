#pragma once
/// @file
/// The attention viewer's page (docs/viewer.md): every head of every attention layer of a model on
/// one input, optionally with training snapshots, as one self-contained HTML file. The data is
/// JSON, format "qkv-viewer" version 1; each head's weights (Tq, Tk) travel as base64 of the
/// bytes round(255 w), row-major.

#include <string>

#include "qkv/data/tasks.hpp"
#include "qkv/interp/snapshots.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

/// What a page shows besides the model: its title and, optionally, training snapshots (their
/// held-out example `snapshot_example` of N).
struct ViewerContent {
  std::string title;
  const Snapshots* snapshots = nullptr;
  std::size_t snapshot_example = 0;
  /// The scores and labels to show, one per head in model order (e.g. head_scores on the test
  /// split, what `qkv heads` prints); null: the pattern scores of this one input.
  const std::vector<HeadScores>* scores = nullptr;
};

/// The viewer's JSON for `row` (a batch of one example) run through `model` in eval mode without
/// recording (the model's mode is restored): per attention layer (model order) its name, kind,
/// query and key token labels, and per head its weights, its scores and label: content.scores
/// when given, else its pattern scores on this input plus the model's induction score
/// (head_scores.hpp; NaN scores are left out).
/// `options` gives the model summary (arch, d_model, layers, heads, head_dim). Snapshots must
/// come from the same model (the layer names, kinds and head counts are checked: ValueError
/// naming the layer otherwise). ShapeError when `row` is not one example.
std::string viewer_json(model::TaskModel& model, const data::Task& task, const nn::TransformerOptions& options,
                        const data::Batch& row, const ViewerContent& content = {});

/// share/viewer/viewer.html as it was when qkv was built (compiled in: the page needs no file
/// at run time).
const std::string& viewer_template();

/// `html_template` with its one "/*QKV_DATA*/" replaced by `json` (which must follow the embedding
/// rule of docs/viewer.md, as viewer_json's does). ValueError when the template holds the
/// placeholder not exactly once.
std::string viewer_page(const std::string& json, const std::string& html_template = viewer_template());

}  // namespace qkv::interp
