// The instruments for Python: the same library calls, on the same rows, as `qkv heads`, `qkv
// ablate`, `qkv explain`, `qkv fill` and `qkv generate` (src/app/instruments.cpp, commands.cpp),
// returning plain data instead of printing. Each releases the GIL while the model runs.
#include "instruments.hpp"

#include <cmath>

#include "arrays.hpp"
#include "qkv/interp/ablation.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/model/fill.hpp"
#include "qkv/model/generate.hpp"

namespace qkv::python {
namespace {

py::list head_list(const std::vector<interp::HeadRef>& heads) {
  py::list out;
  for (auto& h : heads) out.append(py::make_tuple(h.layer, h.head));
  return out;
}

// The command line's messages say "--heads"; Python's argument is heads=.
[[noreturn]] void rethrow_as_argument(const ValueError& e) {
  std::string m = e.what();
  if (m.rfind("--heads", 0) == 0) m = m.substr(2);
  throw py::value_error(m);
}

}  // namespace

py::dict heads(Model& m, std::size_t examples) {
  if (examples == 0) throw py::value_error("examples: expected at least 1 held-out example");
  std::vector<interp::HeadScores> scores;
  std::vector<interp::OffsetBaseline> baselines;
  std::vector<std::string> names;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(m.mutex());
    m.ensure_data();
    interp::HeadScoreOptions o;
    o.examples = examples;
    const data::Batch& test = m.data().test_set();
    scores = interp::head_scores(m.task_model(), m.data_task(), test, o);
    baselines = interp::role_baselines(m.data_task(), data::rows(test, 0, std::min(examples, test.size())));
    names = interp::score_names(&m.data_task());
  }
  py::list rows;
  for (auto& s : scores) {
    py::dict d;
    d["layer"] = s.layer;
    d["layer_index"] = s.layer_index;
    d["head"] = s.head;
    d["kind"] = model::attention_kind_name(s.kind);
    for (auto& name : names) d[py::str(name)] = interp::score(s, name);
    d["label"] = s.label;
    rows.append(d);
  }
  const std::vector<std::string>& relations = m.data_task().relation_names();
  py::dict best_offsets;
  for (std::size_t r = 0; r < baselines.size() && r < relations.size(); ++r) {
    py::dict d;
    d["offset"] = baselines[r].offset;
    d["share"] = baselines[r].share;
    d["count"] = baselines[r].count;
    best_offsets[py::str(relations[r])] = d;
  }
  py::dict out;
  out["heads"] = rows;
  out["score_names"] = names;
  out["baselines"] = best_offsets;
  return out;
}

py::list head_divergence(Model& m, std::size_t examples) {
  if (examples == 0) throw py::value_error("examples: expected at least 1 held-out example");
  std::vector<Array<double>> js;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(m.mutex());
    m.ensure_data();
    js = interp::head_divergence(m.task_model(), m.data().test_set(), examples);
  }
  py::list out;
  for (auto& a : js) out.append(adopt<double>(std::move(a)));
  return out;
}

py::dict ablate(Model& m, const std::string& heads, bool has_heads, const std::string& mode_name, std::size_t examples,
                bool prune, std::size_t step, const std::string& relation) {
  if (prune && has_heads) throw py::value_error("prune removes every head in turn: give either heads or prune=True");
  if (step == 0) throw py::value_error("step: expected at least 1 head removed per pruning step");
  const interp::AblationMode mode = interp::ablation_mode_names().parse(mode_name, "mode");
  std::vector<interp::HeadRef> chosen;
  if (has_heads) {
    try {
      chosen = interp::parse_heads(heads, interp::heads_per_layer(m.task_model()));
    } catch (const ValueError& e) {
      rethrow_as_argument(e);
    }
  }
  py::dict out;
  model::EvalMetrics base, removed;
  std::vector<interp::AblationRow> rows;
  std::vector<interp::PrunePoint> curve;
  std::size_t n = 0;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(m.mutex());
    m.ensure_data();
    // The rows `qkv ablate` reports on: the first `examples` of the test split (0: all), and the
    // validation split for the means and the pruning importances.
    const data::Batch test = relation.empty() ? m.held_out("test", examples)
                                              : interp::restrict_to_relation(m.data_task(), m.held_out("test", examples), relation);
    const data::Batch& val = m.data().eval_set();
    n = test.size();
    std::vector<Array<float>> means;
    if (mode == interp::AblationMode::Mean) means = interp::head_means(m.task_model(), val);
    const auto* mp = mode == interp::AblationMode::Mean ? &means : nullptr;
    base = interp::ablated_metrics(m.task_model(), test, {}, mode, mp);
    if (prune)
      curve = interp::prune_curve(m.task_model(), val, test, mode, mp, step);
    else if (has_heads)
      removed = interp::ablated_metrics(m.task_model(), test, chosen, mode, mp);
    else
      rows = interp::ablate_each(m.task_model(), test, mode, mp);
  }
  out["mode"] = mode_name;
  out["relation"] = relation.empty() ? py::object(py::none()) : py::object(py::str(relation));
  out["examples"] = n;
  out["intact"] = metrics_dict(base);
  auto with_changes = [&](const model::EvalMetrics& r) {
    py::dict d = metrics_dict(r);
    d["loss_change"] = r.loss - base.loss;
    d["accuracy_change"] = r.token_accuracy - base.token_accuracy;
    return d;
  };
  if (prune) {
    py::list points;
    for (auto& p : curve) {
      py::dict d = metrics_dict(p.metrics);
      d["removed"] = head_list(p.removed);
      d["fraction"] = p.fraction;
      points.append(d);
    }
    out["curve"] = points;
  } else if (has_heads) {
    py::dict d = with_changes(removed);
    d["heads"] = head_list(chosen);
    out["ablated"] = d;
  } else {
    py::list each;
    for (auto& r : rows) {
      py::dict d = with_changes(r.metrics);
      d["layer"] = r.heads[0].layer;
      d["head"] = r.heads[0].head;
      each.append(d);
    }
    out["each"] = each;
  }
  return out;
}

std::string explain(Model& m, const py::dict& row, std::size_t layer, std::size_t head, std::size_t query) {
  const data::Batch b = m.batch(row);
  if (b.size() != 1) throw py::value_error("explain: expected one row, found " + shape_str(b.inputs.shape()));
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(m.mutex());
  return interp::explanation_json(interp::explain_query(m.task_model(), m.task(), b, layer, head, query));
}

py::list fill(Model& m, const std::string& text, const std::string& mask_text, std::size_t k) {
  const data::Task& task = m.task();
  if (!task.masked())
    throw py::value_error(m.path() + " is a " + task.name() + " model trained without masks (task.objective: " +
                          data::name(m.loaded().cfg.task.objective) +
                          "): fill needs a masked language model (task.objective: masked)");
  if (mask_text.empty()) throw py::value_error("mask_text: empty; give how a mask is written in the text");
  if (text.find(mask_text) == std::string::npos)
    throw py::value_error("text: no " + mask_text + " in '" + text + "': write each position to fill as " + mask_text +
                          " (mask_text changes the spelling)");
  if (k == 0) throw py::value_error("k: expected at least 1 candidate per mask");
  const data::Batch row = task.text_row(text, "text", mask_text);
  std::vector<model::Fill> fills;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(m.mutex());
    fills = model::fill_masks(m.task_model(), task, row, k);
  }
  py::list out;
  for (auto& f : fills) {
    py::list top;
    for (auto& [id, p] : f.top) top.append(py::make_tuple(task.token_label(id), id, p));
    py::dict d;
    d["position"] = f.position;
    d["top"] = top;
    out.append(d);
  }
  return out;
}

std::vector<Index> generate(Model& m, const std::vector<Index>& prompt, std::size_t max_tokens, double temperature,
                            std::size_t top_k, double top_p, std::uint64_t seed, bool cache, const py::object& on_token) {
  const nn::DecoderModel<float>* decoder = m.task_model().decoder();
  if (!decoder)
    throw py::value_error(m.path() + " is an " + nn::arch_names().name(m.loaded().cfg.model.arch) +
                          " model: generate continues text with a decoder-only language model (model.arch: decoder)");
  if (max_tokens > 1000000)
    throw py::value_error("max_tokens: expected at most 1000000 new tokens, found " + std::to_string(max_tokens));
  if (!(temperature >= 0) || !std::isfinite(temperature))
    throw py::value_error("temperature: expected 0 (greedy) or a positive number, found " + std::to_string(temperature));
  if (!(top_p > 0 && top_p <= 1)) throw py::value_error("top_p: expected a number in (0, 1], found " + std::to_string(top_p));
  if (prompt.empty()) throw py::value_error("prompt: empty; give at least one character (or token id)");
  for (Index id : prompt)
    if (id < 0 || std::size_t(id) >= m.task().input_vocab())
      throw py::value_error("prompt: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(m.task().input_vocab()) + ")");
  model::GenerateOptions g;
  g.max_tokens = max_tokens;
  g.sampling = {temperature, top_k, top_p};
  g.seed = seed;
  g.cache = cache;
  std::function<void(Index)> each;
  if (!on_token.is_none())
    each = [&on_token](Index t) {
      py::gil_scoped_acquire gil;
      on_token(t);
    };
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(m.mutex());
  return model::generate(*decoder, prompt, g, each);
}

}  // namespace qkv::python
