#include "qkv/interp/viewer.hpp"

#include <algorithm>
#include <cmath>

#include "json.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/nn/activation_cache.hpp"

namespace qkv::interp {
namespace {

constexpr const char* kPlaceholder = "/*QKV_DATA*/";

// base64 of round(255 w) for the (Tq, Tk) weights at `w` (clamped to [0, 1]).
std::string weight_bytes(const float* w, std::size_t n) {
  std::string bytes(n, '\0');
  for (std::size_t i = 0; i < n; ++i)
    bytes[i] = char(static_cast<unsigned char>(std::lround(255.0 * std::clamp(double(w[i]), 0.0, 1.0))));
  return base64(reinterpret_cast<const unsigned char*>(bytes.data()), n);
}

// {"name": value, ...} over the finite scores.
std::string scores_object(const std::vector<std::string>& names, const std::vector<double>& values) {
  std::string out = "{";
  for (std::size_t k = 0; k < names.size(); ++k)
    if (std::isfinite(values[k])) out += (out.size() > 1 ? "," : "") + json_string(names[k]) + ":" + json_number(values[k]);
  return out + "}";
}

std::vector<double> score_values(const HeadScores& s, const std::vector<std::string>& names) {
  std::vector<double> v;
  for (const std::string& n : names) v.push_back(score(s, n));
  return v;
}

// The model summary line's numbers.
std::string model_object(const nn::TransformerOptions& o) {
  const std::size_t H = o.attn.num_heads;
  const std::size_t D = o.attn.head_dim ? o.attn.head_dim : (H ? o.d_model / H : 0);
  return "{\"arch\":" + json_string(nn::arch_names().name(o.arch)) + ",\"d_model\":" + std::to_string(o.d_model) +
         ",\"layers\":" + std::to_string(o.layers) + ",\"heads\":" + std::to_string(H) +
         ",\"head_dim\":" + std::to_string(D) + "}";
}

// Row `r` of the labels of an (N, T) id array stored row-major.
std::vector<std::string> label_row(const std::vector<std::string>& labels, const IndexArray& ids, std::size_t r) {
  const std::size_t T = ids.shape()[1];
  return std::vector<std::string>(labels.begin() + long(r * T), labels.begin() + long((r + 1) * T));
}

// The snapshots section: example `e` of each layer at every step.
std::string snapshots_object(const Snapshots& s, std::size_t e, bool seq2seq) {
  const std::size_t S = s.size(), N = s.inputs.shape()[0];
  if (e >= N)
    throw ValueError("snapshots: example " + std::to_string(e) + " asked for, the file holds " + std::to_string(N) +
                     " (0.." + std::to_string(N - 1) + ")");
  std::vector<double> steps(s.steps.begin(), s.steps.end());
  std::string out = "{\"steps\":" + json_array(steps) + ",\"example\":" +
                    json_string("held-out example " + std::to_string(e)) + ",\"layers\":[";
  const std::vector<std::string> input = label_row(s.input_labels, s.inputs, e);
  const std::vector<std::string> decoder = seq2seq ? label_row(s.decoder_labels, s.decoder_inputs, e) : input;
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const SnapshotLayer& layer = s.layers[l];
    const auto& sh = layer.weights.shape();  // (S, N, H, Tq, Tk)
    const std::size_t H = sh[2], Tq = sh[3], Tk = sh[4], K = s.score_names.size();
    const bool decoder_queries = seq2seq && layer.kind != model::AttentionKind::Self;
    const bool decoder_keys = seq2seq && layer.kind == model::AttentionKind::Causal;
    out += std::string(l ? "," : "") + "{\"name\":" + json_string(layer.name) + ",\"kind\":" +
           json_string(model::attention_kind_name(layer.kind)) + ",\"query_tokens\":" +
           json_array(decoder_queries ? decoder : input) + ",\"key_tokens\":" + json_array(decoder_keys ? decoder : input) +
           ",\"heads\":[";
    for (std::size_t h = 0; h < H; ++h) {
      std::string weights = "[", scores = "[";
      for (std::size_t t = 0; t < S; ++t) {
        const float* w = layer.weights.data() + (((t * N + e) * H + h) * Tq) * Tk;
        weights += (t ? ",\"" : "\"") + weight_bytes(w, Tq * Tk) + "\"";
        const double* k = layer.scores.data() + (t * H + h) * K;
        scores += (t ? "," : "") + scores_object(s.score_names, std::vector<double>(k, k + K));
      }
      out += std::string(h ? "," : "") + "{\"weights\":" + weights + "],\"scores\":" + scores + "]}";
    }
    out += "]}";
  }
  return out + "]}";
}

// The snapshots must describe this model's attention layers.
void check_snapshots(const Snapshots& s, const std::vector<std::pair<std::string, nn::MultiHeadAttention<float>*>>& layers,
                     const model::TaskModel& model) {
  if (s.layers.size() != layers.size())
    throw ValueError("snapshots: the file holds " + std::to_string(s.layers.size()) + " attention layers, the model has " +
                     std::to_string(layers.size()));
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const SnapshotLayer& sl = s.layers[l];
    const std::size_t H = sl.weights.dimension() == 5 ? sl.weights.shape()[2] : 0;
    if (sl.name != layers[l].first || sl.kind != model.attention_kind(*layers[l].second) ||
        H != layers[l].second->num_heads())
      throw ValueError("snapshots: layer " + std::to_string(l) + " is " + sl.name + " (" +
                       model::attention_kind_name(sl.kind) + ", " + std::to_string(H) + " heads), the model's is " +
                       layers[l].first + " (" + model::attention_kind_name(model.attention_kind(*layers[l].second)) +
                       ", " + std::to_string(layers[l].second->num_heads()) + " heads): snapshots of another model");
  }
}

}  // namespace

std::string viewer_json(model::TaskModel& model, const data::Task& task, const nn::TransformerOptions& options,
                        const data::Batch& row, const ViewerContent& content) {
  if (row.size() != 1)
    throw ShapeError("viewer_json: expected a batch of one example, found " + std::to_string(row.size()));
  const auto layers = model::attention_layers(model);
  if (content.snapshots) check_snapshots(*content.snapshots, layers, model);

  nn::ActivationCache<float> cache;
  std::vector<HeadScores> scores;
  std::vector<std::vector<double>> induction;
  {
    NoGradGuard no_grad;
    nn::EvalGuard<float> eval(model.module());
    cache = nn::run_with_cache(model.module(), [&] { model.logits(row); }, {"*.hook_pattern"});
    std::vector<LayerPattern> patterns;
    for (auto& [name, layer] : layers) patterns.push_back({name, model.attention_kind(*layer), &cache[name + ".hook_pattern"]});
    scores = pattern_scores(patterns, task, row);
    induction = induction_scores(model, task, 16, 0);
  }

  const std::vector<std::string> names = score_names(&task);
  std::vector<double> baselines;
  for (auto& b : role_baselines(task, row)) baselines.push_back(b.share);
  std::string out = "{\"format\":\"qkv-viewer\",\"version\":1,\"title\":" + json_string(content.title) +
                    ",\"model\":" + model_object(options) + ",\"layers\":[";
  std::size_t flat = 0;  // index into scores: layers in order, heads in order
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto& [name, layer] = layers[l];
    const Array<float>& w = cache[name + ".hook_pattern"];  // (1, H, Tq, Tk)
    const std::size_t H = w.shape()[1], Tq = w.shape()[2], Tk = w.shape()[3];
    const auto [queries, keys] = model.attention_tokens(*layer, row);
    out += std::string(l ? "," : "") + "{\"name\":" + json_string(name) + ",\"kind\":" +
           json_string(model::attention_kind_name(model.attention_kind(*layer))) + ",\"query_tokens\":" +
           json_array(token_labels(task, *queries, 0)) + ",\"key_tokens\":" + json_array(token_labels(task, *keys, 0)) +
           ",\"heads\":[";
    for (std::size_t h = 0; h < H; ++h, ++flat) {
      HeadScores& s = scores[flat];
      if (content.scores) {
        if (flat >= content.scores->size())
          throw ValueError("viewer_json: " + std::to_string(content.scores->size()) + " head scores for a model with more heads");
        s = (*content.scores)[flat];
      } else {
        if (!induction.empty()) s.induction = induction[l][h];
        s.label = head_label(s, {}, baselines);
      }
      out += std::string(h ? "," : "") + "{\"weights\":\"" + weight_bytes(w.data() + h * Tq * Tk, Tq * Tk) +
             "\",\"scores\":" + scores_object(names, score_values(s, names)) + ",\"label\":" + json_string(s.label) + "}";
    }
    out += "]}";
  }
  out += "]";
  if (content.snapshots) out += ",\"snapshots\":" + snapshots_object(*content.snapshots, content.snapshot_example, task.seq2seq());
  return out + "}";
}

std::string viewer_page(const std::string& json, const std::string& html_template) {
  const std::size_t at = html_template.find(kPlaceholder);
  if (at == std::string::npos || html_template.find(kPlaceholder, at + 1) != std::string::npos)
    throw ValueError(std::string("viewer template: expected exactly one ") + kPlaceholder + " placeholder");
  return html_template.substr(0, at) + json + html_template.substr(at + std::string(kPlaceholder).size());
}

}  // namespace qkv::interp
