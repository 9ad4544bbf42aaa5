// Grading the instruments against a known circuit: each instrument's head (and edge) scores, and
// how well they separate the circuit from the other heads (docs/grade.md).
#include "qkv/interp/grade.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "qkv/interp/attribution.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/lens.hpp"
#include "qkv/interp/path_patching.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/io/json.hpp"
#include "qkv/tensor/options.hpp"

namespace qkv::interp {

namespace {

// "L.H" -> HeadRef; false when `id` is not one.
bool parse_head_id(const std::string& id, HeadRef& h) {
  const std::size_t dot = id.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == id.size()) return false;
  for (std::size_t i = 0; i < id.size(); ++i)
    if (i != dot && !std::isdigit(static_cast<unsigned char>(id[i]))) return false;
  h.layer = std::stoul(id.substr(0, dot));
  h.head = std::stoul(id.substr(dot + 1));
  return true;
}

std::string eap_head(const HeadRef& h) { return "a" + std::to_string(h.layer) + ".h" + std::to_string(h.head); }

// A circuit file's component name as EAP-IG names a writer.
std::string writer_name(const std::string& id, const std::string& what) {
  HeadRef h;
  if (id == "embed") return "input";
  if (parse_head_id(id, h)) return eap_head(h);
  if (id.rfind("mlp", 0) == 0 && id.size() > 3) return "m" + id.substr(3);
  throw ValueError(what + ": unknown component '" + id + "' (expected embed, L.H or mlpL)");
}

}  // namespace

Circuit read_circuit(const std::string& text, const std::string& what) {
  const json::Value root = json::parse(text, what);
  const json::Value* components = root.find("components");
  const json::Value* edges = root.find("edges");
  if (!components || !edges) throw ValueError(what + ": expected a circuit file with \"components\" and \"edges\"");
  Circuit c;
  const auto& items = json::array(*components, what + ".components", 100000);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string at = what + ".components[" + std::to_string(i) + "]";
    const json::Value* kind = items[i].find("kind");
    const json::Value* id = items[i].find("id");
    if (!kind || !id) throw ValueError(at + ": expected \"id\" and \"kind\"");
    if (json::string(*kind, at + ".kind") != "head") continue;
    HeadRef h;
    if (!parse_head_id(json::string(*id, at + ".id"), h)) throw ValueError(at + ".id: expected L.H, found '" + id->text + "'");
    c.heads.push_back(h);
  }
  const auto& es = json::array(*edges, what + ".edges", 100000);
  for (std::size_t i = 0; i < es.size(); ++i) {
    const std::string at = what + ".edges[" + std::to_string(i) + "]";
    const json::Value* from = es[i].find("from");
    const json::Value* to = es[i].find("to");
    const json::Value* port = es[i].find("port");
    if (!from || !to || !port) throw ValueError(at + ": expected \"from\", \"to\" and \"port\"");
    const std::string t = json::string(*to, at + ".to"), p = json::string(*port, at + ".port");
    std::string reader;
    HeadRef h;
    if (t == "output") reader = "logits";
    else if (parse_head_id(t, h)) reader = eap_head(h) + "<" + p + ">";
    else reader = writer_name(t, at + ".to");
    c.edges.push_back({writer_name(json::string(*from, at + ".from"), at + ".from"), reader});
  }
  return c;
}

double auroc(const std::vector<double>& s, const std::vector<bool>& positive) {
  if (s.size() != positive.size())
    throw ValueError("auroc: " + std::to_string(s.size()) + " scores but " + std::to_string(positive.size()) + " labels");
  double wins = 0;
  std::size_t np = 0, nn = 0;
  for (std::size_t i = 0; i < s.size(); ++i) (positive[i] ? np : nn) += 1;
  if (np == 0 || nn == 0) return NAN;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (positive[i])
      for (std::size_t j = 0; j < s.size(); ++j)
        if (!positive[j]) wins += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
  return wins / (double(np) * double(nn));
}

double precision_at_k(const std::vector<double>& s, const std::vector<bool>& positive, std::size_t k) {
  if (k == 0 || k > s.size() || s.size() != positive.size()) return NAN;
  std::vector<double> sorted = s;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double kth = sorted[k - 1];
  double above = 0, pos_above = 0, tied = 0, pos_tied = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] > kth) above += 1, pos_above += positive[i];
    else if (s[i] == kth) tied += 1, pos_tied += positive[i];
  }
  return (pos_above + (double(k) - above) * pos_tied / tied) / double(k);
}

const NameTable<Instrument>& instrument_names() {
  static const NameTable<Instrument> t{{"labels", Instrument::Labels},
                                       {"zero-ablation", Instrument::ZeroAblation},
                                       {"mean-ablation", Instrument::MeanAblation},
                                       {"patching", Instrument::Patching},
                                       {"attribution", Instrument::Attribution},
                                       {"eap", Instrument::Eap},
                                       {"eap-ig", Instrument::EapIg},
                                       {"path-patching", Instrument::PathPatching},
                                       {"dla", Instrument::Dla}};
  return t;
}

bool scores_edges(Instrument i) {
  return i == Instrument::Eap || i == Instrument::EapIg || i == Instrument::PathPatching;
}

std::vector<std::pair<std::size_t, double>> GradeResult::circuit_ranks(const InstrumentGrade& g) const {
  std::vector<std::pair<std::size_t, double>> out;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    if (!in_circuit[i]) continue;
    std::size_t rank = 0;  // ties at their worst rank: an instrument that scores everything 0 ranks nothing first
    for (double x : g.head_scores) rank += x >= g.head_scores[i];
    out.push_back({rank, g.head_scores[i]});
  }
  return out;
}

namespace {

// Sums per head (model order) and per edge, over the pairs.
struct Scores {
  std::vector<double> heads;
  std::map<std::pair<std::string, std::string>, double> edges;
  std::vector<std::pair<std::string, std::string>> edge_order;
  void add_edge(const std::string& from, const std::string& to, double x) {
    auto key = std::make_pair(from, to);
    auto it = edges.find(key);
    if (it == edges.end()) {
      edges[key] = std::abs(x);
      edge_order.push_back(key);
    } else {
      it->second += std::abs(x);
    }
  }
};

model::InputRequest row_request(const data::Batch& b) {
  model::InputRequest r;
  r.row = b;
  return r;
}

template <class Request>
void set_pair(Request& r, const data::ContrastPair& p) {
  r.clean = row_request(p.clean);
  r.corrupt = row_request(p.corrupt);
  r.position = p.position;
  r.answer = std::to_string(p.answer);
  r.wrong = std::to_string(p.wrong);
  r.ids = true;
}

double label_score(const HeadScores& s, const LabelThresholds& t) {
  double best = 0;
  auto take = [&](double x, double threshold) {
    if (std::isfinite(x)) best = std::max(best, x / threshold);
  };
  take(s.previous_token, t.previous_token);
  take(s.first_token, t.first_token);
  take(s.self, t.self);
  take(s.induction, t.induction);
  take(s.retrieval, t.retrieval);
  for (auto& [name, x] : s.roles) take(x, t.role);
  return best;
}

std::string head_key(std::size_t l, std::size_t h) { return std::to_string(l) + "." + std::to_string(h); }

}  // namespace

GradeResult grade(model::LoadedModel& l, const GradeRequest& r, const std::string& name) {
  if (r.pairs.empty()) field_error("pairs", "expected at least one clean/corrupted pair, found none");
  if (r.examples == 0) field_error("examples", "expected at least 1, found 0");
  if (r.steps == 0 || r.steps > 1000) field_error("steps", "expected a whole number in [1, 1000]", std::to_string(r.steps));
  if (!l.data) field_error("data", "the model was loaded without data: labels and ablation need its test examples");
  const std::vector<std::size_t> per_layer = heads_per_layer(*l.model);
  if (r.truth.heads.empty()) field_error("truth", "the circuit has no head");
  check_heads(r.truth.heads, per_layer, "truth.heads");

  GradeResult out;
  out.model = name;
  out.pairs = r.pairs.size();
  std::map<std::string, std::size_t> index;  // "L.H" -> position in out.heads
  for (std::size_t a = 0; a < per_layer.size(); ++a)
    for (std::size_t h = 0; h < per_layer[a]; ++h) {
      index[head_key(a, h)] = out.heads.size();
      out.heads.push_back({a, h});
      out.in_circuit.push_back(std::find(r.truth.heads.begin(), r.truth.heads.end(), HeadRef{a, h}) != r.truth.heads.end());
    }
  std::vector<std::pair<std::string, std::string>> truth_edges = r.truth.edges;
  std::sort(truth_edges.begin(), truth_edges.end());
  const std::size_t N = out.heads.size();
  const double P = double(r.pairs.size());

  std::vector<Instrument> instruments = r.instruments;
  if (instruments.empty())
    for (auto& n : instrument_names().names()) instruments.push_back(instrument_names().parse(n, "instrument"));

  for (Instrument ins : instruments) {
    Scores s;
    s.heads.assign(N, 0.0);
    switch (ins) {
      case Instrument::Labels: {
        HeadsRequest q;
        q.examples = r.examples;
        const HeadsResult h = heads(l, q);
        out.examples = h.examples;
        for (auto& x : h.heads) s.heads[index.at(head_key(x.layer_index, x.head))] = label_score(x, LabelThresholds{});
        break;
      }
      case Instrument::ZeroAblation:
      case Instrument::MeanAblation: {
        AblateRequest q;
        q.mode = ins == Instrument::ZeroAblation ? AblationMode::Zero : AblationMode::Mean;
        q.examples = r.examples;
        const AblateResult a = ablate(l, q);
        out.examples = a.examples;
        for (auto& row : a.each)
          s.heads[index.at(head_key(row.heads[0].layer, row.heads[0].head))] = std::abs(row.metrics.loss - a.intact.loss);
        break;
      }
      case Instrument::Patching:
        for (auto& p : r.pairs) {
          PatchRequest q;
          set_pair(q, p);
          const PatchingResult pr = patch(l, q);
          for (std::size_t a = 0; a < pr.heads.size(); ++a)
            for (std::size_t h = 0; h < pr.heads[a].size(); ++h)
              s.heads[index.at(head_key(a, h))] += std::abs(pr.heads[a][h].restored) / P;
        }
        break;
      case Instrument::Attribution:
      case Instrument::Eap:
      case Instrument::EapIg:
        for (auto& p : r.pairs) {
          AttributeRequest q;
          set_pair(q, p);
          q.method = ins == Instrument::Attribution ? AttributionMethod::Attribution
                     : ins == Instrument::Eap       ? AttributionMethod::Eap
                                                    : AttributionMethod::EapIg;
          q.steps = r.steps;
          const AttributionResult ar = attribute(l, q);
          if (ins == Instrument::Attribution) {
            for (std::size_t a = 0; a < ar.heads.size(); ++a)
              for (std::size_t h = 0; h < ar.heads[a].size(); ++h) s.heads[index.at(head_key(a, h))] += std::abs(ar.heads[a][h]) / P;
            continue;
          }
          for (auto& e : ar.edges) {
            s.add_edge(e.from, e.to, e.score / P);
            for (std::size_t i = 0; i < N; ++i)
              if (e.from == eap_head(out.heads[i])) s.heads[i] += std::abs(e.score) / P;
          }
        }
        break;
      case Instrument::PathPatching:
        for (auto& p : r.pairs)
          for (std::size_t i = 0; i < N; ++i) {
            PathPatchRequest q;  // every head a sender, to every later head's inputs and the logits
            set_pair(q, p);
            q.sender = out.heads[i];
            const PathPatchResult pp = path_patch(l, q);
            s.heads[i] += std::abs(pp.restored_all) / P;
            for (std::size_t k = 0; k < pp.receivers.size(); ++k) {
              const PathReceiver& rc = pp.receivers[k];
              const std::string to = rc.input == "logits" ? "logits" : eap_head({rc.layer, rc.head}) + "<" + rc.input + ">";
              s.add_edge(eap_head(q.sender), to, pp.restored[k] / P);
            }
          }
        break;
      case Instrument::Dla:
        for (auto& p : r.pairs) {
          LensRequest q;
          q.input = row_request(p.clean);
          q.position = p.position;
          q.answer = std::to_string(p.answer);
          q.wrong = std::to_string(p.wrong);
          q.ids = true;
          const LensResult lr = logit_lens(l, q);
          for (std::size_t a = 0; a < lr.heads.size(); ++a)
            for (std::size_t h = 0; h < lr.heads[a].size(); ++h) s.heads[index.at(head_key(a, h))] += std::abs(lr.heads[a][h]) / P;
        }
        break;
    }
    InstrumentGrade g;
    g.instrument = ins;
    g.head_scores = s.heads;
    g.head_auroc = auroc(s.heads, out.in_circuit);
    g.head_precision = precision_at_k(s.heads, out.in_circuit, r.truth.heads.size());
    if (scores_edges(ins)) {
      for (auto& e : s.edge_order) {
        g.edges.push_back(e);
        g.edge_scores.push_back(s.edges[e]);
        const bool pos = std::binary_search(truth_edges.begin(), truth_edges.end(), e);
        g.edge_positive.push_back(pos);
        g.edge_positives += pos;
      }
      g.edge_auroc = auroc(g.edge_scores, g.edge_positive);
      g.edge_precision = precision_at_k(g.edge_scores, g.edge_positive, g.edge_positives);
    }
    out.grades.push_back(std::move(g));
  }
  return out;
}

namespace {

std::string fixed(double x, int digits = 3) {
  if (!std::isfinite(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string general(double x) {
  if (!std::isfinite(x)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// The circuit head an instrument ranks lowest: (its index, rank, score); index N when none.
struct Lowest {
  std::string head;
  std::size_t rank = 0;
  double score = NAN;
};
Lowest lowest(const GradeResult& r, const InstrumentGrade& g) {
  Lowest low;
  const auto ranks = r.circuit_ranks(g);
  std::size_t k = 0;
  for (std::size_t i = 0; i < r.heads.size(); ++i) {
    if (!r.in_circuit[i]) continue;
    const auto& [rank, score] = ranks[k++];
    if (rank >= low.rank) low = {head_name(r.heads[i]), rank, score};
  }
  return low;
}

}  // namespace

std::string format_grades(const std::vector<GradeResult>& results) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-15s %-14s %6s %6s %6s %7s %6s %6s  %s\n", "model", "instrument", "heads", "AUROC",
                "top-k", "edges", "AUROC", "top-k", "lowest circuit head (rank, score)");
  out += line;
  for (auto& r : results) {
    std::size_t pos = 0;
    for (bool b : r.in_circuit) pos += b;
    for (auto& g : r.grades) {
      const Lowest low = lowest(r, g);
      const std::string heads = std::to_string(pos) + "/" + std::to_string(r.heads.size());
      const std::string edges =
          scores_edges(g.instrument) ? std::to_string(g.edge_positives) + "/" + std::to_string(g.edges.size()) : "-";
      std::snprintf(line, sizeof line, "%-15s %-14s %6s %6s %6s %7s %6s %6s  %s (%zu, %s)\n", r.model.c_str(),
                    instrument_names().name(g.instrument), heads.c_str(), fixed(g.head_auroc).c_str(),
                    fixed(g.head_precision).c_str(), edges.c_str(), fixed(g.edge_auroc).c_str(),
                    fixed(g.edge_precision).c_str(), low.head.c_str(), low.rank, general(low.score).c_str());
      out += line;
    }
  }
  return out;
}

std::string grades_csv(const std::vector<GradeResult>& results) {
  std::string out =
      "model,instrument,heads,circuit_heads,head_auroc,head_precision,edges,circuit_edges,edge_auroc,edge_precision,"
      "lowest_head,lowest_rank,lowest_score\n";
  auto num = [](double x) { return std::isfinite(x) ? json::number(x) : std::string(); };
  for (auto& r : results) {
    std::size_t pos = 0;
    for (bool b : r.in_circuit) pos += b;
    for (auto& g : r.grades) {
      const Lowest low = lowest(r, g);
      out += r.model + "," + std::string(instrument_names().name(g.instrument)) + "," + std::to_string(r.heads.size()) + "," +
             std::to_string(pos) + "," + num(g.head_auroc) + "," + num(g.head_precision) + "," +
             (scores_edges(g.instrument) ? std::to_string(g.edges.size()) + "," + std::to_string(g.edge_positives) : ",") +
             "," + num(g.edge_auroc) + "," + num(g.edge_precision) + "," + low.head + "," + std::to_string(low.rank) + "," +
             num(low.score) + "\n";
    }
  }
  return out;
}

std::string to_json(const std::vector<GradeResult>& results) {
  json::Writer w;
  w.open('[');
  for (auto& r : results) {
    w.open('{').member("model", r.model).member("pairs", r.pairs).member("examples", r.examples);
    w.key("heads").open('[');
    for (auto& h : r.heads) w.value(head_name(h));
    w.close(']').key("circuit").open('[');
    for (bool b : r.in_circuit) w.value(b);
    w.close(']').key("grades").open('[');
    for (auto& g : r.grades) {
      w.open('{').member("instrument", instrument_names().name(g.instrument)).key("head_scores").open('[');
      for (double x : g.head_scores) w.value(x);
      w.close(']').member("head_auroc", g.head_auroc).member("head_precision", g.head_precision);
      w.member("edge_auroc", g.edge_auroc).member("edge_precision", g.edge_precision);
      w.member("edges", g.edges.size()).member("circuit_edges", g.edge_positives).key("circuit_ranks").open('[');
      for (auto& [rank, score] : r.circuit_ranks(g)) w.open('[').value(rank).value(score).close(']');
      w.close(']').close('}');
    }
    w.close(']').close('}');
  }
  w.close(']');
  return w.take();
}

}  // namespace qkv::interp
