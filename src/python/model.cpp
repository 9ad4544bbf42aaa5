#include "model.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "arrays.hpp"
#include "qkv/io/files.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/ops/elementwise.hpp"
#include "qkv/ops/reduce.hpp"
#include "qkv/tensor/names.hpp"

namespace qkv::python {
namespace {

// Every id of `a` in [0, n) (or kIgnore when `ignore_ok`); ValueError naming `what` otherwise.
void check_ids(const IndexArray& a, std::size_t n, const std::string& what, bool ignore_ok = false) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Index id = a.data()[i];
    if ((id >= 0 && std::size_t(id) < n) || (ignore_ok && id == data::kIgnore)) continue;
    const std::size_t T = a.shape()[1];
    throw py::value_error(what + ": id " + std::to_string(id) + " at (" + std::to_string(i / T) + ", " +
                          std::to_string(i % T) + ") is outside the vocabulary [0, " + std::to_string(n) + ")" +
                          (ignore_ok ? " (or -100: not scored)" : ""));
  }
}

IndexArray ignored(std::size_t B, std::size_t T) {
  IndexArray t = IndexArray::from_shape({B, T});
  std::fill(t.begin(), t.end(), data::kIgnore);
  return t;
}

// A forward hook that hands the activation to the Python callable `fn` (a read-only view) and
// returns what it returns: None keeps the value, an array of the same shape replaces it. `fn` is
// borrowed: the caller's list owns it for the duration of the forward pass.
nn::ForwardHook<float> python_hook(std::string name, py::handle fn, int* fired) {
  return [name, fn, fired](const Variable<float>& x) -> Variable<float> {
    ++*fired;
    py::gil_scoped_acquire gil;
    py::array_t<float> given = view(x, false);
    py::object r;
    try {
      r = fn(given);
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_ValueError) && std::string(e.what()).find("read-only") != std::string::npos) {
        py::raise_from(e, PyExc_ValueError,
                       ("hook '" + name + "' wrote into the activation it was given, a read-only view of qkv's " +
                        "buffer: return a changed copy instead (x = x.copy(); x[...] = ...; return x)")
                           .c_str());
        throw py::error_already_set();
      }
      throw;
    }
    if (r.is_none() || r.ptr() == given.ptr()) return x;
    const std::vector<py::ssize_t> expected(x.shape().begin(), x.shape().end());
    py::array out = py::array::ensure(r);
    const char kind = out ? out.dtype().kind() : '?';
    if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b')
      throw py::type_error("hook '" + name + "' returned a " + std::string(py::str(py::type::of(r).attr("__name__"))) +
                           (py::isinstance<py::array>(r) ? " of dtype " + std::string(py::str(out.dtype())) : "") +
                           ": expected None or an array of numbers of shape " + shape_text(expected));
    const std::vector<py::ssize_t> found(out.shape(), out.shape() + out.ndim());
    if (found != expected)
      throw py::value_error("hook '" + name + "' returned an array of shape " + shape_text(found) + ", expected " +
                            shape_text(expected) + " (the shape of the activation at " + name + ")");
    Array<float> value = float_array(out);
    // NaN never flows on silently; an infinity only where it means something (-inf masks a score).
    const bool scores = name.size() >= 16 && name.compare(name.size() - 16, 16, "hook_attn_scores") == 0;
    std::size_t bad = 0;
    for (float x : value) bad += std::isnan(x) || (!scores && std::isinf(x));
    if (bad)
      throw py::value_error("hook '" + name + "' returned " + std::to_string(bad) + " of " + std::to_string(value.size()) +
                            " values that are NaN" + (scores ? "" : " or infinite") + ": expected finite numbers" +
                            (scores ? " (or -inf to mask a score)" : ""));
    return Variable<float>(std::move(value));
  };
}

// ValueError for names that no module produced a value at during the forward pass.
const std::string& name_of(const std::string& s) { return s; }
const std::string& name_of(const std::pair<std::string, py::handle>& p) { return p.first; }
template <class Names>
void check_fired(const Names& names, const std::vector<int>& fired) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (!fired[i])
      throw py::value_error("'" + name_of(names[i]) + "' produced no value in this forward pass (a module that returns " +
                            "several values, such as an attention layer, is read at its hook points: " + name_of(names[i]) +
                            ".hook_result, ...)");
}

// Hooks added to modules found by name beforehand, removed when the scope ends (also when an
// exception passes): nn::HookScope without its walks of the module tree by path.
class Hooks {
 public:
  Hooks() = default;
  Hooks(const Hooks&) = delete;
  Hooks& operator=(const Hooks&) = delete;
  ~Hooks() {
    for (auto& [m, h] : added_) m->remove_forward_hook(h);
  }
  void add(nn::Module<float>* m, nn::ForwardHook<float> hook) { added_.emplace_back(m, m->add_forward_hook(std::move(hook))); }

 private:
  std::vector<std::pair<nn::Module<float>*, nn::HookHandle>> added_;
};

}  // namespace

py::dict metrics_dict(const model::EvalMetrics& m) {
  py::dict d;
  d["loss"] = m.loss;
  d["token_accuracy"] = m.token_accuracy;
  d["sequence_accuracy"] = m.sequence_accuracy;
  return d;
}

Model::Model(const std::string& path, const std::vector<std::string>& task_overrides)
    : l_(model::load_model(path, model::LoadOptions{task_overrides, false, io::physical_memory_bytes()})) {
  // The names a call may use, found once: a call then looks them up instead of walking the tree.
  for (auto& [name, m] : l_.model->module().named_modules()) {
    if (name.empty()) continue;
    (dynamic_cast<nn::HookPoint<float>*>(m) ? hook_names_ : module_names_).push_back(name);
    by_name_.emplace(name, m);
  }
}

model::LoadedModel& Model::with_data() {
  if (!d_) d_ = model::with_data(l_, io::physical_memory_bytes());
  return *d_;
}

data::Batch Model::held_out(const std::string& split, std::size_t count) {
  if (split != "validation" && split != "test")
    throw py::value_error("split: expected 'validation' or 'test', found '" + split + "'" +
                          did_you_mean(split, {"validation", "test"}));
  const data::Dataset& data = *with_data().data;
  const data::Batch& all = split == "test" ? data.test_set() : data.eval_set();
  return data::rows(all, 0, count ? std::min(count, all.size()) : all.size());
}

std::string Model::config_yaml() const { return config::to_yaml(l_.cfg); }

std::size_t Model::max_len() const {
  const data::Task& t = *l_.task;
  if (l_.cfg.model.arch == nn::Arch::Decoder) return t.input_length();
  return std::max({l_.cfg.model.max_len, t.input_length(), t.seq2seq() ? t.target_length() : 0});
}

py::list Model::attention_layers() {
  py::list out;
  std::size_t index = 0;
  for (auto& [name, layer] : model::attention_layers(*l_.model)) {
    py::dict d;
    d["name"] = name;
    d["index"] = index++;
    d["kind"] = model::attention_kind_name(l_.model->attention_kind(*layer));
    d["heads"] = layer->num_heads();
    d["head_dim"] = layer->head_dim();
    d["value_dim"] = layer->value_dim();
    out.append(d);
  }
  return out;
}

py::dict Model::text_row(const std::string& text, const std::string& mask_text) {
  return batch_dict(l_.task->text_row(text, "text", mask_text));
}

py::dict Model::ids_row(const py::handle& ids) {
  IndexArray a = index_array(ids, "ids");
  if (a.shape()[0] != 1) throw py::value_error("ids: expected one row of token ids, found " + shape_str(a.shape()));
  check_ids(a, l_.task->input_vocab(), "ids");
  return batch_dict(data::ids_row(*l_.task, std::vector<Index>(a.begin(), a.end()), "ids"));
}

data::Batch Model::batch(const py::dict& d) const {
  const data::Task& task = *l_.task;
  if (!d.contains("inputs")) throw py::value_error("batch: expected a dict with 'inputs' (B, T) token ids");
  data::Batch b;
  b.inputs = index_array(d["inputs"], "inputs");
  check_ids(b.inputs, task.input_vocab(), "inputs");
  const std::size_t B = b.inputs.shape()[0], T = b.inputs.shape()[1];
  if (T > max_len())
    throw py::value_error("inputs: " + std::to_string(T) + " tokens, more than the model's context of " +
                          std::to_string(max_len()));
  b.decoder_inputs = IndexArray::from_shape({0});
  std::size_t Tt = T;
  const bool has_decoder = d.contains("decoder_inputs") && !d["decoder_inputs"].is_none();
  if (task.seq2seq()) {
    if (!has_decoder)
      throw py::value_error("decoder_inputs: " + l_.path + " is an encoder-decoder model (task " + task.name() +
                            "): give 'decoder_inputs' (B, Tt) with 'inputs', or use a held-out example");
    b.decoder_inputs = index_array(d["decoder_inputs"], "decoder_inputs");
    check_ids(b.decoder_inputs, task.target_vocab(), "decoder_inputs");
    Tt = b.decoder_inputs.shape()[1];
    if (b.decoder_inputs.shape()[0] != B)
      throw py::value_error("decoder_inputs: " + std::to_string(b.decoder_inputs.shape()[0]) + " rows, inputs " +
                            std::to_string(B));
    if (Tt > max_len())
      throw py::value_error("decoder_inputs: " + std::to_string(Tt) + " tokens, more than the model's context of " +
                            std::to_string(max_len()));
  } else if (has_decoder) {
    throw py::value_error("decoder_inputs: " + l_.path + " is not an encoder-decoder model; give 'inputs' only");
  }
  if (d.contains("targets") && !d["targets"].is_none()) {
    b.targets = index_array(d["targets"], "targets");
    if (b.targets.shape()[0] != B || b.targets.shape()[1] != Tt)
      throw py::value_error("targets: expected shape (" + std::to_string(B) + ", " + std::to_string(Tt) + "), found " +
                            shape_str(b.targets.shape()));
    check_ids(b.targets, task.num_classes(), "targets", true);
  } else {
    b.targets = ignored(B, Tt);
  }
  return b;
}

py::dict Model::batch_dict(data::Batch b) {
  py::dict d;
  d["inputs"] = adopt<Index>(std::move(b.inputs));
  d["targets"] = adopt<Index>(std::move(b.targets));
  if (b.decoder_inputs.dimension() == 2) d["decoder_inputs"] = adopt<Index>(std::move(b.decoder_inputs));
  if (b.words.dimension() == 2) d["words"] = adopt<Index>(std::move(b.words));
  if (b.relations.dimension() == 3) d["relations"] = adopt<Index>(std::move(b.relations));
  return d;
}

nn::Module<float>* Model::find(const std::string& name, const char* what) const {
  if (auto it = by_name_.find(name); it != by_name_.end()) return it->second;
  std::vector<std::string> all = hook_names_;
  all.insert(all.end(), module_names_.begin(), module_names_.end());
  throw py::value_error(std::string(what) + ": no hook point or module named '" + name + "'" + did_you_mean(name, all) +
                        " (Model.hook_names lists the " + std::to_string(hook_names_.size()) + " hook points)");
}

std::vector<std::pair<std::string, py::handle>> Model::python_hooks(const py::list& hooks) const {
  std::vector<std::pair<std::string, py::handle>> out;
  for (const py::handle& item : hooks) {
    const py::tuple pair = item.cast<py::tuple>();
    if (pair.size() != 2 || !PyCallable_Check(pair[1].ptr()))
      throw py::type_error("fwd_hooks: expected (name, function) pairs");
    out.emplace_back(pair[0].cast<std::string>(), pair[1]);
    find(out.back().first, "fwd_hooks");
  }
  return out;
}

py::tuple Model::run(const py::dict& batch_in, const std::vector<std::string>& record, const py::list& hooks) {
  const data::Batch b = batch(batch_in);
  std::vector<nn::Module<float>*> points;
  for (auto& name : record) points.push_back(find(name, "names_filter"));
  const auto fns = python_hooks(hooks);
  std::vector<int> hook_fired(fns.size(), 0), record_fired(record.size(), 0);
  std::vector<Variable<float>> recorded(record.size());
  std::vector<std::size_t> order;  // record indices in the order their values were produced
  Variable<float> logits;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    Hooks scope;
    for (std::size_t i = 0; i < fns.size(); ++i)  // first: the cache sees the values they leave
      scope.add(by_name_.at(fns[i].first), python_hook(fns[i].first, fns[i].second, &hook_fired[i]));
    for (std::size_t i = 0; i < record.size(); ++i)
      scope.add(points[i], [i, &recorded, &record_fired, &order](const Variable<float>& x) {
        if (!record_fired[i]++) order.push_back(i);
        recorded[i] = x;  // a handle: the value is kept, not copied
        return x;
      });
    NoGradGuard no_grad;
    nn::EvalGuard<float> eval(l_.model->module());
    logits = l_.model->logits(b);
  }
  check_fired(record, record_fired);
  check_fired(fns, hook_fired);
  py::dict cache;
  bool shared = false;  // a recorded value that is the logits' buffer ("head")
  for (std::size_t i : order) {
    cache[py::str(record[i])] = view(recorded[i], false);
    shared = shared || recorded[i].value().data() == logits.value().data();
  }
  return py::make_tuple(shared ? adopt<float>(Array<float>(logits.value())) : view(logits), cache);
}

py::tuple Model::run_grads(const py::dict& batch_in, const std::vector<std::string>& record, const py::list& hooks,
                           const py::object& metric) {
  const data::Batch b = batch(batch_in);
  for (auto& name : record)
    if (!std::count(hook_names_.begin(), hook_names_.end(), name))
      throw py::value_error("incl_bwd: gradients are recorded at hook points; '" + name + "' is " +
                            (by_name_.count(name) ? "a module (Model.hook_names lists the hook points)" : "no hook point") +
                            did_you_mean(name, hook_names_));
  const auto fns = python_hooks(hooks);
  std::vector<int> fired(fns.size(), 0);
  Array<float> logits;
  double value = 0;
  nn::GradCache<float> g;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    Hooks scope;
    for (std::size_t i = 0; i < fns.size(); ++i)
      scope.add(by_name_.at(fns[i].first), python_hook(fns[i].first, fns[i].second, &fired[i]));
    nn::EvalGuard<float> eval(l_.model->module());
    g = nn::run_with_grads(l_.model->module(), [&] {
      const Variable<float> z = l_.model->logits(b);
      logits = z.value();
      Array<float> dz;
      {
        py::gil_scoped_acquire gil;
        const py::tuple r = metric(view(z, false)).cast<py::tuple>();  // (value, dm/dlogits)
        value = r[0].cast<double>();
        const py::array grad = py::array::ensure(r[1]);
        const std::vector<py::ssize_t> expected(z.shape().begin(), z.shape().end());
        if (!grad || std::vector<py::ssize_t>(grad.shape(), grad.shape() + grad.ndim()) != expected)
          throw py::value_error("metric: its gradient with respect to the logits must have the logits' shape " +
                                shape_text(expected));
        dz = float_array(grad);
      }
      if (!std::isfinite(value)) throw py::value_error("metric: not finite (" + std::to_string(value) + ")");
      for (float x : dz)
        if (!std::isfinite(x)) throw py::value_error("metric: its gradient with respect to the logits is not finite");
      return sum(mul(z, Variable<float>(std::move(dz))));
    }, record);
  }
  check_fired(fns, fired);
  py::dict values, grads;
  for (auto& [name, a] : g.values.entries()) values[py::str(name)] = adopt<float>(Array<float>(a));
  for (auto& [name, a] : g.grads.entries()) grads[py::str(name)] = adopt<float>(Array<float>(a));
  return py::make_tuple(adopt<float>(std::move(logits)), value, values, grads);
}

py::dict Model::evaluate(const py::dict& batch_in, const py::list& hooks, std::size_t batch_size) {
  const data::Batch b = batch(batch_in);
  if (batch_size == 0) throw py::value_error("batch_size: expected at least 1");
  const auto fns = python_hooks(hooks);
  std::vector<int> fired(fns.size(), 0);
  model::EvalMetrics m;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    Hooks scope;
    for (std::size_t i = 0; i < fns.size(); ++i)
      scope.add(by_name_.at(fns[i].first), python_hook(fns[i].first, fns[i].second, &fired[i]));
    m = model::evaluate(*l_.model, b, batch_size);
  }
  check_fired(fns, fired);
  return metrics_dict(m);
}

std::vector<std::pair<double, double>> Model::time_cxx_forward(const py::dict& batch_in, const std::vector<std::string>& record,
                                                               std::size_t repeats) {
  const data::Batch b = batch(batch_in);
  for (auto& name : record) find(name, "record");
  auto thread_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  };
  std::vector<std::pair<double, double>> seconds;
  py::gil_scoped_release nogil;
  std::lock_guard<std::mutex> lock(mutex_);
  NoGradGuard no_grad;
  for (std::size_t r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_seconds();
    if (record.empty()) {
      (void)l_.model->logits(b);
    } else {
      Variable<float> logits;
      auto cache = nn::run_with_cache(l_.model->module(), [&] { logits = l_.model->logits(b); }, record);
      (void)cache;
    }
    const double c1 = thread_seconds();
    seconds.emplace_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), c1 - c0);
  }
  return seconds;
}

}  // namespace qkv::python
