#include "qkv/interp/head_scores.hpp"

#include "qkv/io/json.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <tuple>

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

namespace {
// Whether token t of row i counts under `which` (it has a partner under the relation).
bool selected(const data::Batch& b, std::size_t i, std::size_t relation, std::size_t t, const RoleTokens& which) {
  const Index partner = b.relations(i, relation, t);
  if (partner < 0) return false;
  if (which.scored && (b.targets.dimension() != 2 || b.targets(i, t) == data::kIgnore)) return false;
  if (which.miss_offset) {
    const long k = long(t) + *which.miss_offset, T = long(b.words.shape()[1]);
    if (k >= 0 && k < T && b.words(i, std::size_t(k)) == partner) return false;
  }
  return true;
}
// Per offset o (at hits[o + T]): how many selected tokens find their partner at t + o; and how
// many tokens were selected.
std::vector<std::size_t> offset_hits(const data::Batch& b, std::size_t relation, const RoleTokens& which, std::size_t& count) {
  const std::size_t B = b.words.shape()[0], T = b.words.shape()[1];
  check_relations(b, Dims{B, 1, T, T}, relation);
  RoleTokens any = which;
  any.miss_offset.reset();
  std::vector<std::size_t> hits(2 * T, 0);
  count = 0;
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t t = 0; t < T; ++t) {
      if (!selected(b, i, relation, t, any)) continue;
      ++count;
      const Index partner = b.relations(i, relation, t);
      for (std::size_t k = 0; k < T; ++k) hits[k + T - t] += b.words(i, k) == partner;
    }
  return hits;
}
}  // namespace

std::vector<double> role_scores(const Array<float>& w, const data::Batch& b, std::size_t relation, std::size_t* count) {
  return role_scores(w, b, relation, RoleTokens{}, count);
}

std::vector<double> role_scores(const Array<float>& w, const data::Batch& b, std::size_t relation, const RoleTokens& which,
                                std::size_t* count) {
  const Dims d = dims(w);
  check_relations(b, d, relation);
  if (which.scored && b.targets.shape() != b.words.shape())
    throw ShapeError("role scores at the scored tokens: targets " + shape_str(b.targets.shape()) + " must be (B, T) as the words " +
                     shape_str(b.words.shape()));
  const std::size_t T = d.Tq;
  std::vector<std::size_t> hits(d.H, 0);
  std::size_t n = 0;
  for (std::size_t i = 0; i < d.B; ++i)
    for (std::size_t t = 0; t < T; ++t) {
      if (!selected(b, i, relation, t, which)) continue;
      const Index partner = b.relations(i, relation, t);
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

std::vector<std::pair<long, double>> dominant_offsets(const Array<float>& w, const IndexArray& words) {
  const Dims d = dims(w);
  if (d.Tq != d.Tk) throw ShapeError("dominant offsets: expected self-attention weights (B, H, T, T), found " + shape_str(w.shape()));
  const bool tokens = words.dimension() == 2 && words.shape()[0] == d.B && words.shape()[1] == d.Tq;
  const std::size_t T = d.Tq;
  std::vector<std::pair<long, double>> out(d.H, {0, kNaN});
  for (std::size_t h = 0; h < d.H; ++h) {
    std::vector<std::size_t> counts(2 * T, 0);  // offset o at counts[o + T]
    std::size_t n = 0;
    for (std::size_t b = 0; b < d.B; ++b)
      for (std::size_t i = 0; i < T; ++i) {
        if (tokens && words(b, i) < 0) continue;
        const float* p = row(w, d, b, h, i);
        if (!tokens && std::accumulate(p, p + T, 0.0) <= 0) continue;  // a fully masked row
        const std::size_t best = std::size_t(std::max_element(p, p + T) - p);
        ++counts[best + T - i], ++n;
      }
    if (!n) continue;
    // The most frequent offset; ties to the one nearest 0, then the negative one: 0, -1, +1, -2, ...
    long best = 0;
    std::size_t most = counts[T];
    for (long k = 1; k < long(T); ++k)
      for (long o : {-k, k})
        if (counts[std::size_t(o + long(T))] > most) most = counts[std::size_t(o + long(T))], best = o;
    out[h] = {best, double(most) / double(n)};
  }
  return out;
}

OffsetBaseline role_baseline(const data::Batch& b, std::size_t relation) { return role_baseline(b, relation, RoleTokens{}); }

OffsetBaseline role_baseline(const data::Batch& b, std::size_t relation, const RoleTokens& which) {
  OffsetBaseline best{0, kNaN, 0};
  const std::vector<std::size_t> hits = offset_hits(b, relation, which, best.count);
  if (!best.count) return best;
  const std::size_t T = hits.size() / 2;
  best.share = -1;
  for (std::size_t o = 0; o < 2 * T; ++o) {
    const double share = double(hits[o]) / double(best.count);
    if (share > best.share) best.share = share, best.offset = long(o) - long(T);
  }
  return best;
}

double offset_share(const data::Batch& b, std::size_t relation, long offset, const RoleTokens& which, std::size_t* count) {
  std::size_t n = 0;
  const std::vector<std::size_t> hits = offset_hits(b, relation, which, n);
  if (count) *count = n;
  const long T = long(hits.size() / 2);
  if (!n) return kNaN;
  return offset <= -T || offset >= T ? 0.0 : double(hits[std::size_t(offset + T)]) / double(n);
}

std::vector<OffsetBaseline> role_baselines(const data::Task& task, const data::Batch& batch, const data::Batch* validation) {
  std::vector<OffsetBaseline> out;
  if (batch.relations.dimension() != 3) return out;
  const bool chosen_elsewhere = validation && validation->relations.dimension() == 3;
  RoleTokens scored;
  scored.scored = true;
  for (std::size_t r = 0; r < task.relation_names().size(); ++r) {
    OffsetBaseline o = role_baseline(batch, r);
    const OffsetBaseline pick = role_baseline(chosen_elsewhere ? *validation : batch, r, scored);
    o.scored_offset = pick.offset;
    if (chosen_elsewhere) o.validation_share = pick.share;
    o.scored_share = offset_share(batch, r, pick.offset, scored, &o.scored_count);
    std::size_t total = 0;
    const std::vector<std::size_t> hits = offset_hits(batch, r, scored, total);
    const long T = long(hits.size() / 2);
    o.off_offset_count = total - (pick.offset <= -T || pick.offset >= T ? 0 : hits[std::size_t(pick.offset + T)]);
    out.push_back(o);
  }
  return out;
}

std::vector<std::string> score_names(const data::Task* task) {
  std::vector<std::string> names = {"entropy", "max_weight", "previous_token", "first_token", "self", "induction", "retrieval"};
  if (task) names.insert(names.end(), task->relation_names().begin(), task->relation_names().end());
  return names;
}

namespace {
constexpr const char* kRoleSuffixes[] = {"@scored", "@off_offset", "@validation"};
// The names heads_score_names adds for relations `relations`.
std::vector<std::string> extended_names(const std::vector<std::string>& relations) {
  std::vector<std::string> names = {"offset", "offset_share"};
  for (const char* suffix : kRoleSuffixes)
    for (auto& r : relations) names.push_back(r + suffix);
  return names;
}
std::vector<std::string> relations_of(const std::vector<HeadScores>& scores) {
  std::vector<std::string> out;
  if (!scores.empty())
    for (auto& [relation, v] : scores.front().roles) out.push_back(relation);
  return out;
}
double at(const std::vector<double>& v, std::size_t i) { return i < v.size() ? v[i] : kNaN; }
}  // namespace

std::vector<std::string> heads_score_names(const data::Task* task) {
  std::vector<std::string> names = score_names(task);
  const std::vector<std::string> more = extended_names(task ? task->relation_names() : std::vector<std::string>{});
  names.insert(names.end(), more.begin(), more.end());
  return names;
}

double score(const HeadScores& s, const std::string& name) {
  for (std::size_t r = 0; r < s.roles.size(); ++r) {
    const std::string& relation = s.roles[r].first;
    if (name == relation) return s.roles[r].second;
    if (name.size() <= relation.size() || name.compare(0, relation.size(), relation) != 0) continue;
    const std::string suffix = name.substr(relation.size());
    if (suffix == kRoleSuffixes[0]) return at(s.roles_scored, r);
    if (suffix == kRoleSuffixes[1]) return at(s.roles_off_offset, r);
    if (suffix == kRoleSuffixes[2]) return at(s.roles_validation, r);
  }
  if (name == "entropy") return s.entropy;
  if (name == "max_weight") return s.max_weight;
  if (name == "previous_token") return s.previous_token;
  if (name == "first_token") return s.first_token;
  if (name == "self") return s.self;
  if (name == "induction") return s.induction;
  if (name == "retrieval") return s.retrieval;
  if (name == "offset") return std::isnan(s.offset_share) ? kNaN : double(s.offset);
  if (name == "offset_share") return s.offset_share;
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

std::string role_label(const HeadScores& s, const LabelThresholds& t, const std::vector<OffsetBaseline>& offsets) {
  std::string role;
  double lead = t.role_margin;
  for (std::size_t r = 0; r < s.roles.size() && r < offsets.size(); ++r) {
    const double x = at(s.roles_scored, r), base = offsets[r].scored_share;
    if (std::isnan(x) || std::isnan(base)) continue;
    if (x >= t.role && x - base >= lead) lead = x - base, role = s.roles[r].first;
  }
  if (!role.empty()) return "role: " + role;
  if (std::isnan(s.offset_share) || s.offset_share < t.positional) return "";
  if (s.offset == -1) return "positional (previous)";
  if (s.offset == 1) return "positional (next)";
  if (s.offset == 0) return "positional (self)";
  char b[48];
  std::snprintf(b, sizeof b, "positional (offset %+ld)", s.offset);
  return b;
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

namespace {
// role_label, and the label: the relation of a role head, else the pattern label.
void label_head(HeadScores& s, const LabelThresholds& t, const std::vector<OffsetBaseline>& offsets) {
  s.role_label = role_label(s, t, offsets);
  s.label = s.role_label.rfind("role: ", 0) == 0 ? s.role_label.substr(6) : head_label(s, t);
}
}  // namespace

std::vector<HeadScores> pattern_scores(const std::vector<LayerPattern>& layers, const data::Task& task,
                                       const data::Batch& batch, const LabelThresholds& thresholds,
                                       const std::vector<OffsetBaseline>* offsets) {
  const bool recall = task.name() == "recall" || task.name() == "mqar" || task.name() == "seq2seq_recall";
  const std::vector<std::string>& relations = task.relation_names();
  const bool roles = !relations.empty() && batch.relations.dimension() == 3;
  std::vector<OffsetBaseline> own;
  if (!offsets) own = role_baselines(task, batch), offsets = &own;
  RoleTokens scored;
  scored.scored = true;
  std::vector<HeadScores> out;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Array<float>& w = *layers[l].weights;
    const bool same_sequence = layers[l].kind != model::AttentionKind::Cross;
    const auto em = entropy_and_max(w);
    const auto first = column_scores(w, 0, 1);
    std::vector<double> prev, self, retrieval;
    std::vector<std::pair<long, double>> offset;
    if (same_sequence) {
      prev = diagonal_scores(w, -1, 1);
      self = diagonal_scores(w, 0, 0);
      offset = dominant_offsets(w, batch.words);
      if (recall && !task.seq2seq()) retrieval = retrieval_scores(w, batch.inputs, batch.targets);
    } else if (recall) {  // the decoder's queries look up their keys in the source
      retrieval = retrieval_scores(w, batch.decoder_inputs, batch.inputs, batch.targets, false);
    }
    // Per relation: every token, the scored ones, and the scored ones the chosen offset misses.
    std::vector<std::vector<double>> role(relations.size()), at_scored(relations.size()), off(relations.size());
    for (std::size_t r = 0; roles && same_sequence && r < relations.size(); ++r) {
      role[r] = role_scores(w, batch, r);
      at_scored[r] = role_scores(w, batch, r, scored);
      RoleTokens miss = scored;
      if (r < offsets->size()) miss.miss_offset = (*offsets)[r].scored_offset;
      off[r] = role_scores(w, batch, r, miss);
    }
    for (std::size_t h = 0; h < em.size(); ++h) {
      HeadScores s;
      s.layer = layers[l].name, s.layer_index = l, s.head = h, s.kind = layers[l].kind;
      s.entropy = em[h].first, s.max_weight = em[h].second, s.first_token = first[h];
      if (same_sequence) s.previous_token = prev[h], s.self = self[h], s.offset = offset[h].first, s.offset_share = offset[h].second;
      if (!retrieval.empty()) s.retrieval = retrieval[h];
      for (std::size_t r = 0; r < relations.size(); ++r) {
        s.roles.emplace_back(relations[r], role[r].empty() ? kNaN : role[r][h]);
        s.roles_scored.push_back(at_scored[r].empty() ? kNaN : at_scored[r][h]);
        s.roles_off_offset.push_back(off[r].empty() ? kNaN : off[r][h]);
        s.roles_validation.push_back(kNaN);
      }
      label_head(s, thresholds, *offsets);
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
                                    const HeadScoreOptions& o, const data::Batch* validation) {
  if (o.examples == 0) throw ValueError("head scores: --examples must be at least 1");
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const data::Batch b = data::rows(heldout, 0, std::min(o.examples, heldout.size()));
  std::optional<data::Batch> v;
  if (validation && validation->size()) v = data::rows(*validation, 0, std::min(o.examples, validation->size()));
  const std::vector<OffsetBaseline> offsets = role_baselines(task, b, v ? &*v : nullptr);
  const auto layers = model::attention_layers(model);
  const std::vector<Array<float>> w = patterns(model, b, o.batch_size);
  std::vector<LayerPattern> lp;
  for (std::size_t l = 0; l < layers.size(); ++l) lp.push_back({layers[l].first, model.attention_kind(*layers[l].second), &w[l]});
  std::vector<HeadScores> out = pattern_scores(lp, task, b, o.thresholds, &offsets);

  // The relations at the scored tokens of the validation rows: a head can be chosen there.
  if (v && v->relations.dimension() == 3 && !task.relation_names().empty()) {
    const std::vector<Array<float>> wv = patterns(model, *v, o.batch_size);
    RoleTokens scored;
    scored.scored = true;
    for (std::size_t l = 0, k = 0; l < layers.size(); ++l) {
      const std::size_t H = wv[l].shape()[1];
      std::vector<std::vector<double>> per(task.relation_names().size());
      if (model.attention_kind(*layers[l].second) != model::AttentionKind::Cross)
        for (std::size_t r = 0; r < per.size(); ++r) per[r] = role_scores(wv[l], *v, r, scored);
      for (std::size_t h = 0; h < H; ++h, ++k)
        for (std::size_t r = 0; r < per.size(); ++r) out[k].roles_validation[r] = per[r].empty() ? kNaN : per[r][h];
    }
  }
  const auto ind = induction_scores(model, task, b.size(), o.seed, o.batch_size);
  for (std::size_t l = 0, k = 0; l < ind.size(); ++l)
    for (std::size_t h = 0; h < ind[l].size(); ++h, ++k) {
      out[k].induction = ind[l][h];
      label_head(out[k], o.thresholds, offsets);
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

namespace {
// A right-aligned cell of at least `width` characters.
std::string pad(const std::string& c, std::size_t width) { return std::string(width > c.size() ? width - c.size() : 0, ' ') + c; }

// One table of a role score per head and relation (`value(s, r)`), then the rows `extra` (name,
// a cell per relation, a note).
using ExtraRow = std::tuple<std::string, std::vector<std::string>, std::string>;
void role_table(std::ostringstream& out, const std::vector<HeadScores>& scores, const std::string& title,
                const std::function<double(const HeadScores&, std::size_t)>& value, const std::vector<ExtraRow>& extra) {
  const auto& roles = scores.front().roles;
  auto width = [&](std::size_t r) { return std::max<std::size_t>(15, roles[r].first.size()); };
  out << '\n' << title << "\n  head  ";
  for (std::size_t r = 0; r < roles.size(); ++r) out << ' ' << pad(roles[r].first, width(r));
  out << '\n';
  char line[32];
  for (auto& s : scores) {
    std::snprintf(line, sizeof line, "  %3zu.%-3zu", s.layer_index, s.head);
    out << line;
    for (std::size_t r = 0; r < roles.size(); ++r) out << ' ' << pad(cell(value(s, r)), width(r));
    out << '\n';
  }
  for (auto& [name, cells, note] : extra) {
    out << "  " << std::left << std::setw(7) << name << std::right;
    for (std::size_t r = 0; r < roles.size() && r < cells.size(); ++r) out << ' ' << pad(cells[r], width(r));
    out << "   " << note << '\n';
  }
}

std::string share_at(double share, long offset) {
  if (std::isnan(share)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, "%.3f (%+ld)", share, offset);
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
  // Position or role: how far each head looks when it looks a fixed distance, and its verdict.
  out << "\nposition or role: the key offset most queries put their largest weight on, their share, and the head's "
         "label\n  head    offset   share  position or role\n";
  for (auto& s : scores) {
    const std::string offset = std::isnan(s.offset_share) ? "-" : (s.offset > 0 ? "+" : "") + std::to_string(s.offset);
    std::snprintf(line, sizeof line, "  %3zu.%-3zu %7s %7s  %s\n", s.layer_index, s.head, offset.c_str(),
                  cell(s.offset_share).c_str(), s.role_label.c_str());
    out << line;
  }
  if (scores.empty() || scores.front().roles.empty()) return out.str();
  const std::size_t R = std::min(baselines.size(), scores.front().roles.size());
  std::vector<std::string> chosen, counts, validation, zero, off_counts, best, all_counts;
  for (std::size_t r = 0; r < R; ++r) {
    const OffsetBaseline& b = baselines[r];
    chosen.push_back(share_at(b.scored_share, b.scored_offset));
    validation.push_back(share_at(b.validation_share, b.scored_offset));
    counts.push_back(std::to_string(b.scored_count));
    zero.push_back(b.off_offset_count ? "0" : "-");
    off_counts.push_back(std::to_string(b.off_offset_count));
    best.push_back(share_at(b.share, b.offset));
    all_counts.push_back(std::to_string(b.count));
  }
  const bool validated = R && !std::isnan(baselines.front().validation_share);
  const std::string picked = validated ? "(the offset chosen on the validation rows, its share here)"
                                       : "(the offset chosen on these rows)";
  role_table(out, scores,
             "role scores: the share of tokens having the relation whose largest weight falls on their partner, over "
             "every token (scored or not)",
             [](const HeadScores& s, std::size_t r) { return s.roles[r].second; },
             {{"offset", best, "(the best fixed offset)"}, {"tokens", all_counts, "(having the relation)"}});
  role_table(out, scores, "role scores at the scored tokens (a masked model's masked tokens: where its loss asks for the partner)",
             [](const HeadScores& s, std::size_t r) { return at(s.roles_scored, r); },
             {{"offset", chosen, picked}, {"tokens", counts, "(scored, having the relation)"}});
  role_table(out, scores, "role scores at the scored tokens where that offset misses the partner (position gives the wrong answer)",
             [](const HeadScores& s, std::size_t r) { return at(s.roles_off_offset, r); },
             {{"offset", zero, "(0 by construction)"}, {"tokens", off_counts, "(scored, partner not at the offset)"}});
  if (validated)
    role_table(out, scores, "role scores at the scored tokens of the validation rows (for choosing a head)",
               [](const HeadScores& s, std::size_t r) { return at(s.roles_validation, r); },
               {{"offset", validation, "(the chosen offset there)"}});
  return out.str();
}

std::string head_scores_csv(const std::vector<HeadScores>& scores, const std::vector<OffsetBaseline>& baselines) {
  std::ostringstream out;
  const std::vector<std::string> relations = relations_of(scores);
  std::vector<std::string> names = score_names();
  names.insert(names.end(), relations.begin(), relations.end());
  const std::vector<std::string> more = extended_names(relations);
  names.insert(names.end(), more.begin(), more.end());
  out << "layer,layer_index,head,kind";
  for (auto& n : names) out << ',' << n;
  out << ",label,role_label\n";
  auto number = [](double x) { return std::isnan(x) ? std::string() : cell(x, "%.9g"); };
  for (auto& s : scores) {
    out << s.layer << ',' << s.layer_index << ',' << s.head << ',' << model::attention_kind_name(s.kind);
    for (auto& n : names) out << ',' << number(score(s, n));
    out << ',' << s.label << ',' << s.role_label << '\n';
  }
  if (!baselines.empty()) {
    // Each column's offset baseline: every token (best offset of these rows), the scored tokens
    // (the chosen offset), where it misses (0), the validation rows.
    out << "baseline,,,";
    for (std::size_t k = 0; k < score_names().size(); ++k) out << ',';
    for (auto& b : baselines) out << ',' << number(b.share);
    out << ",,";  // offset, offset_share
    for (auto& b : baselines) out << ',' << number(b.scored_share);
    for (auto& b : baselines) out << ',' << (b.off_offset_count ? "0" : "");
    for (auto& b : baselines) out << ',' << number(b.validation_share);
    out << ",best fixed offset,\n";
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
  const data::Batch& validation = l.data->eval_set();
  HeadScoreOptions o;
  o.examples = r.examples;
  HeadsResult out;
  out.examples = std::min(r.examples, test.size());
  out.validation_examples = std::min(r.examples, validation.size());
  out.task = l.task->name();
  out.masked = l.task->masked();
  out.score_names = heads_score_names(l.task.get());
  out.heads = head_scores(*l.model, *l.task, test, o, &validation);
  const data::Batch v = data::rows(validation, 0, out.validation_examples);
  out.baselines = role_baselines(*l.task, data::rows(test, 0, out.examples), out.validation_examples ? &v : nullptr);
  for (auto& h : out.heads)
    if (!std::isnan(h.induction)) out.induction_sequences = out.examples;
  if (r.similarity) out.similarity = head_divergence(*l.model, test, r.examples);
  return out;
}

std::string to_json(const HeadsResult& r) {
  json::Writer w;
  w.open('{').member("examples", r.examples).member("validation_examples", r.validation_examples).member("task", r.task)
      .member("masked", r.masked).member("induction_sequences", r.induction_sequences).key("score_names").open('[');
  for (auto& n : r.score_names) w.value(n);
  w.close(']').key("heads").open('[');
  for (auto& h : r.heads) {
    w.open('{').member("layer", h.layer).member("layer_index", h.layer_index).member("head", h.head)
        .member("kind", model::attention_kind_name(h.kind));
    for (auto& n : r.score_names) w.member(n, score(h, n));
    w.member("label", h.label).member("role_label", h.role_label).close('}');
  }
  const std::vector<std::string> relations = relations_of(r.heads);
  const std::size_t R = std::min(relations.size(), r.baselines.size());
  w.close(']').key("baselines").open('{');
  for (std::size_t i = 0; i < R; ++i)
    w.key(relations[i]).open('{').member("offset", std::int64_t(r.baselines[i].offset)).member("share", r.baselines[i].share)
        .member("count", r.baselines[i].count).close('}');
  w.close('}').key("offsets").open('{');
  for (std::size_t i = 0; i < R; ++i) {
    const OffsetBaseline& b = r.baselines[i];
    w.key(relations[i]).open('{').member("offset", std::int64_t(b.scored_offset)).member("validation_share", b.validation_share)
        .member("share", b.scored_share).member("count", b.scored_count).member("off_offset_count", b.off_offset_count).close('}');
  }
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

std::string format_heads(const HeadsResult& r, const std::string& source) {
  std::ostringstream out;
  out << source << ": " << r.task << ", " << r.examples << " held-out (test) examples";
  const bool roles = !r.baselines.empty();
  if (roles)
    out << "; role scores at the " << (r.masked ? "masked tokens" : "scored tokens") << ", offsets chosen on "
        << r.validation_examples << " validation examples";
  if (r.induction_sequences)
    out << "; induction score on " << r.induction_sequences << " random sequences repeated twice";
  else
    out << "; no induction score (" << (r.masked ? "a masked model does not predict the next token" : "not a next-token model")
        << ")";
  out << '\n' << format_head_scores(r.heads, r.baselines);
  out << "labels: " << (roles ? "a relation (role score at the scored tokens >= 0.5 and 0.1 above the offset chosen on "
                                "validation), else " : "")
      << "previous-token, first-token, self (>= 0.5), induction (>= 0.4), retrieval (>= 0.5); position or role: "
      << (roles ? "role: <relation> as above, else " : "")
      << "positional (previous, next, self, offset +k) when >= 0.5 of the queries look that far; "
         "docs/instruments.md defines each score\n";
  return out.str();
}

}  // namespace qkv::interp
