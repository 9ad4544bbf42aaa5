#include "instruments.hpp"

#include "arrays.hpp"

#include "qkv/interp/ablation.hpp"
#include "qkv/interp/analyze.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/attribution.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/lens.hpp"
#include "qkv/interp/path_patching.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/interp/value_swap.hpp"
#include "qkv/model/evaluate.hpp"
#include "qkv/model/fill.hpp"
#include "qkv/model/generate.hpp"

namespace qkv::python {
namespace {

using Renames = std::vector<std::pair<std::string, std::string>>;

// Run `f` on the model with the GIL released and its mutex held; a field error of the library
// becomes a ValueError naming the Python argument (`renames`: a library field, or with a trailing
// '.' every field below it, to the argument's name).
template <class F>
auto call(Model& m, const Renames& renames, F&& f) {
  try {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(m.mutex());
    return f();
  } catch (const OptionError& e) {
    if (e.owner != "request") throw;
    auto name = [&](const std::string& field) { return renamed_field(field, renames); };
    throw py::value_error(e.report(name));
  }
}

// A Python metric of the logits (1, T, classes), given a read-only copy, as the library calls it.
std::function<double(const Array<float>&)> python_metric(const py::object& metric) {
  return [&metric](const Array<float>& logits) {
    py::gil_scoped_acquire gil;
    py::array_t<float> a({logits.shape().begin(), logits.shape().end()}, logits.data());
    a.attr("setflags")(py::arg("write") = false);
    return py::float_(metric(a)).cast<double>();
  };
}

// An input dict (see instruments.hpp) as the library's request.
model::InputRequest input(Model& m, const py::dict& d) {
  model::InputRequest r;
  if (d.contains("text")) r.text = d["text"].cast<std::string>();
  if (d.contains("mask_text")) r.mask_text = d["mask_text"].cast<std::string>();
  if (d.contains("ids")) r.ids = d["ids"].cast<std::vector<Index>>();
  if (d.contains("example")) r.example = d["example"].cast<std::size_t>();
  if (d.contains("split")) {
    const std::string split = d["split"].cast<std::string>();
    if (split != "validation" && split != "test")
      throw py::value_error("split: expected 'validation' or 'test', found '" + split + "'" +
                            did_you_mean(split, {"validation", "test"}));
    r.split = split == "test" ? data::Split::Test : data::Split::Val;
  }
  if (d.contains("row")) r.row = m.batch(d["row"].cast<py::dict>());
  return r;
}

// The model view an input needs: with data for a held-out example.
model::LoadedModel& view_for(Model& m, const model::InputRequest& r) { return r.example ? m.with_data() : m.loaded(); }

}  // namespace

void bind_instruments(py::module_& mod) {
  mod.def("heads", [](Model& m, std::size_t examples, bool similarity) {
    return call(m, {}, [&] { return interp::to_json(interp::heads(m.with_data(), interp::HeadsRequest{examples, similarity})); });
  });
  mod.def("ablate", [](Model& m, const std::optional<std::string>& heads, const std::string& mode, std::size_t examples,
                       bool prune, std::size_t step, const std::string& relation) {
    interp::AblateRequest r;
    r.mode = interp::ablation_mode_names().parse(mode, "mode");
    r.examples = examples, r.prune = prune, r.step = step, r.relation = relation;
    return call(m, {{"heads[", "heads"}}, [&] {
      if (heads) r.heads = interp::parse_heads(*heads, interp::heads_per_layer(*m.loaded().model));
      return interp::to_json(interp::ablate(m.with_data(), r));
    });
  });
  mod.def("swap", [](Model& m, std::size_t examples, std::uint64_t seed) {
    return call(m, {}, [&] { return interp::to_json(interp::value_swap(m.with_data(), interp::SwapRequest{examples, seed})); });
  });
  mod.def("evaluate", [](Model& m, bool train) {
    model::EvalRequest r;
    r.train = train;
    return call(m, {}, [&] { return model::to_json(model::evaluate(m.with_data(), r)); });
  });
  mod.def("explain", [](Model& m, const py::dict& in, std::optional<std::size_t> layer, std::optional<std::size_t> head,
                        std::size_t query) {
    interp::ExplainRequest r;
    r.input = input(m, in);
    r.layer = layer, r.head = head, r.query = query;
    return call(m, {{"input.example", "example"}, {"input.", "x"}}, [&] {
      const auto all = interp::explain(view_for(m, r.input), r);
      return layer && head ? interp::explanation_json(all.front()) : interp::explanations_json(all);
    });
  });
  mod.def("fill", [](Model& m, const py::dict& in, std::size_t k) {
    model::FillRequest r;
    r.input = input(m, in);
    r.top_k = k;
    return call(m, {{"top_k", "k"}, {"input.mask_text", "mask_text"}, {"input.", "text"}},
                [&] { return model::to_json(model::fill(view_for(m, r.input), r), *m.loaded().task); });
  });
  mod.def("generate", [](Model& m, const py::dict& prompt, std::size_t max_tokens, double temperature, std::size_t top_k,
                         double top_p, std::uint64_t seed, bool cache, const py::object& on_token) {
    model::GenerateRequest r;
    const model::InputRequest in = input(m, prompt);
    r.text = in.text, r.ids = in.ids;
    r.options.max_tokens = max_tokens;
    r.options.sampling = {temperature, top_k, top_p};
    r.options.seed = seed;
    r.options.cache = cache;
    std::function<void(Index)> each;
    if (!on_token.is_none())
      each = [&on_token](Index t) {
        py::gil_scoped_acquire gil;
        on_token(t);
      };
    return call(m, {{"text", "prompt"}, {"ids", "prompt"}, {"options.sampling.", ""}, {"options.", ""}},
                [&] { return model::to_json(model::generate(m.loaded(), r, each)); });
  });
  mod.def("patch", [](Model& m, const py::dict& clean, const py::dict& corrupt, std::optional<std::size_t> position,
                      const std::optional<std::string>& answer, const std::optional<std::string>& wrong, bool ids,
                      const std::string& point, const py::object& metric) {
    interp::PatchRequest r;
    r.clean = input(m, clean), r.corrupt = input(m, corrupt);
    r.position = position, r.answer = answer, r.wrong = wrong, r.ids = ids, r.point = point;
    if (!metric.is_none()) r.metric = python_metric(metric);
    const bool data = r.clean.example || r.corrupt.example;
    return call(m, {{"clean.", "clean"}, {"corrupt.", "corrupt"}},
                [&] { return interp::patching_json(interp::patch(data ? m.with_data() : m.loaded(), r), *m.loaded().task); });
  });
  mod.def("attribute", [](Model& m, const py::dict& clean, const py::dict& corrupt, std::optional<std::size_t> position,
                          const std::optional<std::string>& answer, const std::optional<std::string>& wrong, bool ids,
                          const std::string& method, std::size_t steps, bool noise, const py::object& metric,
                          const py::object& metric_grad) {
    interp::AttributeRequest r;
    r.clean = input(m, clean), r.corrupt = input(m, corrupt);
    r.position = position, r.answer = answer, r.wrong = wrong, r.ids = ids;
    r.method = interp::attribution_method_names().parse(method, "method");
    r.steps = steps, r.noise = noise;
    if (!metric.is_none()) r.metric = python_metric(metric);
    if (!metric_grad.is_none())
      r.metric_gradient = [&metric_grad](const Array<float>& logits) {
        py::gil_scoped_acquire gil;
        py::array_t<float> a({logits.shape().begin(), logits.shape().end()}, logits.data());
        a.attr("setflags")(py::arg("write") = false);
        const py::array g = py::array::ensure(metric_grad(a));
        if (!g || std::vector<py::ssize_t>(g.shape(), g.shape() + g.ndim()) != std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()))
          throw py::value_error("metric_grad: expected an array of the logits' shape " +
                                shape_text(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim())));
        return float_array(g);
      };
    const bool data = r.clean.example || r.corrupt.example;
    return call(m, {{"clean.", "clean"}, {"corrupt.", "corrupt"}, {"metric", "metric"}},
                [&] { return interp::to_json(interp::attribute(data ? m.with_data() : m.loaded(), r), *m.loaded().task); });
  });
  mod.def("path_patch", [](Model& m, const py::dict& clean, const py::dict& corrupt, std::optional<std::size_t> position,
                           const std::optional<std::string>& answer, const std::optional<std::string>& wrong, bool ids,
                           std::pair<std::size_t, std::size_t> sender, const std::vector<std::string>& receivers) {
    interp::PathPatchRequest r;
    r.clean = input(m, clean), r.corrupt = input(m, corrupt);
    r.position = position, r.answer = answer, r.wrong = wrong, r.ids = ids;
    r.sender = {sender.first, sender.second};
    const bool data = r.clean.example || r.corrupt.example;
    return call(m, {{"clean.", "clean"}, {"corrupt.", "corrupt"}}, [&] {
      for (std::size_t i = 0; i < receivers.size(); ++i)
        r.receivers.push_back(interp::parse_receiver(receivers[i], "receivers[" + std::to_string(i) + "]"));
      return interp::to_json(interp::path_patch(data ? m.with_data() : m.loaded(), r), *m.loaded().task);
    });
  });
  mod.def("logit_lens", [](Model& m, const py::dict& in, std::optional<std::size_t> position,
                           const std::optional<std::string>& answer, const std::optional<std::string>& wrong, bool ids,
                           std::size_t top_k) {
    interp::LensRequest r;
    r.input = input(m, in);
    r.position = position, r.answer = answer, r.wrong = wrong, r.ids = ids, r.top_k = top_k;
    return call(m, {{"input.example", "example"}, {"input.", "x"}},
                [&] { return interp::to_json(interp::logit_lens(r.input.example ? m.with_data() : m.loaded(), r), *m.loaded().task); });
  });
  mod.def("analyze", [](Model& m, const py::dict& in, const std::vector<std::pair<std::size_t, std::size_t>>& ablate,
                        const std::string& mode, std::size_t top_k) {
    interp::AnalyzeRequest r;
    r.input = input(m, in);
    for (auto& [layer, head] : ablate) r.ablate.push_back({layer, head});
    r.mode = interp::ablation_mode_names().parse(mode, "mode");
    r.top_k = top_k;
    const bool data = r.input.example || (r.mode == interp::AblationMode::Mean && !r.ablate.empty());
    return call(m, {{"input.example", "example"}, {"input.", "x"}}, [&] {
      return interp::to_json(interp::analyze(data ? m.with_data() : m.loaded(), r), *m.loaded().task,
                             interp::WeightEncoding::Float32);
    });
  });
}

}  // namespace qkv::python
