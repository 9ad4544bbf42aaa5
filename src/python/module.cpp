// qkv._qkv: the extension module under the Python package qkv (python/qkv/__init__.py holds the
// Python API and its documentation; docs/python.md the guide). It links libqkv alone (no part of
// the qkv command) and lives in the interpreter's process: it installs no signal handler, changes
// no environment variable, never forks, re-executes or prints to stderr (tests/structure_check.py
// checks src/python for that, and tests/python that the module links no application code).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arrays.hpp"
#include "instruments.hpp"
#include "model.hpp"
#include "qkv/config/config.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/io/io_error.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/tensor/allocator.hpp"
#include "qkv/tensor/names.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/version.hpp"
#include "train.hpp"

namespace py = pybind11;
using qkv::python::Model;

namespace {

// ids -> text: the tokenizer's text for its ids, the token label for the others (the mask and pad
// tokens of masked and grammar models); labels joined by spaces for tasks without a tokenizer.
py::bytes decode(Model& m, const std::vector<qkv::Index>& ids) {
  const qkv::data::Task& task = m.task();
  const qkv::data::Tokenizer* t = task.tokenizer();
  std::string out;
  std::vector<qkv::Index> run;
  for (qkv::Index id : ids) {
    if (id < 0 || std::size_t(id) >= task.input_vocab())
      throw py::value_error("ids: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(task.input_vocab()) + ")");
    if (t && std::size_t(id) < t->size()) {
      run.push_back(id);
      continue;
    }
    if (!run.empty()) out += t->decode(run), run.clear();
    out += (t || out.empty() ? "" : " ") + task.token_label(id);
  }
  if (!run.empty()) out += t->decode(run);
  return py::bytes(out);
}

py::dict info() {
  py::dict d;
  d["version"] = QKV_VERSION;
  d["blas"] = qkv::kernels::blas_info();  // opens OpenBLAS if no product has yet
  d["cpu_core_type"] = qkv::kernels::blas_core_type_for_cpu();
  d["threads"] = qkv::num_threads();
#ifdef _OPENMP
  d["openmp"] = true;
#else
  d["openmp"] = false;
#endif
  return d;
}

py::dict pool_stats() {
  const qkv::pool::Stats s = qkv::pool::stats();
  py::dict d;
  d["requests"] = s.requests;
  d["system_allocations"] = s.system_allocations;
  d["cached_bytes"] = s.cached_bytes;
  d["in_use_bytes"] = s.in_use_bytes;
  d["peak_in_use_bytes"] = s.peak_in_use_bytes;
  return d;
}

}  // namespace

PYBIND11_MODULE(_qkv, m) {
  m.doc() = "qkv's engine and instruments (the extension under the package qkv; see help(qkv))";
  m.attr("__version__") = QKV_VERSION;

  // qkv's errors as Python exceptions; the message is qkv's.
  static py::handle error = PyErr_NewException("qkv.Error", PyExc_RuntimeError, nullptr);
  static py::handle config_error = PyErr_NewException("qkv.ConfigError", PyExc_ValueError, nullptr);
  static py::handle io_error = PyErr_NewException("qkv.IoError", PyExc_OSError, nullptr);
  static py::handle shape_error = PyErr_NewException("qkv.ShapeError", PyExc_ValueError, nullptr);
  m.attr("Error") = error;
  m.attr("ConfigError") = config_error;
  m.attr("IoError") = io_error;
  m.attr("ShapeError") = shape_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const qkv::config::ConfigError& e) {
      PyErr_SetString(config_error.ptr(), e.what());
    } catch (const qkv::io::IoError& e) {
      PyErr_SetString(io_error.ptr(), e.what());
    } catch (const qkv::ShapeError& e) {
      PyErr_SetString(shape_error.ptr(), e.what());
    } catch (const qkv::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const qkv::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def(py::init<const std::string&, const std::vector<std::string>&>(), py::arg("path"),
           py::arg("task_overrides") = std::vector<std::string>{}, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("path", &Model::path)
      .def_property_readonly("config_yaml", &Model::config_yaml)
      .def_property_readonly("task_name", [](Model& s) { return s.task().name(); })
      .def_property_readonly("arch", [](Model& s) { return std::string(qkv::nn::arch_names().name(s.loaded().cfg.model.arch)); })
      .def_property_readonly("input_vocab", [](Model& s) { return s.task().input_vocab(); })
      .def_property_readonly("num_classes", [](Model& s) { return s.task().num_classes(); })
      .def_property_readonly("target_vocab", [](Model& s) { return s.task().target_vocab(); })
      .def_property_readonly("input_length", [](Model& s) { return s.task().input_length(); })
      .def_property_readonly("max_len", &Model::max_len)
      .def_property_readonly("tokenizer", [](Model& s) -> py::object {
        const qkv::data::Tokenizer* t = s.task().tokenizer();
        return t ? py::object(py::str(qkv::data::name(t->kind()))) : py::object(py::none());
      })
      .def_property_readonly("mask_token", [](Model& s) { return s.task().mask_token(); })
      .def_property_readonly("pad_token", [](Model& s) { return s.task().pad_token(); })
      .def_property_readonly("bos", [](Model& s) { return s.task().bos(); })
      .def_property_readonly("next_token", [](Model& s) { return s.task().next_token(); })
      .def_property_readonly("masked", [](Model& s) { return s.task().masked(); })
      .def_property_readonly("seq2seq", [](Model& s) { return s.task().seq2seq(); })
      .def_property_readonly("num_parameters", [](Model& s) { return s.task_model().module().num_parameters(); })
      .def("hook_names", &Model::hook_names)
      .def("module_names", &Model::module_names)
      .def("attention_layers", &Model::attention_layers)
      .def("encode", [](Model& s, const std::string& text, const std::string& mask_text) {
        const qkv::data::Tokenizer* t = s.task().tokenizer();
        if (!t)
          throw py::value_error(s.path() + " was trained on the " + s.task().name() +
                                " task and has no vocabulary (not a text model): give token ids");
        return qkv::data::encode_with_masks(*t, text, s.task().mask_token(), mask_text, "text");
      })
      .def("decode", &decode)
      .def("labels", [](Model& s, const std::vector<qkv::Index>& ids) {
        std::vector<std::string> out;
        for (qkv::Index id : ids) {
          if (id < 0 || std::size_t(id) >= s.task().input_vocab())
            throw py::value_error("ids: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                  std::to_string(s.task().input_vocab()) + ")");
          out.push_back(s.task().token_label(id));
        }
        return out;
      })
      .def("text_row", &Model::text_row)
      .def("ids_row", &Model::ids_row)
      .def("held_out", [](Model& s, const std::string& split, std::size_t count) {
        qkv::data::Batch b;
        {
          py::gil_scoped_release nogil;
          std::lock_guard<std::mutex> lock(s.mutex());
          b = s.held_out(split, count);
        }
        return Model::batch_dict(std::move(b));
      })
      .def("state_dict", [](Model& s) {
        py::dict d;  // read-only views of the parameters (no copy)
        for (auto& [name, p] : s.task_model().module().named_parameters()) d[py::str(name)] = qkv::python::view(p, false);
        return d;
      })
      .def("run", &Model::run)
      .def("run_grads", &Model::run_grads)
      .def("evaluate", &Model::evaluate)
      .def("time_cxx_forward", &Model::time_cxx_forward);

  qkv::python::bind_instruments(m);

  py::class_<qkv::python::TrainArgs>(m, "TrainArgs")
      .def(py::init<>())
      .def_readwrite("path", &qkv::python::TrainArgs::path)
      .def_readwrite("text", &qkv::python::TrainArgs::text)
      .def_readwrite("source", &qkv::python::TrainArgs::source)
      .def_readwrite("overrides", &qkv::python::TrainArgs::overrides)
      .def_readwrite("out", &qkv::python::TrainArgs::out)
      .def_readwrite("resume", &qkv::python::TrainArgs::resume)
      .def_readwrite("has_out", &qkv::python::TrainArgs::has_out)
      .def_readwrite("overwrite", &qkv::python::TrainArgs::overwrite)
      .def_readwrite("threads", &qkv::python::TrainArgs::threads)
      .def_readwrite("stop_after", &qkv::python::TrainArgs::stop_after);
  m.def("train", &qkv::python::train);

  m.def("info", &info);
  m.def("cpu_core_type", &qkv::kernels::blas_core_type_for_cpu,
        "The OpenBLAS core type that fits this CPU (what the qkv command runs); does not open OpenBLAS");
  m.def("num_threads", &qkv::num_threads);
  m.def("set_num_threads", [](int n) {
    if (n < 1) throw py::value_error("set_num_threads: expected at least 1 thread, found " + std::to_string(n));
    qkv::set_num_threads(n);
  });
  m.def("pool_stats", &pool_stats);
  m.def("did_you_mean", &qkv::did_you_mean, "\"; did you mean 'X'?\" for the candidate closest to word, or \"\" (qkv's rule)");
}
