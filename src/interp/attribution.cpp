#include "qkv/interp/attribution.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "qkv/autograd/tape.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/answer.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"
#include "residual.hpp"

namespace qkv::interp {

ResidualStack residual_stack(model::TaskModel& model, const std::string& what) {
  ResidualStack s;
  nn::Module<float>& m = model.module();
  if (auto* e = dynamic_cast<nn::EncoderModel<float>*>(&m)) {
    s.blocks = e->blocks.get(), s.norm = e->norm.get(), s.head = e->head.get(), s.norm_first = e->options().norm_first;
  } else if (auto* d = dynamic_cast<nn::DecoderModel<float>*>(&m)) {
    s.blocks = d->blocks.get(), s.norm = d->norm.get(), s.head = d->head.get(), s.norm_first = d->options().norm_first;
    if (!s.head) s.tied = d->tok_emb.get();
  } else {
    field_error("model", what + " reads the residual stream of an encoder or a decoder-only model; an encoder-decoder's "
                                "decoder layers have no split inputs or residual hook points");
  }
  return s;
}

const NameTable<AttributionMethod>& attribution_method_names() {
  static const NameTable<AttributionMethod> t{
      {"attribution", AttributionMethod::Attribution}, {"eap", AttributionMethod::Eap}, {"eap-ig", AttributionMethod::EapIg}};
  return t;
}

namespace {

// The metric and its gradient with respect to the logits (1, T, C). The logit difference is
// linear: its gradient is +1 at (p, answer), -1 at (p, wrong), whatever the logits.
struct Metric {
  std::function<double(const Array<float>&)> value;
  std::function<Array<float>(const Array<float>&)> gradient;
};

Metric make_metric(const AttributeRequest& r, const MetricTarget& t) {
  Metric m;
  if (!r.metric) {
    m.value = [t](const Array<float>& z) {
      const std::size_t C = z.shape()[2];
      return double(z.data()[t.position * C + std::size_t(t.answer)]) - double(z.data()[t.position * C + std::size_t(t.wrong)]);
    };
    m.gradient = [t](const Array<float>& z) {
      Array<float> g = zeros<float>(z.shape());
      const std::size_t C = z.shape()[2];
      g.data()[t.position * C + std::size_t(t.answer)] = 1, g.data()[t.position * C + std::size_t(t.wrong)] = -1;
      return g;
    };
    return m;
  }
  m.value = r.metric;
  if (r.metric_gradient) {
    m.gradient = r.metric_gradient;
    return m;
  }
  m.gradient = [f = r.metric](const Array<float>& z) {  // central differences of the metric alone
    if (z.size() > 200000)
      field_error("metric", "the logits have " + std::to_string(z.size()) + " entries, too many to differentiate the metric "
                            "numerically: give its gradient with respect to the logits too");
    Array<float> g = zeros<float>(z.shape());
    Array<float> moved = z;
    for (std::size_t i = 0; i < z.size(); ++i) {
      const float x = z.data()[i], h = 1e-3f * std::max(1.0f, std::abs(x));
      moved.data()[i] = x + h;
      const double up = f(moved);
      moved.data()[i] = x - h;
      const double down = f(moved);
      moved.data()[i] = x;
      g.data()[i] = float((up - down) / (2.0 * double(h)));
    }
    return g;
  };
  return m;
}

// Sum over every element of a * b for the slice `index` of axis 1 (a head) of two (1, H, T, C)
// arrays, or of whole (1, T, C) arrays (index npos); per position t when `per_t` is given.
double dot(const Array<float>& a, const Array<float>& b, std::size_t index, std::vector<double>* per_t = nullptr) {
  const bool heads = index != std::size_t(-1);
  const std::size_t T = heads ? a.shape()[2] : a.shape()[1], C = a.shape().back();
  const std::size_t off = heads ? index * T * C : 0;
  double total = 0;
  for (std::size_t t = 0; t < T; ++t) {
    double s = 0;
    for (std::size_t c = 0; c < C; ++c) s += double(a.data()[off + t * C + c]) * double(b.data()[off + t * C + c]);
    if (per_t) per_t->push_back(s);
    total += s;
  }
  return total;
}

Array<float> difference(const Array<float>& a, const Array<float>& b) {
  Array<float> d = Array<float>::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) d.data()[i] = a.data()[i] - b.data()[i];
  return d;
}

}  // namespace

AttributionResult attribute(model::LoadedModel& l, const AttributeRequest& r) {
  if (r.steps < 1 || r.steps > 1000)
    field_error("steps", "expected a number of interpolation steps in [1, 1000]", std::to_string(r.steps));
  model::TaskModel& model = *l.model;
  const ResidualStack stack = residual_stack(model, "attribution");
  PatchInputs in = patch_inputs(l, r.clean, r.corrupt, r.position, r.answer, r.wrong, r.ids);
  in.options.metric = r.metric;
  // The run the gradients are taken at (the base) and the one whose values a patch would bring.
  const data::Batch& base = r.noise ? in.clean.row : in.corrupt.row;
  const data::Batch& target = r.noise ? in.corrupt.row : in.clean.row;
  const std::size_t L = stack.layers();
  const std::string input = ResidualStack::at(0, "hook_resid_pre"), output = ResidualStack::at(L - 1, "hook_resid_post");
  std::vector<std::string> values = {input}, grads = {output};
  for (std::size_t l = 0; l < L; ++l) {
    for (const char* p : {"attn.hook_z", "attn.hook_head_result"}) values.push_back(ResidualStack::at(l, p));
    for (const char* p : {"hook_q_input", "hook_k_input", "hook_v_input"}) grads.push_back(ResidualStack::at(l, p));
    if (stack.mlp(l)) values.push_back(ResidualStack::at(l, "hook_mlp_out")), grads.push_back(ResidualStack::at(l, "hook_mlp_in"));
  }
  std::vector<std::string> all = values;
  all.insert(all.end(), grads.begin(), grads.end());

  nn::EvalGuard<float> eval(model.module());
  Array<float> target_logits;
  nn::ActivationCache<float> target_values;
  {
    NoGradGuard no_grad;
    target_values = nn::run_with_cache(model.module(), [&] { target_logits = model.logits(target).value(); }, values);
  }
  AttributionResult out;
  out.method = r.method, out.noise = r.noise, out.custom_metric = bool(r.metric);
  out.steps = r.method == AttributionMethod::EapIg ? r.steps : 1;
  Metric metric;
  nn::ActivationCache<float> base_values, mean_grads;
  double span = 0;
  for (std::size_t k = 0; k < out.steps; ++k) {
    nn::HookScope<float> scope(model.module());
    if (k > 0) {  // EAP-IG: the embeddings k / steps of the way from the base run's to the target's
      const Array<float>& e0 = base_values[input];
      const Array<float>& e1 = target_values[input];
      const float a = float(k) / float(out.steps);
      scope.add(input, [&e0, &e1, a](const Variable<float>&) {
        Array<float> e = Array<float>::from_shape(e0.shape());
        for (std::size_t i = 0; i < e.size(); ++i) e.data()[i] = e0.data()[i] + a * (e1.data()[i] - e0.data()[i]);
        return Variable<float>(std::move(e));
      });
    }
    const nn::GradCache<float> g = nn::run_with_grads(model.module(), [&] {
      Variable<float> logits = model.logits(base);
      if (k == 0) {  // the base run: the metric's target and values
        const Array<float>& clean_logits = r.noise ? logits.value() : target_logits;
        const Array<float>& corrupt_logits = r.noise ? target_logits : logits.value();
        const MetricTarget t = metric_target(*l.task, in.clean.row, in.corrupt.row, clean_logits, corrupt_logits, in.options);
        out.position = t.position, out.answer = t.answer, out.wrong = t.wrong;
        metric = make_metric(r, t);
        out.clean_metric = metric.value(clean_logits), out.corrupt_metric = metric.value(corrupt_logits);
        if (!std::isfinite(out.clean_metric) || !std::isfinite(out.corrupt_metric))
          field_error("metric", "not finite in the clean or the corrupted run (" + number_text(out.clean_metric) + ", " +
                                    number_text(out.corrupt_metric) + ")");
        span = r.noise ? out.corrupt_metric - out.clean_metric : out.clean_metric - out.corrupt_metric;
        // The runs are computed on different paths (the base run with split inputs), so equal
        // metrics can differ in the last bits: a span within float32's rounding is no span.
        if (std::abs(span) <= 1e-5 * std::max({1.0, std::abs(out.clean_metric), std::abs(out.corrupt_metric)}))
          field_error("metric", "the clean and the corrupted runs give the same metric (" + number_text(out.clean_metric) +
                                    ", " + number_text(out.corrupt_metric) + "): there is nothing to attribute");
      }
      return sum(mul(logits, Variable<float>(metric.gradient(logits.value()))));
    }, all);
    if (k == 0) base_values = g.values;
    for (auto& name : all) {  // the mean over the steps
      const Array<float>& gk = g.grads[name];
      Array<float> acc = mean_grads.contains(name) ? mean_grads[name] : zeros<float>(gk.shape());
      for (std::size_t i = 0; i < acc.size(); ++i) acc.data()[i] += gk.data()[i] / float(out.steps);
      mean_grads.set(name, acc);
    }
    ++out.forward_passes, ++out.backward_passes;
  }
  ++out.forward_passes;  // the target run

  out.tokens = token_labels(*l.task, in.corrupt.row.inputs, 0);
  for (std::size_t l = 0; l < L; ++l) {
    out.layers.push_back(ResidualStack::at(l, "attn"));
    const std::string z = ResidualStack::at(l, "attn.hook_z");
    const Array<float> dz = difference(target_values[z], base_values[z]);
    std::vector<double> heads;
    std::vector<std::vector<double>> positions;
    for (std::size_t h = 0; h < stack.heads(l); ++h) {
      std::vector<double> per_t;
      heads.push_back(dot(dz, mean_grads[z], h, &per_t) / span);
      for (double& x : per_t) x /= span;
      positions.push_back(per_t);
    }
    out.heads.push_back(heads);
    out.head_positions.push_back(positions);
  }
  if (r.method == AttributionMethod::Attribution) return out;

  // Edges: every writer before every reader. A writer is read by the attention of layers >=
  // attn_from and the MLPs of layers >= mlp_from: the input by all, a head of layer l by the later
  // layers' heads and by its own layer's MLP on, an MLP of layer l by the later layers.
  struct Writer {
    std::string name;
    std::size_t attn_from, mlp_from;
    Array<float> delta;  // (1, T, C)
  };
  std::vector<Writer> writers;
  writers.push_back({"input", 0, 0, difference(target_values[input], base_values[input])});
  auto head_slice = [](const Array<float>& a, std::size_t h) {  // (1, H, T, C) -> (1, T, C)
    const std::size_t T = a.shape()[2], C = a.shape()[3];
    Array<float> s = Array<float>::from_shape({1, T, C});
    std::copy(a.data() + h * T * C, a.data() + (h + 1) * T * C, s.data());
    return s;
  };
  for (std::size_t l = 0; l < L; ++l) {
    const std::string res = ResidualStack::at(l, "attn.hook_head_result");
    const Array<float> dres = difference(target_values[res], base_values[res]);
    for (std::size_t h = 0; h < stack.heads(l); ++h)
      writers.push_back({"a" + std::to_string(l) + ".h" + std::to_string(h), l + 1, l, head_slice(dres, h)});
    if (stack.mlp(l)) {
      const std::string m = ResidualStack::at(l, "hook_mlp_out");
      writers.push_back({"m" + std::to_string(l), l + 1, l + 1, difference(target_values[m], base_values[m])});
    }
  }
  auto add_edges = [&](const std::string& reader, const Array<float>& g, auto reads) {
    for (const Writer& w : writers)
      if (reads(w)) out.edges.push_back({w.name, reader, dot(w.delta, g, std::size_t(-1)) / span});
  };
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t h = 0; h < stack.heads(l); ++h)
      for (const char* which : {"q", "k", "v"})
        add_edges("a" + std::to_string(l) + ".h" + std::to_string(h) + "<" + which + ">",
                  head_slice(mean_grads[ResidualStack::at(l, std::string("hook_") + which + "_input")], h),
                  [l](const Writer& w) { return w.attn_from <= l; });
    if (stack.mlp(l))
      add_edges("m" + std::to_string(l), mean_grads[ResidualStack::at(l, "hook_mlp_in")],
                [l](const Writer& w) { return w.mlp_from <= l; });
  }
  add_edges("logits", mean_grads[output], [](const Writer&) { return true; });
  return out;
}

std::string format_attribution(const AttributionResult& r, const data::Task& task, std::size_t edges) {
  std::ostringstream out;
  out << format_metric(task, r.position, r.answer, r.wrong, r.custom_metric, r.clean_metric, r.corrupt_metric);
  const char* name = r.method == AttributionMethod::Attribution ? "attribution patching"
                     : r.method == AttributionMethod::Eap   ? "edge attribution patching (EAP)"
                                                            : "EAP-IG";
  out << name;
  if (r.method == AttributionMethod::EapIg) out << ", " << r.steps << " steps";
  out << (r.noise ? ", noising: the share of the difference a head's corrupted output would remove\n"
                  : ", denoising: the estimated share of the difference a head's clean output restores\n");
  char b[256];
  std::size_t H = 0;
  for (auto& row : r.heads) H = std::max(H, row.size());
  std::snprintf(b, sizeof b, "%-18s", "layer");
  out << b;
  for (std::size_t h = 0; h < H; ++h) {
    std::snprintf(b, sizeof b, " %8s", ("head " + std::to_string(h)).c_str());
    out << b;
  }
  out << "\n";
  for (std::size_t l = 0; l < r.heads.size(); ++l) {
    std::snprintf(b, sizeof b, "%-18s", (std::to_string(l) + " " + r.layers[l]).c_str());
    out << b;
    for (double x : r.heads[l]) {
      std::snprintf(b, sizeof b, " %8.3f", x);
      out << b;
    }
    out << "\n";
  }
  if (!r.edges.empty()) {
    std::vector<const EdgeScore*> order;
    for (auto& e : r.edges) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return std::abs(a->score) > std::abs(b->score); });
    const std::size_t n = std::min(edges, order.size());
    out << "the " << n << " of " << r.edges.size() << " edges with the largest |score|:\n";
    for (std::size_t i = 0; i < n; ++i) {
      std::snprintf(b, sizeof b, "  %-10s -> %-10s %8.3f\n", order[i]->from.c_str(), order[i]->to.c_str(), order[i]->score);
      out << b;
    }
  }
  std::size_t heads = 0;
  for (auto& row : r.heads) heads += row.size();
  out << "cost: " << r.forward_passes << " forward and " << r.backward_passes << " backward passes (activation patching: "
      << 2 + heads << " forward)\n";
  return out.str();
}

std::string to_json(const AttributionResult& r, const data::Task& task) {
  json::Writer w;
  w.open('{').member("method", attribution_method_names().name(r.method)).member("direction", r.noise ? "noise" : "denoise");
  w.member("steps", r.steps).member("position", r.position).member("answer", std::int64_t(r.answer))
      .member("wrong", std::int64_t(r.wrong)).member("answer_token", model::class_label(task, r.answer))
      .member("wrong_token", model::class_label(task, r.wrong)).member("metric", r.custom_metric ? "custom" : "logit_diff")
      .member("clean", r.clean_metric).member("corrupt", r.corrupt_metric);
  w.key("layers").open('[');
  for (auto& x : r.layers) w.value(x);
  w.close(']').key("tokens").open('[');
  for (auto& x : r.tokens) w.value(x);
  w.close(']').key("heads").open('[');
  for (auto& layer : r.heads) {
    w.open('[');
    for (double x : layer) w.value(x);
    w.close(']');
  }
  w.close(']').key("head_positions").open('[');
  for (auto& layer : r.head_positions) {
    w.open('[');
    for (auto& head : layer) {
      w.open('[');
      for (double x : head) w.value(x);
      w.close(']');
    }
    w.close(']');
  }
  w.close(']').key("edges").open('[');
  for (auto& e : r.edges) w.open('{').member("from", e.from).member("to", e.to).member("score", e.score).close('}');
  w.close(']').member("forward_passes", r.forward_passes).member("backward_passes", r.backward_passes).close('}');
  return w.take();
}

}  // namespace qkv::interp
