#include "qkv/interp/head_scores.hpp"

#include "qkv/io/json.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>

#include "qkv/autograd/tape.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/model/evaluate.hpp"

namespace qkv::interp {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Dims {
  std::size_t B, H, Tq, Tk;
};
Dims dims(const Array<float>& w) {
  if (w.dimension() != 4) throw ShapeError("head scores: expected attention weights (B, H, Tq, Tk), found " + shape_str(w.shape()));
  return {w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]};
}
const float* row(const Array<float>& w, const Dims& d, std::size_t b, std::size_t h, std::size_t i) {
  return w.data() + ((b * d.H + h) * d.Tq + i) * d.Tk;
}

}  // namespace

std::vector<double> diagonal_scores(const Array<float>& w, long offset, std::size_t first_query) {
  const Dims d = dims(w);
  std::vector<double> out(d.H, kNaN);
  for (std::size_t h = 0; h < d.H; ++h) {
    double total = 0;
    std::size_t n = 0;
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t i = first_query; i < d.Tq; ++i) {
        const long j = long(i) + offset;
        if (j < 0 || j >= long(d.Tk)) continue;
        total += row(w, d, b, h, i)[j];
        ++n;
      }
    if (n) out[h] = total / double(n);
  }
  return out;
}

std::vector<double> column_scores(const Array<float>& w, std::size_t key, std::size_t first_query) {
  const Dims d = dims(w);
  std::vector<double> out(d.H, kNaN);
  if (key >= d.Tk) return out;
  for (std::size_t h = 0; h < d.H; ++h) {
    double total = 0;
    std::size_t n = 0;
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t i = first_query; i < d.Tq; ++i, ++n) total += row(w, d, b, h, i)[key];
    if (n) out[h] = total / double(n);
  }
  return out;
}

std::vector<std::pair<double, double>> entropy_and_max(const Array<float>& w) {
  const Dims d = dims(w);
  std::vector<std::pair<double, double>> out(d.H, {kNaN, kNaN});
  for (std::size_t h = 0; h < d.H; ++h) {
    double entropy = 0, max_weight = 0;
    std::size_t n = 0;
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t i = 0; i < d.Tq; ++i) {
        const float* p = row(w, d, b, h, i);
        double e = 0, mx = 0, total = 0;
        for (std::size_t j = 0; j < d.Tk; ++j) {
          total += p[j];
          if (p[j] > 0) e -= p[j] * std::log(double(p[j]));
          mx = std::max(mx, double(p[j]));
        }
        if (total <= 0) continue;  // a fully masked row
        entropy += e, max_weight += mx, ++n;
      }
    if (n) out[h] = {entropy / double(n), max_weight / double(n)};
  }
  return out;
}

std::vector<double> retrieval_scores(const Array<float>& w, const IndexArray& tokens, const IndexArray& targets) {
  return retrieval_scores(w, tokens, tokens, targets, true);
}

std::vector<double> retrieval_scores(const Array<float>& w, const IndexArray& query_tokens, const IndexArray& key_tokens,
                                     const IndexArray& targets, bool earlier) {
  const Dims d = dims(w);
  if (query_tokens.dimension() != 2 || query_tokens.shape()[0] != d.B || query_tokens.shape()[1] != d.Tq ||
      targets.shape() != query_tokens.shape())
    throw ShapeError("retrieval score: tokens " + shape_str(query_tokens.shape()) + " and targets " +
                     shape_str(targets.shape()) + " must both be (B, Tq) of the weights " + shape_str(w.shape()));
  if (key_tokens.dimension() != 2 || key_tokens.shape()[0] != d.B || key_tokens.shape()[1] != d.Tk)
    throw ShapeError("retrieval score: key tokens " + shape_str(key_tokens.shape()) + " must be (B, Tk) of the weights " +
                     shape_str(w.shape()));
  std::vector<double> out(d.H, kNaN);
  std::vector<std::size_t> hits(d.H, 0);
  std::size_t n = 0;
  for (std::size_t b = 0; b < d.B; ++b)
    for (std::size_t i = 0; i < d.Tq; ++i) {
      if (targets(b, i) == data::kIgnore) continue;
      const std::size_t end = earlier ? std::min(i, d.Tk) : d.Tk;
      std::size_t j = 0;
      while (j < end && key_tokens(b, j) != query_tokens(b, i)) ++j;
      if (j == end || j + 1 >= d.Tk) continue;  // no (earlier) occurrence: nothing to retrieve
      ++n;
      for (std::size_t h = 0; h < d.H; ++h) {
        const float* p = row(w, d, b, h, i);
        const std::size_t best = std::size_t(std::max_element(p, p + d.Tk) - p);
        hits[h] += best == j || best == j + 1;
      }
    }
  if (n)
    for (std::size_t h = 0; h < d.H; ++h) out[h] = double(hits[h]) / double(n);
  return out;
}

namespace {
// The words and relations of `b`, checked against weights of T x T.
void check_relations(const data::Batch& b, const Dims& d, std::size_t relation) {
  if (b.words.dimension() != 2 || b.relations.dimension() != 3 || b.words.shape()[0] != d.B || b.words.shape()[1] != d.Tq ||
      d.Tq != d.Tk || b.relations.shape()[0] != d.B || b.relations.shape()[2] != d.Tq || relation >= b.relations.shape()[1])
    throw ShapeError("role scores: words " + shape_str(b.words.shape()) + " and relations " + shape_str(b.relations.shape()) +
                     " must be (B, T) and (B, R > " + std::to_string(relation) + ", T) for the weights " +
                     shape_str(Shape{d.B, d.H, d.Tq, d.Tk}));
}
}  // namespace

std::vector<double> role_scores(const Array<float>& w, const data::Batch& b, std::size_t relation, std::size_t* count) {
  const Dims d = dims(w);
  check_relations(b, d, relation);
  const std::size_t T = d.Tq;
  std::vector<std::size_t> hits(d.H, 0);
  std::size_t n = 0;
  for (std::size_t i = 0; i < d.B; ++i)
    for (std::size_t t = 0; t < T; ++t) {
      const Index partner = b.relations(i, relation, t);
      if (partner < 0) continue;
      ++n;
      for (std::size_t h = 0; h < d.H; ++h) {
        const float* p = row(w, d, i, h, t);
        const std::size_t best = std::size_t(std::max_element(p, p + T) - p);
        hits[h] += b.words(i, best) == partner;
      }
    }
  if (count) *count = n;
  std::vector<double> out(d.H, kNaN);
  if (n)
    for (std::size_t h = 0; h < d.H; ++h) out[h] = double(hits[h]) / double(n);
  return out;
}

OffsetBaseline role_baseline(const data::Batch& b, std::size_t relation) {
  const std::size_t B = b.words.shape()[0], T = b.words.shape()[1];
  check_relations(b, Dims{B, 1, T, T}, relation);
  OffsetBaseline best{0, kNaN, 0};
  std::vector<std::size_t> hits(2 * T, 0);  // offset o at hits[o + T]
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t t = 0; t < T; ++t) {
      const Index partner = b.relations(i, relation, t);
      if (partner < 0) continue;
      ++best.count;
      for (std::size_t k = 0; k < T; ++k) hits[k + T - t] += b.words(i, k) == partner;
    }
  if (!best.count) return best;
  best.share = -1;
  for (std::size_t o = 0; o < 2 * T; ++o) {
    const double share = double(hits[o]) / double(best.count);
    if (share > best.share) best.share = share, best.offset = long(o) - long(T);
  }
  return best;
}

std::vector<OffsetBaseline> role_baselines(const data::Task& task, const data::Batch& batch) {
  std::vector<OffsetBaseline> out;
  if (batch.relations.dimension() != 3) return out;
  for (std::size_t r = 0; r < task.relation_names().size(); ++r) out.push_back(role_baseline(batch, r));
  return out;
}

std::vector<std::string> score_names(const data::Task* task) {
  std::vector<std::string> names = {"entropy", "max_weight", "previous_token", "first_token", "self", "induction", "retrieval"};
  if (task) names.insert(names.end(), task->relation_names().begin(), task->relation_names().end());
  return names;
}

double score(const HeadScores& s, const std::string& name) {
  for (auto& [relation, value] : s.roles)
    if (relation == name) return value;
  if (name == "entropy") return s.entropy;
  if (name == "max_weight") return s.max_weight;
  if (name == "previous_token") return s.previous_token;
  if (name == "first_token") return s.first_token;
  if (name == "self") return s.self;
  if (name == "induction") return s.induction;
  if (name == "retrieval") return s.retrieval;
  return kNaN;
}

std::string head_label(const HeadScores& s, const LabelThresholds& t, const std::vector<double>& baselines) {
  // A relation first: a head that finds a partner more often than any fixed offset does.
  std::string role;
  double lead = t.role_margin;
  for (std::size_t r = 0; r < s.roles.size() && r < baselines.size(); ++r) {
    const double x = s.roles[r].second;
    if (x >= t.role && x - baselines[r] >= lead) lead = x - baselines[r], role = s.roles[r].first;
  }
  if (!role.empty()) return role;
  const std::pair<const char*, std::pair<double, double>> candidates[] = {
      {"previous-token", {s.previous_token, t.previous_token}},
      {"first-token", {s.first_token, t.first_token}},
      {"self", {s.self, t.self}},
      {"induction", {s.induction, t.induction}},
      {"retrieval", {s.retrieval, t.retrieval}}};
  std::string label;
  double best = 1;  // score / threshold must reach 1
  for (auto& [name, st] : candidates)
    if (st.first >= st.second && st.first / st.second >= best) best = st.first / st.second, label = name;
  return label;
}

IndexArray repeated_random_tokens(std::size_t count, std::size_t T, std::size_t vocab, std::uint64_t seed) {
  IndexArray out = IndexArray::from_shape({count, T});
  const std::size_t N = T / 2;
  for (std::size_t r = 0; r < count; ++r) {
    Generator gen(hash64(seed, r));
    Index* p = out.data() + r * T;
    for (std::size_t t = 0; t < N; ++t) p[t] = Index(gen.randint(vocab));
    for (std::size_t t = N; t < T; ++t) p[t] = p[std::min(t - N, N - 1)];
    if (T % 2 && N) p[T - 1] = p[N - 1];
  }
  return out;
}

std::vector<HeadScores> pattern_scores(const std::vector<LayerPattern>& layers, const data::Task& task,
                                       const data::Batch& batch, const LabelThresholds& thresholds) {
  const bool recall = task.name() == "recall" || task.name() == "mqar" || task.name() == "seq2seq_recall";
  const std::vector<std::string>& relations = task.relation_names();
  const bool roles = !relations.empty() && batch.relations.dimension() == 3;
  std::vector<double> baselines;
  for (auto& b : role_baselines(task, batch)) baselines.push_back(b.share);
  std::vector<HeadScores> out;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Array<float>& w = *layers[l].weights;
    const bool same_sequence = layers[l].kind != model::AttentionKind::Cross;
    const auto em = entropy_and_max(w);
    const auto first = column_scores(w, 0, 1);
    std::vector<double> prev, self, retrieval;
    if (same_sequence) {
      prev = diagonal_scores(w, -1, 1);
      self = diagonal_scores(w, 0, 0);
      if (recall && !task.seq2seq()) retrieval = retrieval_scores(w, batch.inputs, batch.targets);
    } else if (recall) {  // the decoder's queries look up their keys in the source
      retrieval = retrieval_scores(w, batch.decoder_inputs, batch.inputs, batch.targets, false);
    }
    std::vector<std::vector<double>> role(relations.size());
    for (std::size_t r = 0; roles && same_sequence && r < relations.size(); ++r) role[r] = role_scores(w, batch, r);
    for (std::size_t h = 0; h < em.size(); ++h) {
      HeadScores s;
      s.layer = layers[l].name, s.layer_index = l, s.head = h, s.kind = layers[l].kind;
      s.entropy = em[h].first, s.max_weight = em[h].second, s.first_token = first[h];
      if (same_sequence) s.previous_token = prev[h], s.self = self[h];
      if (!retrieval.empty()) s.retrieval = retrieval[h];
      for (std::size_t r = 0; r < relations.size(); ++r) s.roles.emplace_back(relations[r], role[r].empty() ? kNaN : role[r][h]);
      s.label = head_label(s, thresholds, baselines);
      out.push_back(s);
    }
  }
  return out;
}

namespace {
// Every layer's hook_pattern over `b`, in batches of `batch_size` rows, concatenated along B.
std::vector<Array<float>> patterns(model::TaskModel& model, const data::Batch& b, std::size_t batch_size) {
  const auto layers = model::attention_layers(model);
  std::vector<std::vector<Array<float>>> parts(layers.size());
  const std::size_t N = b.size();
  for (std::size_t lo = 0; lo < N; lo += batch_size) {
    const data::Batch part = data::rows(b, lo, std::min(N, lo + batch_size));
    auto cache = nn::run_with_cache(model.module(), [&] { model.logits(part); }, {"*.hook_pattern"});
    for (std::size_t l = 0; l < layers.size(); ++l) parts[l].push_back(cache[layers[l].first + ".hook_pattern"]);
  }
  std::vector<Array<float>> out;
  for (auto& p : parts) {
    if (p.size() == 1) {
      out.push_back(std::move(p[0]));
      continue;
    }
    Shape s = p[0].shape();
    s[0] = N;
    Array<float> all = Array<float>::from_shape(s);
    float* dst = all.data();
    for (auto& a : p) dst = std::copy(a.data(), a.data() + a.size(), dst);
    out.push_back(std::move(all));
  }
  return out;
}
}  // namespace

std::vector<std::vector<double>> induction_scores(model::TaskModel& model, const data::Task& task, std::size_t count,
                                                  std::uint64_t seed, std::size_t batch_size) {
  const std::size_t T = task.input_length();
  // The induction score asks what a next-token predictor does on a repeat: it means nothing for
  // a model that labels positions (sort, recall) or fills masks.
  if (task.seq2seq() || !task.next_token() || T < 4 || count == 0) return {};
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  data::Batch r;
  r.inputs = repeated_random_tokens(count, T, task.input_vocab(), seed);
  r.targets = r.inputs;
  r.decoder_inputs = IndexArray::from_shape({0});
  const std::vector<Array<float>> w = patterns(model, r, batch_size);
  const auto layers = model::attention_layers(model);
  const std::size_t N = T / 2;
  std::vector<std::vector<double>> out;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    out.push_back(diagonal_scores(w[l], 1 - long(N), N));
    if (model.attention_kind(*layers[l].second) == model::AttentionKind::Cross)
      std::fill(out.back().begin(), out.back().end(), kNaN);
  }
  if (was_training) model.module().train();
  return out;
}

std::vector<HeadScores> head_scores(model::TaskModel& model, const data::Task& task, const data::Batch& heldout,
                                    const HeadScoreOptions& o) {
  if (o.examples == 0) throw ValueError("head scores: --examples must be at least 1");
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const data::Batch b = data::rows(heldout, 0, std::min(o.examples, heldout.size()));
  const auto layers = model::attention_layers(model);
  const std::vector<Array<float>> w = patterns(model, b, o.batch_size);
  std::vector<LayerPattern> lp;
  for (std::size_t l = 0; l < layers.size(); ++l) lp.push_back({layers[l].first, model.attention_kind(*layers[l].second), &w[l]});
  std::vector<HeadScores> out = pattern_scores(lp, task, b, o.thresholds);

  std::vector<double> baselines;
  for (auto& base : role_baselines(task, b)) baselines.push_back(base.share);
  const auto ind = induction_scores(model, task, b.size(), o.seed, o.batch_size);
  for (std::size_t l = 0, k = 0; l < ind.size(); ++l)
    for (std::size_t h = 0; h < ind[l].size(); ++h, ++k) {
      out[k].induction = ind[l][h];
      out[k].label = head_label(out[k], o.thresholds, baselines);
    }
  if (was_training) model.module().train();
  return out;
}

namespace {
std::string cell(double x, const char* fmt = "%.3f") {
  if (std::isnan(x)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, fmt, x);
  return b;
}
}  // namespace

std::string format_head_scores(const std::vector<HeadScores>& scores, const std::vector<OffsetBaseline>& baselines) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %4s %-6s %8s %8s %8s %8s %8s %8s %8s  %s\n", "layer", "head", "kind", "entropy",
                "max_w", "prev", "first", "self", "induct", "retriev", "label");
  out << line;
  for (auto& s : scores) {
    std::snprintf(line, sizeof line, "%-22s %4zu %-6s %8s %8s %8s %8s %8s %8s %8s  %s\n", s.layer.c_str(), s.head,
                  model::attention_kind_name(s.kind), cell(s.entropy).c_str(), cell(s.max_weight).c_str(),
                  cell(s.previous_token).c_str(), cell(s.first_token).c_str(), cell(s.self).c_str(),
                  cell(s.induction).c_str(), cell(s.retrieval).c_str(), s.label.c_str());
    out << line;
  }
  if (scores.empty() || scores.front().roles.empty()) return out.str();
  // Role scores: a column per relation, and the best fixed offset as the row to beat.
  out << "\nrole scores: the share of tokens having the relation whose largest weight falls on their partner\n";
  out << "  head  ";
  for (auto& [name, v] : scores.front().roles) out << ' ' << std::string(std::max<std::size_t>(15, name.size()) - name.size(), ' ') << name;
  out << '\n';
  auto widths = [&](std::size_t r) { return std::max<std::size_t>(15, scores.front().roles[r].first.size()); };
  for (auto& s : scores) {
    std::snprintf(line, sizeof line, "  %3zu.%-3zu", s.layer_index, s.head);
    out << line;
    for (std::size_t r = 0; r < s.roles.size(); ++r) {
      const std::string c = cell(s.roles[r].second);
      out << ' ' << std::string(widths(r) - c.size(), ' ') << c;
    }
    out << '\n';
  }
  if (!baselines.empty()) {
    out << "  offset ";
    for (std::size_t r = 0; r < baselines.size() && r < scores.front().roles.size(); ++r) {
      char b[48];
      if (std::isnan(baselines[r].share)) std::snprintf(b, sizeof b, "-");
      else std::snprintf(b, sizeof b, "%.3f (%+ld)", baselines[r].share, baselines[r].offset);
      out << ' ' << std::string(widths(r) > std::strlen(b) ? widths(r) - std::strlen(b) : 0, ' ') << b;
    }
    out << "   (the best fixed offset)\n  tokens ";
    for (std::size_t r = 0; r < baselines.size() && r < scores.front().roles.size(); ++r) {
      const std::string c = std::to_string(baselines[r].count);
      out << ' ' << std::string(widths(r) - c.size(), ' ') << c;
    }
    out << "   (having the relation)\n";
  }
  return out.str();
}

std::string head_scores_csv(const std::vector<HeadScores>& scores, const std::vector<OffsetBaseline>& baselines) {
  std::ostringstream out;
  std::vector<std::string> names = score_names();
  if (!scores.empty())
    for (auto& [relation, v] : scores.front().roles) names.push_back(relation);
  out << "layer,layer_index,head,kind";
  for (auto& n : names) out << ',' << n;
  out << ",label\n";
  for (auto& s : scores) {
    out << s.layer << ',' << s.layer_index << ',' << s.head << ',' << model::attention_kind_name(s.kind);
    for (auto& n : names) {
      const double x = score(s, n);
      out << ',' << (std::isnan(x) ? std::string() : cell(x, "%.9g"));
    }
    out << ',' << s.label << '\n';
  }
  if (!baselines.empty()) {
    out << "baseline,,,";
    for (std::size_t k = 0; k < score_names().size(); ++k) out << ',';
    for (auto& b : baselines) out << ',' << (std::isnan(b.share) ? std::string() : cell(b.share, "%.9g"));
    out << ",best fixed offset\n";
  }
  return out.str();
}

std::vector<Array<double>> head_divergence(model::TaskModel& model, const data::Batch& heldout, std::size_t examples,
                                           std::size_t batch_size) {
  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(model.module());
  const data::Batch b = data::rows(heldout, 0, std::min(examples, heldout.size()));
  const std::vector<Array<float>> w = patterns(model, b, batch_size);
  std::vector<Array<double>> out;
  for (const Array<float>& layer : w) out.push_back(pattern_divergence(layer));
  return out;
}

Array<double> pattern_divergence(const Array<float>& layer) {
  const Dims d = dims(layer);
  Array<double> js = Array<double>::from_shape({d.H, d.H});
  std::fill(js.begin(), js.end(), 0.0);
  std::size_t rows = 0;
  for (std::size_t e = 0; e < d.B; ++e)
    for (std::size_t i = 0; i < d.Tq; ++i) {
      const float* first = row(layer, d, e, 0, i);
      if (std::accumulate(first, first + d.Tk, 0.0) <= 0) continue;  // a fully masked row
      ++rows;
      for (std::size_t a = 0; a < d.H; ++a)
        for (std::size_t c = a + 1; c < d.H; ++c) {
          const float* p = row(layer, d, e, a, i);
          const float* q = row(layer, d, e, c, i);
          double kl_p = 0, kl_q = 0;
          for (std::size_t j = 0; j < d.Tk; ++j) {
            const double m = 0.5 * (double(p[j]) + double(q[j]));
            if (p[j] > 0) kl_p += p[j] * std::log2(p[j] / m);
            if (q[j] > 0) kl_q += q[j] * std::log2(q[j] / m);
          }
          js(a, c) += 0.5 * (kl_p + kl_q);
        }
    }
  for (std::size_t a = 0; a < d.H; ++a)
    for (std::size_t c = a + 1; c < d.H; ++c) js(c, a) = js(a, c) = rows ? js(a, c) / double(rows) : kNaN;
  return js;
}

std::string head_divergence_csv(model::TaskModel& model, const std::vector<Array<double>>& divergence) {
  const auto layers = model::attention_layers(model);
  std::string out = "layer,layer_index,head_a,head_b,js_bits\n";
  for (std::size_t l = 0; l < divergence.size() && l < layers.size(); ++l) {
    const std::size_t H = divergence[l].shape()[0];
    for (std::size_t a = 0; a < H; ++a)
      for (std::size_t c = a + 1; c < H; ++c)
        out += layers[l].first + "," + std::to_string(l) + "," + std::to_string(a) + "," + std::to_string(c) + "," +
               cell(divergence[l](a, c), "%.9g") + "\n";
  }
  return out;
}

HeadsResult heads(model::LoadedModel& l, const HeadsRequest& r) {
  if (r.examples == 0) field_error("examples", "expected at least 1 held-out example");
  if (!l.data) field_error("data", "head scores need the model's held-out data, which was not loaded");
  const data::Batch& test = l.data->test_set();
  HeadScoreOptions o;
  o.examples = r.examples;
  HeadsResult out;
  out.examples = std::min(r.examples, test.size());
  out.score_names = score_names(l.task.get());
  out.heads = head_scores(*l.model, *l.task, test, o);
  out.baselines = role_baselines(*l.task, data::rows(test, 0, out.examples));
  if (r.similarity) out.similarity = head_divergence(*l.model, test, r.examples);
  return out;
}

std::string to_json(const HeadsResult& r) {
  json::Writer w;
  w.open('{').member("examples", r.examples).key("score_names").open('[');
  for (auto& n : r.score_names) w.value(n);
  w.close(']').key("heads").open('[');
  for (auto& h : r.heads) {
    w.open('{').member("layer", h.layer).member("layer_index", h.layer_index).member("head", h.head)
        .member("kind", model::attention_kind_name(h.kind));
    for (auto& n : r.score_names) w.member(n, score(h, n));
    w.member("label", h.label).close('}');
  }
  w.close(']').key("baselines").open('{');
  const std::vector<std::string> relations(r.score_names.end() - long(r.baselines.size()), r.score_names.end());
  for (std::size_t i = 0; i < r.baselines.size(); ++i)
    w.key(relations[i]).open('{').member("offset", std::int64_t(r.baselines[i].offset)).member("share", r.baselines[i].share)
        .member("count", r.baselines[i].count).close('}');
  w.close('}').key("similarity");
  if (r.similarity.empty()) {
    w.null();
  } else {
    w.open('[');
    for (auto& m : r.similarity) {
      const std::size_t H = m.shape()[0];
      w.open('[');
      for (std::size_t a = 0; a < H; ++a) {
        w.open('[');
        for (std::size_t b = 0; b < H; ++b) w.value(m(a, b));
        w.close(']');
      }
      w.close(']');
    }
    w.close(']');
  }
  w.close('}');
  return w.take();
}

}  // namespace qkv::interp
