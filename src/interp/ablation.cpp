#include "qkv/interp/ablation.hpp"

#include "qkv/io/json.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <memory>

#include "qkv/autograd/tape.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/loss.hpp"
#include "qkv/ops/reduce.hpp"

namespace qkv::interp {

std::string head_name(const HeadRef& h) { return std::to_string(h.layer) + "." + std::to_string(h.head); }

std::vector<std::size_t> heads_per_layer(model::TaskModel& model) {
  std::vector<std::size_t> out;
  for (auto& [name, layer] : model::attention_layers(model)) out.push_back(layer->num_heads());
  return out;
}

std::vector<HeadRef> parse_heads(const std::string& list, const std::vector<std::size_t>& heads) {
  auto range = [](std::size_t n) { return n ? "0.." + std::to_string(n - 1) : std::string("none"); };
  auto number = [](const std::string& s, std::size_t& v) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9) return false;
    v = std::stoul(s);
    return true;
  };
  std::vector<HeadRef> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item.empty() && list.empty()) break;
    const std::size_t dot = item.find('.');
    std::size_t layer = 0, head = 0;
    if (dot == std::string::npos || !number(item.substr(0, dot), layer))
      field_error("heads", "'" + item + "' is not LAYER.HEAD (e.g. 0.1, or 1.* for every head of layer 1)");
    if (layer >= heads.size())
      field_error("heads", item + ": the model has no attention layer " + std::to_string(layer) +
                       " (layers " + range(heads.size()) + ")");
    const std::string h = item.substr(dot + 1);
    std::vector<std::size_t> chosen;
    if (h == "*") {
      for (std::size_t k = 0; k < heads[layer]; ++k) chosen.push_back(k);
    } else if (!number(h, head)) {
      field_error("heads", "'" + item + "' is not LAYER.HEAD (e.g. 0.1, or 1.* for every head of layer 1)");
    } else if (head >= heads[layer]) {
      field_error("heads", item + ": attention layer " + std::to_string(layer) + " has no head " +
                       std::to_string(head) + " (heads " + range(heads[layer]) + ")");
    } else {
      chosen.push_back(head);
    }
    for (std::size_t k : chosen) {
      const HeadRef r{layer, k};
      if (std::find(out.begin(), out.end(), r) != out.end())
        field_error("heads", "head " + head_name(r) + " is listed twice");
      out.push_back(r);
    }
  }
  if (out.empty()) field_error("heads", "the list of heads is empty (give LAYER.HEAD items, e.g. 0.1,1.0)");
  return out;
}

const NameTable<AblationMode>& ablation_mode_names() {
  static const NameTable<AblationMode> t{{"zero", AblationMode::Zero}, {"mean", AblationMode::Mean}};
  return t;
}

std::vector<Array<float>> head_means(model::TaskModel& model, const data::Batch& batch, std::size_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const auto layers = model::attention_layers(model);
  std::vector<std::vector<double>> sums(layers.size());
  std::vector<std::size_t> dims(layers.size(), 0), H(layers.size(), 0);
  std::vector<double> rows(layers.size(), 0);
  const std::size_t N = batch.size();
  for (std::size_t lo = 0; lo < N; lo += batch_size) {
    const data::Batch part = data::rows(batch, lo, std::min(N, lo + batch_size));
    auto cache = nn::run_with_cache(model.module(), [&] { model.logits(part); }, {"*.hook_z"});
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const Array<float>& z = cache[layers[l].first + ".hook_z"];  // (B, H, Tq, D)
      const std::size_t B = z.shape()[0], h_n = z.shape()[1], Tq = z.shape()[2], D = z.shape()[3];
      H[l] = h_n, dims[l] = D;
      sums[l].resize(h_n * D, 0.0);
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < h_n; ++h)
          for (std::size_t i = 0; i < Tq; ++i) {
            const float* p = z.data() + ((b * h_n + h) * Tq + i) * D;
            for (std::size_t d = 0; d < D; ++d) sums[l][h * D + d] += p[d];
          }
      rows[l] += double(B * Tq);
    }
  }
  if (was_training) model.module().train();
  std::vector<Array<float>> out;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    Array<float> m = Array<float>::from_shape({H[l], dims[l]});
    for (std::size_t k = 0; k < m.size(); ++k) m.data()[k] = float(rows[l] > 0 ? sums[l][k] / rows[l] : 0.0);
    out.push_back(std::move(m));
  }
  return out;
}

namespace {

// Per layer: xi (1, H, 1, 1), 1 = kept, and m (1, H, 1, D), the replacement of a removed head.
struct LayerGate {
  Variable<float> xi, m;
};

// Install z <- m + xi (z - m) on every attention layer with a removed head (all of them when
// `all`, for importance gradients).
std::vector<LayerGate> install(model::TaskModel& model, nn::HookScope<float>& scope, const std::vector<HeadRef>& heads,
                               AblationMode mode, const std::vector<Array<float>>* means, bool all, bool trainable) {
  if (mode == AblationMode::Mean && !means) throw ValueError("mean ablation needs the heads' mean outputs (head_means)");
  const auto layers = model::attention_layers(model);
  std::vector<LayerGate> gates(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::size_t H = layers[l].second->num_heads(), D = layers[l].second->value_dim();  // z is (B, H, T, Dv)
    bool touched = all;
    Array<float> xi = Array<float>::from_shape({1, H, 1, 1});
    std::fill(xi.begin(), xi.end(), 1.0f);
    for (auto& r : heads)
      if (r.layer == l) xi(0, r.head, 0, 0) = 0, touched = true;
    if (!touched) continue;
    Array<float> m = Array<float>::from_shape({1, H, 1, D});
    std::fill(m.begin(), m.end(), 0.0f);
    if (mode == AblationMode::Mean) {
      const Array<float>& mean = (*means).at(l);
      if (mean.shape() != Shape{H, D})
        throw ShapeError("mean ablation: the means of layer " + layers[l].first + " are " + shape_str(mean.shape()) +
                         ", expected (" + std::to_string(H) + ", " + std::to_string(D) + ")");
      std::copy(mean.begin(), mean.end(), m.begin());
    }
    gates[l] = {Variable<float>(std::move(xi), trainable), Variable<float>(std::move(m))};
    LayerGate g = gates[l];
    scope.add(layers[l].first + ".hook_z", [g](const Variable<float>& z) { return g.m + g.xi * (z - g.m); });
  }
  return gates;
}

}  // namespace

HeadAblation::HeadAblation(model::TaskModel& model, const std::vector<HeadRef>& heads, AblationMode mode,
                           const std::vector<Array<float>>* means)
    : scope_(model.module()) {
  install(model, scope_, heads, mode, means, false, false);
}

model::EvalMetrics ablated_metrics(model::TaskModel& model, const data::Batch& batch, const std::vector<HeadRef>& heads,
                                   AblationMode mode, const std::vector<Array<float>>* means) {
  HeadAblation ablation(model, heads, mode, means);
  return model::evaluate(model, batch, 256);
}

std::vector<AblationRow> ablate_each(model::TaskModel& model, const data::Batch& batch, AblationMode mode,
                                     const std::vector<Array<float>>* means) {
  std::vector<AblationRow> out;
  const auto heads = heads_per_layer(model);
  for (std::size_t l = 0; l < heads.size(); ++l)
    for (std::size_t h = 0; h < heads[l]; ++h) out.push_back({{{l, h}}, ablated_metrics(model, batch, {{l, h}}, mode, means)});
  return out;
}

std::vector<std::vector<double>> head_importance(model::TaskModel& model, const data::Batch& batch,
                                                 const std::vector<HeadRef>& removed, AblationMode mode,
                                                 const std::vector<Array<float>>* means, std::size_t batch_size) {
  const bool was_training = model.module().is_training();
  model.module().eval();
  const auto per_layer = heads_per_layer(model);
  std::vector<std::vector<double>> importance(per_layer.size());
  for (std::size_t l = 0; l < per_layer.size(); ++l) importance[l].assign(per_layer[l], 0.0);
  {
    nn::HookScope<float> scope(model.module());
    const std::vector<LayerGate> gates = install(model, scope, removed, mode, means, true, true);
    const std::size_t N = batch.size();
    for (std::size_t lo = 0; lo < N; lo += batch_size) {
      const data::Batch part = data::rows(batch, lo, std::min(N, lo + batch_size));
      Variable<float> loss = cross_entropy(model.logits(part), part.targets, data::kIgnore);
      loss.backward();
      for (std::size_t l = 0; l < gates.size(); ++l) {
        if (gates[l].xi.has_grad())
          for (std::size_t h = 0; h < per_layer[l]; ++h) importance[l][h] += std::abs(double(gates[l].xi.grad().data()[h]));
        gates[l].xi.zero_grad();
      }
      model.module().zero_grad();
    }
  }
  if (was_training) model.module().train();
  for (auto& layer : importance) {
    double norm = 0;
    for (double x : layer) norm += x * x;
    norm = std::sqrt(norm);
    if (norm > 0)
      for (double& x : layer) x /= norm;
  }
  for (auto& r : removed) importance[r.layer][r.head] = std::numeric_limits<double>::infinity();
  return importance;
}

std::vector<PrunePoint> prune_curve(model::TaskModel& model, const data::Batch& importance_batch,
                                    const data::Batch& eval_batch, AblationMode mode,
                                    const std::vector<Array<float>>* means, std::size_t step) {
  if (step == 0) field_error("step", "expected at least 1 head removed per pruning step");
  const auto per_layer = heads_per_layer(model);
  std::size_t total = 0;
  for (std::size_t n : per_layer) total += n;
  std::vector<PrunePoint> out;
  std::vector<HeadRef> removed;
  out.push_back({removed, 0.0, ablated_metrics(model, eval_batch, removed, mode, means)});
  while (removed.size() < total) {
    const auto imp = head_importance(model, importance_batch, removed, mode, means);
    std::vector<std::pair<double, HeadRef>> kept;
    for (std::size_t l = 0; l < imp.size(); ++l)
      for (std::size_t h = 0; h < imp[l].size(); ++h)
        if (std::isfinite(imp[l][h])) kept.push_back({imp[l][h], {l, h}});
    // least important first; ties by model order, so the curve is reproducible
    std::stable_sort(kept.begin(), kept.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (std::size_t k = 0; k < std::min(step, kept.size()); ++k) removed.push_back(kept[k].second);
    out.push_back({removed, double(removed.size()) / double(total), ablated_metrics(model, eval_batch, removed, mode, means)});
  }
  return out;
}

data::Batch restrict_to_relation(const data::Task& task, const data::Batch& batch, const std::string& relation) {
  const std::vector<std::string>& names = task.relation_names();
  if (names.empty()) field_error("relation", "task " + task.name() + " has no gold relations (the grammar has)", relation);
  // "verb->object" needs quotes in a shell ('>' redirects): "verb-object" and "verb_object" name it too.
  auto letters = [](const std::string& x) {
    std::string out;
    for (char c : x)
      if (std::isalnum(static_cast<unsigned char>(c))) out += c;
    return out;
  };
  const auto it = std::find_if(names.begin(), names.end(), [&](const std::string& n) { return letters(n) == letters(relation); });
  if (it == names.end())
    field_error("relation", "not a relation of task " + task.name() + did_you_mean(relation, names) + " (relations: " +
                                join_names(names) + ")",
                relation);
  if (batch.relations.dimension() != 3) field_error("relation", "these examples carry no relations", relation);
  const std::size_t r = std::size_t(it - names.begin()), B = batch.size(), T = batch.targets.shape()[1];
  data::Batch out = batch;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t)
      if (batch.relations(b, r, t) < 0) out.targets(b, t) = data::kIgnore;
  return out;
}

void check_heads(const std::vector<HeadRef>& heads, const std::vector<std::size_t>& per_layer, const std::string& field) {
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (heads[i].layer >= per_layer.size())
      field_error(at, "the model has no attention layer " + std::to_string(heads[i].layer) + " (layers 0.." +
                          std::to_string(per_layer.size() - 1) + ")");
    if (heads[i].head >= per_layer[heads[i].layer])
      field_error(at, "attention layer " + std::to_string(heads[i].layer) + " has no head " + std::to_string(heads[i].head) +
                          " (heads 0.." + std::to_string(per_layer[heads[i].layer] - 1) + ")");
    if (std::find(heads.begin(), heads.begin() + long(i), heads[i]) != heads.begin() + long(i))
      field_error(at, "head " + head_name(heads[i]) + " is listed twice");
  }
}

const std::vector<Array<float>>& cached_means(model::LoadedModel& l, AblationCache& c) {
  if (!l.data) field_error("mode", "mean ablation replaces a head by its mean output over the validation set, which needs the "
                                   "model's data (not loaded)");
  if (!c.means) c.means = std::make_shared<const std::vector<Array<float>>>(head_means(*l.model, l.data->eval_set()));
  return *c.means;
}

AblateResult ablate(model::LoadedModel& l, const AblateRequest& r, AblationCache* cache) {
  if (!l.data) field_error("data", "ablation is measured on the model's held-out data, which was not loaded");
  if (r.prune && r.heads) field_error("prune", "pruning removes every head in turn: give either {heads} or {prune}");
  if (r.prune && r.step == 0) field_error("step", "expected at least 1 head removed per pruning step");
  if (r.heads) check_heads(*r.heads, heads_per_layer(*l.model));
  AblationCache local;
  AblationCache& c = cache ? *cache : local;
  const data::Batch& test_set = l.data->test_set();
  const data::Batch& val = l.data->eval_set();
  data::Batch test = data::rows(test_set, 0, r.examples ? std::min(r.examples, test_set.size()) : test_set.size());
  if (!r.relation.empty()) test = restrict_to_relation(*l.task, test, r.relation);
  const std::vector<Array<float>>* means = r.mode == AblationMode::Mean ? &cached_means(l, c) : nullptr;

  AblateResult out;
  out.mode = r.mode;
  out.relation = r.relation;
  out.examples = test.size();
  const auto key = std::make_pair(test.size(), r.relation);
  auto it = c.intact.find(key);
  if (it == c.intact.end()) it = c.intact.emplace(key, ablated_metrics(*l.model, test, {}, AblationMode::Zero, nullptr)).first;
  out.intact = it->second;
  if (r.prune) {
    out.curve = prune_curve(*l.model, val, test, r.mode, means, r.step);
  } else if (r.heads) {
    if (!r.heads->empty()) out.ablated = AblationRow{*r.heads, ablated_metrics(*l.model, test, *r.heads, r.mode, means)};
  } else {
    out.each = ablate_each(*l.model, test, r.mode, means);
  }
  return out;
}

namespace {
void write_metrics(json::Writer& w, const model::EvalMetrics& m, const model::EvalMetrics* base) {
  w.member("loss", m.loss).member("token_accuracy", m.token_accuracy).member("sequence_accuracy", m.sequence_accuracy);
  if (base) w.member("loss_change", m.loss - base->loss).member("accuracy_change", m.token_accuracy - base->token_accuracy);
}
void write_heads(json::Writer& w, const std::vector<HeadRef>& heads) {
  w.open('[');
  for (auto& h : heads) w.open('[').value(h.layer).value(h.head).close(']');
  w.close(']');
}
}  // namespace

std::string to_json(const AblateResult& r) {
  json::Writer w;
  w.open('{').member("mode", ablation_mode_names().name(r.mode));
  w.key("relation");
  if (r.relation.empty()) w.null();
  else w.value(r.relation);
  w.member("examples", r.examples).key("intact").open('{');
  write_metrics(w, r.intact, nullptr);
  w.close('}');
  if (r.ablated) {
    w.key("ablated").open('{').key("heads");
    write_heads(w, r.ablated->heads);
    write_metrics(w, r.ablated->metrics, &r.intact);
    w.close('}');
  }
  if (!r.each.empty()) {
    w.key("each").open('[');
    for (auto& e : r.each) {
      w.open('{').member("layer", e.heads[0].layer).member("head", e.heads[0].head);
      write_metrics(w, e.metrics, &r.intact);
      w.close('}');
    }
    w.close(']');
  }
  if (!r.curve.empty()) {
    w.key("curve").open('[');
    for (auto& p : r.curve) {
      w.open('{').key("removed");
      write_heads(w, p.removed);
      w.member("fraction", p.fraction);
      write_metrics(w, p.metrics, nullptr);
      w.close('}');
    }
    w.close(']');
  }
  w.close('}');
  return w.take();
}

}  // namespace qkv::interp
