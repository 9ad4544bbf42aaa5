#include "qkv/interp/snapshots.hpp"

#include <algorithm>
#include <filesystem>

#include "qkv/autograd/tape.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/nn/activation_cache.hpp"

namespace qkv::interp {
namespace {

// The first `rows` rows of `a` (rows along axis 0) in an array of `rows` rows; rows past the end
// of `a` are left for the caller to fill.
template <class T>
Array<T> resized_rows(const Array<T>& a, std::size_t rows) {
  Shape s(a.shape().begin(), a.shape().end());
  const std::size_t row_size = s[0] ? a.size() / s[0] : numel(Shape(s.begin() + 1, s.end()));
  const std::size_t keep = std::min(rows, s[0]);
  s[0] = rows;
  Array<T> out = Array<T>::from_shape(s);
  std::copy(a.data(), a.data() + keep * row_size, out.data());
  return out;
}

// `a` with one more row along axis 0, copied from `row`. The whole array is copied (no spare
// capacity): recording is rare next to training steps (docs/snapshots.md, cost).
template <class T>
void append_row(Array<T>& a, const T* row) {
  const std::size_t S = a.shape()[0];
  Array<T> grown = resized_rows(a, S + 1);
  const std::size_t row_size = grown.size() / (S + 1);
  std::copy(row, row + row_size, grown.data() + S * row_size);
  a = std::move(grown);
}

std::vector<std::string> labels(const data::Task& task, const IndexArray& ids) {
  std::vector<std::string> out;
  if (ids.dimension() != 2) return out;
  for (std::size_t r = 0; r < ids.shape()[0]; ++r) {
    std::vector<std::string> row = token_labels(task, ids, r);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

bool same_ids(const IndexArray& a, const IndexArray& b) {
  return a.shape() == b.shape() && std::equal(a.begin(), a.end(), b.begin());
}

// The shape of one step: "(N, H, Tq, Tk)" of weights (S, N, H, Tq, Tk), "(H, K)" of scores.
template <class S>
std::string per_step(const S& s) { return shape_str(Shape(s.begin() + 1, s.end())); }

}  // namespace

SnapshotRecorder::SnapshotRecorder(model::TaskModel& model, const data::Task& task, const data::Batch& examples)
    : model_(model), task_(task), examples_(examples) {
  const std::size_t N = examples.size();
  if (N == 0) throw ValueError("snapshots: no examples to record (the held-out set is empty)");
  const bool s2s = task.seq2seq() && examples.decoder_inputs.dimension() == 2;
  snapshots_.inputs = examples.inputs;
  snapshots_.decoder_inputs = s2s ? examples.decoder_inputs : IndexArray::from_shape({0});
  snapshots_.input_labels = labels(task, examples.inputs);
  if (s2s) snapshots_.decoder_labels = labels(task, examples.decoder_inputs);
  snapshots_.score_names = score_names(&task);
  const std::size_t K = snapshots_.score_names.size();
  for (auto& [name, layer] : model::attention_layers(model)) {
    const auto [queries, keys] = model.attention_tokens(*layer, examples);
    SnapshotLayer l;
    l.name = name;
    l.kind = model.attention_kind(*layer);
    l.weights = Array<float>::from_shape({0, N, layer->num_heads(), queries->shape()[1], keys->shape()[1]});
    l.scores = Array<double>::from_shape({0, layer->num_heads(), K});
    snapshots_.layers.push_back(std::move(l));
  }
}

void SnapshotRecorder::record(std::int64_t step) {
  if (!snapshots_.steps.empty() && step <= snapshots_.steps.back())
    throw ValueError("snapshots: step " + std::to_string(step) + " recorded after step " +
                     std::to_string(snapshots_.steps.back()) + "; steps must increase");
  const auto layers = model::attention_layers(model_);
  if (layers.size() != snapshots_.layers.size())
    throw ValueError("snapshots: the model has " + std::to_string(layers.size()) + " attention layers, the snapshots " +
                     std::to_string(snapshots_.layers.size()));
  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(model_.module());
  // One forward of the N examples with hooks that only read (bitwise the same forward), then the
  // induction score's own forward on repeated random tokens from Generator(hash64(0, row)): the
  // default generator (dropout) is never drawn from.
  const nn::ActivationCache<float> cache =
      nn::run_with_cache(model_.module(), [&] { model_.logits(examples_); }, {"*.hook_pattern"});
  std::vector<LayerPattern> patterns;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Array<float>& w = cache[layers[l].first + ".hook_pattern"];
    const auto& stored = snapshots_.layers[l].weights.shape();  // (S, N, H, Tq, Tk)
    const Shape want(stored.begin() + 1, stored.end());
    if (Shape(w.shape().begin(), w.shape().end()) != want)
      throw ShapeError("snapshots: " + layers[l].first + ".hook_pattern has shape " + shape_str(w.shape()) +
                       ", expected (N, H, Tq, Tk) = " + shape_str(want));
    patterns.push_back({layers[l].first, snapshots_.layers[l].kind, &w});
  }
  const std::vector<HeadScores> scores = pattern_scores(patterns, task_, examples_);
  const std::vector<std::vector<double>> induction = induction_scores(model_, task_, examples_.size(), 0);

  const std::vector<std::string>& names = snapshots_.score_names;
  std::vector<double> row;
  for (std::size_t l = 0, k = 0; l < layers.size(); ++l) {
    SnapshotLayer& layer = snapshots_.layers[l];
    const std::size_t H = layer.scores.shape()[1];
    row.assign(H * names.size(), 0.0);
    for (std::size_t h = 0; h < H; ++h, ++k) {
      HeadScores s = scores.at(k);
      if (l < induction.size() && h < induction[l].size()) s.induction = induction[l][h];
      for (std::size_t j = 0; j < names.size(); ++j) row[h * names.size() + j] = score(s, names[j]);
    }
    append_row(layer.weights, patterns[l].weights->data());
    append_row(layer.scores, row.data());
  }
  snapshots_.steps.push_back(step);
}

bool SnapshotRecorder::record_if_due(std::int64_t step, std::int64_t every, bool final) {
  if (!snapshots_.steps.empty() && snapshots_.steps.back() == step) return false;
  if (!final && (every <= 0 || step % every != 0)) return false;
  record(step);
  return true;
}

void SnapshotRecorder::truncate(std::int64_t step) {
  auto& steps = snapshots_.steps;
  const std::size_t keep = std::size_t(std::upper_bound(steps.begin(), steps.end(), step) - steps.begin());
  if (keep == steps.size()) return;
  steps.resize(keep);
  for (auto& l : snapshots_.layers) {
    l.weights = resized_rows(l.weights, keep);
    l.scores = resized_rows(l.scores, keep);
  }
}

void SnapshotRecorder::adopt(Snapshots loaded) {
  const Snapshots& mine = snapshots_;
  auto differ = [](const std::string& what) {
    throw ValueError("snapshots: the file does not continue this run: " + what);
  };
  if (!same_ids(loaded.inputs, mine.inputs))
    differ("other examples in /examples/inputs (" + shape_str(loaded.inputs.shape()) + " in the file, " +
           shape_str(mine.inputs.shape()) + " here: another task, seed or train.snapshot_examples?)");
  if (!same_ids(loaded.decoder_inputs, mine.decoder_inputs)) differ("other examples in /examples/decoder_inputs");
  if (loaded.score_names != mine.score_names) differ("other /score_names");
  if (loaded.layers.size() != mine.layers.size())
    differ(std::to_string(loaded.layers.size()) + " layers in the file, " + std::to_string(mine.layers.size()) + " here");
  for (std::size_t l = 0; l < mine.layers.size(); ++l) {
    const SnapshotLayer &a = loaded.layers[l], &b = mine.layers[l];
    const std::string where = "/layers/" + std::to_string(l);
    if (a.name != b.name) differ(where + " is '" + a.name + "' in the file, '" + b.name + "' here");
    if (a.kind != b.kind)
      differ(where + " (" + b.name + ") is " + model::attention_kind_name(a.kind) + " in the file, " +
             model::attention_kind_name(b.kind) + " here");
    if (per_step(a.weights.shape()) != per_step(b.weights.shape()) || per_step(a.scores.shape()) != per_step(b.scores.shape()))
      differ(where + " (" + b.name + "): weights per step " + per_step(a.weights.shape()) + " in the file, " +
             per_step(b.weights.shape()) + " here");
  }
  // The examples are equal, so their labels are too; keep this run's.
  snapshots_.steps = std::move(loaded.steps);
  for (std::size_t l = 0; l < mine.layers.size(); ++l) {
    snapshots_.layers[l].weights = std::move(loaded.layers[l].weights);
    snapshots_.layers[l].scores = std::move(loaded.layers[l].scores);
  }
}

std::string SnapshotRecorder::resume(const std::string& path, std::int64_t step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string from_now = "recording snapshots from step " + std::to_string(step) + " on";
  if (!fs::exists(path, ec)) return "no " + path + " to continue: " + from_now;
  try {
    adopt(load_snapshots(path));
    truncate(step);
    return "";
  } catch (const std::exception& e) {
    // adopt() changes nothing before its checks pass, so the recorder is still empty here.
    std::string aside;
    for (int n = 1; aside.empty() || fs::exists(aside, ec); ++n) aside = path + ".damaged-" + std::to_string(n);
    fs::rename(path, aside, ec);
    return std::string("cannot continue the snapshots: ") + e.what() + "; " +
           (ec ? "could not move the file aside (" + ec.message() + "), it will be overwritten"
               : "moved the file to " + aside) +
           "; " + from_now;
  }
}

void check_snapshots_fit(const Snapshots& s, model::TaskModel& model) {
  const auto layers = model::attention_layers(model);
  if (s.layers.size() != layers.size())
    throw ValueError("snapshots: the file holds " + std::to_string(s.layers.size()) + " attention layers, the model has " +
                     std::to_string(layers.size()) + ": snapshots of another model");
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const SnapshotLayer& sl = s.layers[l];
    const std::size_t H = sl.weights.dimension() == 5 ? sl.weights.shape()[2] : 0;
    const auto& [name, mha] = layers[l];
    const model::AttentionKind kind = model.attention_kind(*mha);
    if (sl.name != name || sl.kind != kind || H != mha->num_heads())
      throw ValueError("snapshots: layer " + std::to_string(l) + " is " + sl.name + " (" + model::attention_kind_name(sl.kind) +
                       ", " + std::to_string(H) + " heads), the model's is " + name + " (" +
                       model::attention_kind_name(kind) + ", " + std::to_string(mha->num_heads()) +
                       " heads): snapshots of another model");
  }
}

}  // namespace qkv::interp
