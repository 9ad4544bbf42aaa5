#include "qkv/interp/analyze.hpp"

#include "qkv/autograd/tape.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/io/json.hpp"
#include "qkv/nn/activation_cache.hpp"

namespace qkv::interp {
namespace {

constexpr std::size_t kMaxTopK = 50;

// The row's arrays as bytes: the intact score is reused while the row stays the same.
std::string row_key(const data::Batch& row) {
  std::string key;
  for (const IndexArray* a : {&row.inputs, &row.targets, &row.decoder_inputs})
    key.append(reinterpret_cast<const char*>(a->data()), a->size() * sizeof(Index)).push_back('|');
  return key;
}

model::Score score_of(model::TaskModel& m, const data::Batch& row, const Array<float>& logits) {
  return model::score_rows(logits, row.targets, m.predict(row, logits));
}

void write_score(json::Writer& w, const model::Score& s) {
  if (s.scored) w.member("loss", s.loss()).member("scored", s.scored).member("token_accuracy", s.accuracy());
  else w.key("loss").null().member("scored", std::size_t(0)).key("token_accuracy").null();
}

void write_top(json::Writer& w, const data::Task& task, const std::vector<model::ClassProbability>& top) {
  w.open('[');
  for (auto& c : top) w.open('{').member("id", std::int64_t(c.id)).member("token", model::class_label(task, c.id)).member("p", c.p).close('}');
  w.close(']');
}

void write_strings(json::Writer& w, const std::vector<std::string>& xs) {
  w.open('[');
  for (auto& x : xs) w.value(x);
  w.close(']');
}

}  // namespace

AnalyzeResult analyze(model::LoadedModel& l, const AnalyzeRequest& r, AblationCache* cache) {
  if (r.top_k < 1 || r.top_k > kMaxTopK)
    field_error("top_k", "expected a whole number in [1, " + std::to_string(kMaxTopK) + "], found " + std::to_string(r.top_k));
  model::TaskModel& m = *l.model;
  const data::Task& task = *l.task;
  model::InputRow in;
  with_prefix("input.", [&] { in = model::input_row(l, r.input); });
  check_heads(r.ablate, heads_per_layer(m), "ablate");
  AblationCache local;
  AblationCache& c = cache ? *cache : local;
  const std::vector<Array<float>>* means =
      r.mode == AblationMode::Mean && !r.ablate.empty() ? &cached_means(l, c) : nullptr;

  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(m.module());
  AnalyzeResult out;
  if (!r.ablate.empty()) {
    const std::string key = row_key(in.row);
    if (key != c.row_key) c.row_score = score_of(m, in.row, m.logits(in.row).value()), c.row_key = key;
    out.intact = c.row_score;
  }
  HeadAblation ablation(m, r.ablate, r.ablate.empty() ? AblationMode::Zero : r.mode, means);
  Array<float> logits;
  nn::ActivationCache<float> patterns =
      nn::run_with_cache(m.module(), [&] { logits = m.logits(in.row).value(); }, {"*.hook_pattern"});
  out.tokens = token_labels(task, in.row.inputs, 0);
  out.ids.assign(in.row.inputs.data(), in.row.inputs.data() + in.row.inputs.size());
  out.note = in.note;
  out.ablated = r.ablate;
  out.mode = r.mode;
  for (auto& [name, mha] : model::attention_layers(m)) {
    LayerWeights lw;
    lw.name = name;
    lw.kind = m.attention_kind(*mha);
    const auto [queries, keys] = m.attention_tokens(*mha, in.row);
    lw.query_tokens = token_labels(task, *queries, 0);
    lw.key_tokens = token_labels(task, *keys, 0);
    const Array<float>& p = patterns[name + ".hook_pattern"];  // (1, H, Tq, Tk)
    lw.weights = Array<float>::from_shape({p.shape()[1], p.shape()[2], p.shape()[3]});
    std::copy(p.data(), p.data() + p.size(), lw.weights.data());
    out.layers.push_back(std::move(lw));
  }
  out.answer = model::answer(m, task, in.row, logits, r.top_k);
  return out;
}

std::string to_json(const AnalyzeResult& r, const data::Task& task, WeightEncoding encoding) {
  json::Writer w;
  w.open('{').key("tokens");
  write_strings(w, r.tokens);
  w.key("ids").open('[');
  for (Index id : r.ids) w.value(std::int64_t(id));
  w.close(']').member("note", r.note).key("ablated").open('[');
  for (auto& h : r.ablated) w.open('[').value(h.layer).value(h.head).close(']');
  w.close(']').member("mode", ablation_mode_names().name(r.mode)).key("layers").open('[');
  for (auto& layer : r.layers) {
    w.open('{').member("name", layer.name).member("kind", model::attention_kind_name(layer.kind)).key("query_tokens");
    write_strings(w, layer.query_tokens);
    w.key("key_tokens");
    write_strings(w, layer.key_tokens);
    const bool bytes = encoding == WeightEncoding::Uint8;
    w.member("encoding", bytes ? "uint8" : "float32").key("weights").open('[');
    const std::size_t H = layer.weights.shape()[0], n = layer.weights.size() / H;
    for (std::size_t h = 0; h < H; ++h) {
      const float* p = layer.weights.data() + h * n;
      w.value(bytes ? json::base64_bytes(p, n) : json::base64_floats(p, n));
    }
    w.close(']').close('}');
  }
  w.close(']');
  const model::Answer& a = r.answer;
  w.key("answer").open('{').member("kind", a.kind).key("positions").open('[');
  for (auto& p : a.positions) {
    w.open('{').member("position", p.position).member("prediction", std::int64_t(p.prediction))
        .member("token", model::class_label(task, p.prediction)).member("p", p.p);
    if (p.target != data::kIgnore)
      w.member("target", std::int64_t(p.target)).member("target_token", model::class_label(task, p.target))
          .member("p_target", p.p_target).member("right", p.prediction == p.target);
    w.close('}');
  }
  w.close(']');
  if (a.kind == "fill") {
    w.key("fills").open('[');
    for (auto& [position, top] : a.fills) {
      w.open('{').member("position", position).key("top");
      write_top(w, task, top);
      w.close('}');
    }
    w.close(']');
  }
  if (a.kind == "next") {
    w.key("next").open('{').member("position", a.positions.size() - 1).key("top");
    write_top(w, task, a.next);
    w.close('}');
  }
  w.close('}');
  write_score(w, a.score);
  if (r.intact) {
    w.key("intact").open('{');
    write_score(w, *r.intact);
    w.close('}');
  }
  w.close('}');
  return w.take();
}

}  // namespace qkv::interp
