#include "qkv/interp/explain.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

#include "json.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/nn/activation_cache.hpp"

namespace qkv::interp {

std::vector<std::string> token_labels(const data::Task& task, const IndexArray& ids, std::size_t row) {
  std::vector<std::string> out;
  const std::size_t T = ids.shape()[1];
  for (std::size_t t = 0; t < T; ++t) {
    const Index id = ids(row, t);
    out.push_back(task.seq2seq() && id == task.bos() ? "<bos>" : task.token_label(id));
  }
  return out;
}

namespace {

std::string range(std::size_t n) { return n ? "0.." + std::to_string(n - 1) : std::string("none"); }

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// The vector of (b=0, head h, position t) of a (1, H, T, D) hook value.
std::vector<double> at(const Array<float>& a, std::size_t h, std::size_t t) {
  const std::size_t H = a.shape()[1], T = a.shape()[2], D = a.shape()[3];
  (void)H;
  const float* p = a.data() + (h * T + t) * D;
  return std::vector<double>(p, p + D);
}

// A token shown between quotes with whitespace made visible (as the viewer does).
std::string shown(const std::string& token) {
  if (token == " ") return "'␣'";
  if (token == "\n") return "'⏎'";
  if (token == "\t") return "'⇥'";
  return "'" + token + "'";
}

std::string vec(const std::vector<double>& x, std::size_t dims) {
  std::string out = "[";
  char b[32];
  for (std::size_t d = 0; d < std::min(dims, x.size()); ++d) {
    std::snprintf(b, sizeof b, "%s%.4f", d ? ", " : "", x[d]);
    out += b;
  }
  return out + (x.size() > dims ? ", ...]" : "]");
}

}  // namespace

QueryExplanation explain_query(model::TaskModel& model, const data::Task& task, const data::Batch& example,
                               std::size_t layer, std::size_t head, std::size_t query) {
  const auto layers = model::attention_layers(model);
  if (layer >= layers.size())
    field_error("layer", "the model has " + std::to_string(layers.size()) + " attention layers (" + range(layers.size()) + ")",
                std::to_string(layer));
  const auto& [name, mha] = layers[layer];
  if (head >= mha->num_heads())
    field_error("head", name + " has " + std::to_string(mha->num_heads()) + " heads (" + range(mha->num_heads()) + ")",
                std::to_string(head));
  if (example.size() != 1) throw ValueError("explain: expected one example, found " + std::to_string(example.size()));
  auto [qids, kids] = model.attention_tokens(*mha, example);
  const std::size_t Tq = qids->shape()[1], Tk = kids->shape()[1];
  if (query >= Tq)
    field_error("query", name + " reads " + std::to_string(Tq) + " queries (" + range(Tq) + ")", std::to_string(query));

  nn::ActivationCache<float> cache;
  {
    NoGradGuard no_grad;
    const bool was_training = model.module().is_training();
    model.module().eval();
    const std::vector<std::string> points = {name + ".hook_q", name + ".hook_k", name + ".hook_v",
                                             name + ".hook_pattern", name + ".hook_z"};
    cache = nn::run_with_cache(model.module(), [&] { model.logits(example); }, points);
    if (was_training) model.module().train();
  }
  QueryExplanation e;
  e.layer = name, e.layer_index = layer, e.head = head, e.query = query, e.kind = model.attention_kind(*mha);
  e.query_tokens = token_labels(task, *qids, 0);
  e.key_tokens = token_labels(task, *kids, 0);
  e.q = at(cache[name + ".hook_q"], head, query);
  e.scale = mha->options().scale ? *mha->options().scale : 1.0 / std::sqrt(double(mha->head_dim()));
  const Array<float>& k = cache[name + ".hook_k"];
  const Array<float>& w = cache[name + ".hook_pattern"];  // (1, H, Tq, Tk)
  double top = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < Tk; ++j) {
    KeyTerm t;
    t.key = j;
    const std::vector<double> kj = at(k, head, j);
    t.raw = std::inner_product(e.q.begin(), e.q.end(), kj.begin(), 0.0);
    t.scaled = t.raw * e.scale;
    t.masked = e.kind == model::AttentionKind::Causal && j > query;
    t.model_weight = w(0, head, query, j);
    if (!t.masked) top = std::max(top, t.scaled);
    e.keys.push_back(t);
    e.k.push_back(kj);
    e.v.push_back(at(cache[name + ".hook_v"], head, j));
  }
  double total = 0;
  for (auto& t : e.keys)
    if (!t.masked) total += std::exp(t.scaled - top);
  e.output.assign(e.v.empty() ? 0 : e.v[0].size(), 0.0);
  for (auto& t : e.keys) {
    t.weight = t.masked ? 0.0 : std::exp(t.scaled - top) / total;
    for (std::size_t d = 0; d < e.output.size(); ++d) e.output[d] += t.weight * e.v[t.key][d];
    e.weight_error = std::max(e.weight_error, std::abs(t.weight - t.model_weight));
  }
  e.model_output = at(cache[name + ".hook_z"], head, query);
  for (std::size_t d = 0; d < e.output.size(); ++d)
    e.output_error = std::max(e.output_error, std::abs(e.output[d] - e.model_output[d]));
  return e;
}

std::string format_explanation(const QueryExplanation& e, std::size_t dims) {
  std::ostringstream out;
  char b[512];
  const char* kind = e.kind == model::AttentionKind::Causal ? "causal self-attention"
                     : e.kind == model::AttentionKind::Cross ? "cross-attention: queries from the target, keys from the source"
                                                             : "self-attention";
  const std::size_t D = e.q.size(), Tk = e.keys.size();
  out << "layer " << e.layer_index << " (" << e.layer << ", " << kind << "), head " << e.head << ", query " << e.query
      << " " << shown(e.query_tokens[e.query]) << "\n";
  out << (e.kind == model::AttentionKind::Cross ? "query tokens:" : "tokens:");
  for (std::size_t i = 0; i < e.query_tokens.size(); ++i) out << " " << i << ":" << shown(e.query_tokens[i]);
  if (e.kind == model::AttentionKind::Cross) {
    out << "\nkey tokens:";
    for (std::size_t j = 0; j < Tk; ++j) out << " " << j << ":" << shown(e.key_tokens[j]);
  }
  std::snprintf(b, sizeof b, "\n\n1. the query  q = W_q x_%zu + b_q  (D = %zu), |q| = %.4f\n   q[0:%zu] = %s\n", e.query, D,
                norm(e.q), std::min(dims, D), vec(e.q, dims).c_str());
  out << b;
  const bool default_scale = std::abs(e.scale - 1 / std::sqrt(double(D))) <= 1e-12;
  std::snprintf(b, sizeof b, "\n2. scores  s_j = q . k_j, scaled by %.6f (%s1/sqrt(%zu))%s\n", e.scale,
                default_scale ? "= " : "set by the layer, not ", D,
                e.kind == model::AttentionKind::Causal ? "; causal mask: keys after the query are masked" : "");
  out << b;
  std::snprintf(b, sizeof b, "\n3. weights  w_j = exp(a_j - max a) / sum_k exp(a_k - max a)\n\n  %4s  %-8s %10s %10s %10s\n",
                "key", "token", "q.k", "scaled a", "weight");
  out << b;
  for (auto& t : e.keys) {
    if (t.masked)
      std::snprintf(b, sizeof b, "  %4zu  %-8s %10.4f %10s %10s\n", t.key, shown(e.key_tokens[t.key]).c_str(), t.raw,
                    "-inf", "masked");
    else
      std::snprintf(b, sizeof b, "  %4zu  %-8s %10.4f %10.4f %10.4f\n", t.key, shown(e.key_tokens[t.key]).c_str(), t.raw,
                    t.scaled, t.weight);
    out << b;
  }
  std::vector<const KeyTerm*> by_weight;
  for (auto& t : e.keys)
    if (!t.masked) by_weight.push_back(&t);
  std::stable_sort(by_weight.begin(), by_weight.end(), [](auto* x, auto* y) { return x->weight > y->weight; });
  out << "\n4. keys by weight\n";
  const std::size_t shown_keys = std::min<std::size_t>(by_weight.size(), 16);
  for (std::size_t r = 0; r < shown_keys; ++r) {
    const KeyTerm& t = *by_weight[r];
    const std::string bar(std::size_t(std::lround(40 * t.weight)), '#');
    std::snprintf(b, sizeof b, "  %4zu  %-8s %8.4f  %s\n", t.key, shown(e.key_tokens[t.key]).c_str(), t.weight, bar.c_str());
    out << b;
  }
  if (by_weight.size() > shown_keys) out << "  (" << by_weight.size() - shown_keys << " more keys, weights below)\n";

  const std::size_t Dv = e.output.size();
  std::snprintf(b, sizeof b, "\n5. the output  z = sum_j w_j v_j  (Dv = %zu), |z| = %.4f\n   z[0:%zu] = %s\n", Dv,
                norm(e.output), std::min(dims, Dv), vec(e.output, dims).c_str());
  out << b;
  out << "   largest contributions |w_j v_j|:";
  std::vector<std::pair<double, std::size_t>> contrib;
  for (auto* t : by_weight) contrib.push_back({t->weight * norm(e.v[t->key]), t->key});
  std::stable_sort(contrib.begin(), contrib.end(), [](auto& x, auto& y) { return x.first > y.first; });
  for (std::size_t r = 0; r < std::min<std::size_t>(contrib.size(), 3); ++r) {
    const std::size_t j = contrib[r].second;
    std::snprintf(b, sizeof b, "%s key %zu %s (%.4f x |v| %.4f = %.4f)", r ? "," : "", j, shown(e.key_tokens[j]).c_str(),
                  e.keys[j].weight, norm(e.v[j]), contrib[r].first);
    out << b;
  }
  if (!e.program_words.empty()) {
    out << "\n\nin the program's words:";
    for (auto& line : e.program_words) out << "\n  " << line;
  }
  std::snprintf(b, sizeof b,
                "\n\ncheck: these weights match the layer's to %.1e, the output to %.1e (float32 model, recomputed in double)\n",
                e.weight_error, e.output_error);
  out << b;
  return out.str();
}

std::string explanation_json(const QueryExplanation& e) {
  std::ostringstream out;
  out << "{\"layer\":" << json_string(e.layer) << ",\"layer_index\":" << e.layer_index << ",\"head\":" << e.head
      << ",\"query\":" << e.query << ",\"kind\":" << json_string(model::attention_kind_name(e.kind))
      << ",\"query_tokens\":" << json_array(e.query_tokens) << ",\"key_tokens\":" << json_array(e.key_tokens)
      << ",\"q\":" << json_array(e.q) << ",\"scale\":" << json_number(e.scale) << ",\"keys\":[";
  for (std::size_t j = 0; j < e.keys.size(); ++j) {
    const KeyTerm& t = e.keys[j];
    out << (j ? "," : "") << "{\"key\":" << t.key << ",\"token\":" << json_string(e.key_tokens[j])
        << ",\"raw\":" << json_number(t.raw) << ",\"scaled\":" << json_number(t.scaled)
        << ",\"masked\":" << (t.masked ? "true" : "false") << ",\"weight\":" << json_number(t.weight)
        << ",\"model_weight\":" << json_number(t.model_weight) << ",\"k\":" << json_array(e.k[j])
        << ",\"v\":" << json_array(e.v[j]) << "}";
  }
  out << "],\"output\":" << json_array(e.output) << ",\"model_output\":" << json_array(e.model_output)
      << ",\"weight_error\":" << json_number(e.weight_error) << ",\"output_error\":" << json_number(e.output_error)
      << ",\"program_words\":" << json_array(e.program_words) << "}\n";
  return out.str();
}

}  // namespace qkv::interp

namespace qkv::interp {

std::string format_query_survey(const std::vector<QueryExplanation>& heads, std::size_t top) {
  if (heads.empty()) return "";
  std::ostringstream out;
  const QueryExplanation& first = heads.front();
  out << "query " << first.query << " " << shown(first.query_tokens[first.query]) << "; tokens:";
  for (std::size_t i = 0; i < first.query_tokens.size(); ++i) out << " " << i << ":" << shown(first.query_tokens[i]);
  out << "\nper head, the keys with the largest weights:\n";
  char b[128];
  for (const QueryExplanation& e : heads) {
    std::vector<const KeyTerm*> keys;
    for (auto& t : e.keys)
      if (!t.masked) keys.push_back(&t);
    std::stable_sort(keys.begin(), keys.end(), [](auto* x, auto* y) { return x->weight > y->weight; });
    std::snprintf(b, sizeof b, "  %3zu.%-3zu", e.layer_index, e.head);
    out << b;
    for (std::size_t r = 0; r < std::min(top, keys.size()); ++r) {
      std::snprintf(b, sizeof b, "  %3zu %-6s %.3f", keys[r]->key, shown(e.key_tokens[keys[r]->key]).c_str(), keys[r]->weight);
      out << b;
    }
    out << "\n";
  }
  return out.str();
}

std::string explanations_json(const std::vector<QueryExplanation>& heads) {
  std::string out = "[";
  for (std::size_t i = 0; i < heads.size(); ++i) {
    std::string one = explanation_json(heads[i]);
    while (!one.empty() && one.back() == '\n') one.pop_back();
    out += (i ? ",\n" : "") + one;
  }
  return out + "]\n";
}

namespace {

// The comment the program writes on the line of `sop`'s definition ("" without one).
std::string sop_note(const model::CompiledInfo& info, const std::string& sop) {
  for (auto& op : info.ops)
    if (op.sop == sop) {
      std::istringstream lines(info.program);
      std::string line;
      for (std::size_t n = 1; std::getline(lines, line); ++n)
        if (n == op.line) {
          const auto hash = line.find('#');
          if (hash == std::string::npos) return "";
          return line.substr(hash);
        }
    }
  return "";
}

// "sop = value" at position t of the residual `x` (1, T, C).
std::string sop_value(const Array<float>& x, const std::vector<std::string>& labels, const std::string& sop,
                      std::size_t t) {
  const std::string v = model::sop_value(x.data() + t * x.shape()[2], labels, sop);
  return sop + " = " + (v.empty() ? "None" : v);
}

// QueryExplanation::program_words of head `e` of a compiled model, whose residual stream before
// each block (blocks.L.hook_resid_pre) is in `resid`.
void describe_compiled(QueryExplanation& e, const model::CompiledInfo& info, nn::ActivationCache<float>& resid) {
  const std::string component = std::to_string(e.layer_index) + "." + std::to_string(e.head);
  const model::CompiledOp* op = nullptr;
  for (auto& o : info.ops)
    if (o.component == component) op = &o;
  if (!op) {
    e.program_words.push_back("head " + component + " computes nothing of the program (its weights are zero)");
    return;
  }
  e.program_words.push_back("head " + component + " computes " + op->sop + " (" + op->op + ", line " +
                            std::to_string(op->line) + ": " + op->expr + ")");
  const Array<float>& x = resid["blocks." + std::to_string(e.layer_index) + ".hook_resid_pre"];
  const KeyTerm* heaviest = nullptr;
  for (auto& t : e.keys)
    if (!t.masked && (!heaviest || t.weight > heaviest->weight)) heaviest = &t;
  for (const char* port : {"q", "k"}) {
    const bool query = std::string(port) == "q";
    if (!query && !heaviest) continue;
    const std::size_t at = query ? e.query : heaviest->key;
    for (auto& edge : info.edges)
      if (edge.to == component && edge.port == port) {
        const std::string note = sop_note(info, edge.sop);
        e.program_words.push_back(std::string(query ? "the query " : "the heaviest key ") + std::to_string(at) + " " +
                                  shown((query ? e.query_tokens : e.key_tokens)[at]) + " holds " +
                                  sop_value(x, info.residual, edge.sop, at) + (note.empty() ? "" : "  " + note));
      }
  }
  if (!heaviest || op->qk_dims.size() > e.q.size()) return;  // dimensions past qk_dims are unused (zero)
  std::vector<std::pair<double, std::size_t>> terms;
  for (std::size_t d = 0; d < op->qk_dims.size(); ++d) terms.push_back({e.q[d] * e.k[heaviest->key][d], d});
  std::stable_sort(terms.begin(), terms.end(), [](auto& a, auto& b) { return std::abs(a.first) > std::abs(b.first); });
  std::string line = "q . k_" + std::to_string(heaviest->key) + " = " + json_number(heaviest->raw) +
                     " = sum_d q_d k_d; its largest terms:";
  for (std::size_t r = 0; r < std::min<std::size_t>(3, terms.size()) && terms[r].first != 0; ++r) {
    const std::size_t d = terms[r].second;
    char b[160];
    std::snprintf(b, sizeof b, "%s %s (%.4g x %.4g)", r ? "," : "", op->qk_dims[d].c_str(), e.q[d],
                  e.k[heaviest->key][d]);
    line += b;
  }
  e.program_words.push_back(line);
}

}  // namespace

std::vector<QueryExplanation> explain(model::LoadedModel& l, const ExplainRequest& r) {
  if (r.head && !r.layer) field_error("head", "give its {layer} too");
  data::Batch row;
  with_prefix("input.", [&] { row = model::input_row(l, r.input).row; });
  nn::ActivationCache<float> resid;  // compiled models: every block's input, once
  if (l.compiled) {
    NoGradGuard no_grad;
    resid = nn::run_with_cache(l.model->module(), [&] { l.model->logits(row); }, {"blocks.*.hook_resid_pre"});
  }
  auto one = [&](std::size_t layer, std::size_t head) {
    QueryExplanation e = explain_query(*l.model, *l.task, row, layer, head, r.query);
    if (l.compiled) describe_compiled(e, *l.compiled, resid);
    return e;
  };
  if (r.layer && r.head) return {one(*r.layer, *r.head)};
  const auto layers = model::attention_layers(*l.model);
  if (r.layer && *r.layer >= layers.size())
    field_error("layer", "the model has " + std::to_string(layers.size()) + " attention layers (" + range(layers.size()) + ")",
                std::to_string(*r.layer));
  std::vector<QueryExplanation> all;
  for (std::size_t layer = 0; layer < layers.size(); ++layer)
    if (!r.layer || layer == *r.layer)
      for (std::size_t head = 0; head < layers[layer].second->num_heads(); ++head)
        all.push_back(one(layer, head));
  return all;
}

}  // namespace qkv::interp
