#pragma once
// The model of the Python module: a checkpoint loaded (model::LoadedModel) with what Python asks of
// it: its vocabulary, the rows it reads, and forward passes that record hook points and run Python
// hooks. The instruments (instruments.cpp) take it too.
//
// Threads and the GIL: every method is called with the GIL held; forward passes release it and
// take the model's mutex (two Python threads never run one model's hooks at once), and a Python
// hook takes the GIL back for the time of its call.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file of the module: one meaning for each converted type

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qkv/model/evaluate.hpp"
#include "qkv/model/load.hpp"
#include "qkv/nn/activation_cache.hpp"

namespace qkv::python {
namespace py = pybind11;

/// {"loss", "token_accuracy", "sequence_accuracy"}.
py::dict metrics_dict(const model::EvalMetrics& m);

class Model {
 public:
  /// Read `path` with model::load_model (a readable regular file whose header and checksum are
  /// verified before HDF5 parses a byte; the model within this machine's memory), without the
  /// task's data: held-out sets are made when an instrument first needs them (with_data).
  /// `task_overrides`: "task.key=value" only.
  Model(const std::string& path, const std::vector<std::string>& task_overrides);

  model::LoadedModel& loaded() { return l_; }
  /// The model with its data (model::with_data, made on first use; the same weights): what the
  /// instruments that read held-out sets take. With the mutex held.
  model::LoadedModel& with_data();
  model::TaskModel& task_model() { return *l_.model; }
  const data::Task& task() const { return *l_.task; }
  std::mutex& mutex() { return mutex_; }
  /// The first `count` rows (0: all) of "validation" or "test" (ValueError for another name);
  /// with the mutex held.
  data::Batch held_out(const std::string& split, std::size_t count);

  const std::string& path() const { return l_.path; }
  std::string config_yaml() const;
  /// Longest sequence the model reads (its positional table, or a decoder's context).
  std::size_t max_len() const;
  /// The dotted names of the hook points (HookPoint modules), in model order.
  const std::vector<std::string>& hook_names() const { return hook_names_; }
  /// Every other module's dotted name (their outputs can be hooked too).
  const std::vector<std::string>& module_names() const { return module_names_; }
  /// Per attention layer: name, index, kind, heads, head_dim (D), value_dim (Dv).
  py::list attention_layers();

  /// The task's row for `text` (Task::text_row) / token ids (data::ids_row), as a batch dict.
  py::dict text_row(const std::string& text, const std::string& mask_text);
  py::dict ids_row(const py::handle& ids);

  /// A batch of the model from a dict: "inputs" (B, T) ids, optional "targets" (kIgnore where
  /// absent) and "decoder_inputs" (required by encoder-decoder models). ValueError naming the key
  /// for ids out of range or lengths past the model's.
  data::Batch batch(const py::dict& d) const;
  /// A batch as a dict of int64 numpy arrays (the keys above; "words"/"relations" for grammar rows).
  static py::dict batch_dict(data::Batch b);

  /// One forward pass (eval mode, no tape): `hooks` (name, fn) run first at their points, in
  /// order; fn(activation) receives a read-only numpy view and returns None or a replacement of
  /// the same shape. Then the values at `record` are kept (handles, no copy). Returns (logits,
  /// {name: array}) with the arrays over qkv's buffers. A name must be a hook point or a module
  /// (ValueError with a did-you-mean), and must produce a value in this forward.
  py::tuple run(const py::dict& batch, const std::vector<std::string>& record, const py::list& hooks);
  /// Gradients at hook points (nn::run_with_grads, eval mode): one forward pass with `hooks`, then
  /// metric(logits) -> (value, dm/dlogits) in Python, one backward pass of sum(logits * dm/dlogits).
  /// Returns (logits, value, {name: value}, {name: dm/dvalue}), arrays owned by Python. `record`:
  /// hook points only.
  py::tuple run_grads(const py::dict& batch, const std::vector<std::string>& record, const py::list& hooks,
                      const py::object& metric);
  /// model::evaluate on `batch` (`batch_size` rows at a time) with `hooks` installed.
  py::dict evaluate(const py::dict& batch, const py::list& hooks, std::size_t batch_size);

  /// (wall, calling thread's CPU) seconds of each of `repeats` forward passes of `batch` in C++
  /// (no tape), recording `record` as nn::run_with_cache does (copies; nothing when empty): the
  /// C++ side of the overhead benchmark (tools/bench_python.py), timed inside C++.
  std::vector<std::pair<double, double>> time_cxx_forward(const py::dict& batch, const std::vector<std::string>& record,
                                                          std::size_t repeats);

 private:
  // The module a hook or record name refers to; ValueError (with the closest name) otherwise.
  nn::Module<float>* find(const std::string& name, const char* what) const;
  // The (name, function) pairs of `hooks`, names checked; the functions stay owned by `hooks`.
  std::vector<std::pair<std::string, py::handle>> python_hooks(const py::list& hooks) const;

  model::LoadedModel l_;
  std::vector<std::string> hook_names_, module_names_;
  std::unordered_map<std::string, nn::Module<float>*> by_name_;
  std::optional<model::LoadedModel> d_;  // with_data(): the task with its corpus, the data; task() stays l_'s
  std::mutex mutex_;
};

}  // namespace qkv::python
