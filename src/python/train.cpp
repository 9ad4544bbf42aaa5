// Training from Python: runs::train_with_snapshots (the run `qkv train` makes, snapshots included) in this
// interpreter's process, which it leaves as it found it: no signal handler (Ctrl-C is Python's
// own, polled between steps), no environment change, no re-execution, one process (no MPI).
#include "train.hpp"

#include <cstdio>
#include <optional>

#include "model.hpp"
#include "qkv/runs/training.hpp"
#include "qkv/io/files.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/version.hpp"

namespace qkv::python {
namespace {

// The process's thread count, put back when the call ends (run_training sets the run's).
class ThreadsRestored {
 public:
  ThreadsRestored() : previous_(num_threads()) {}
  ~ThreadsRestored() { set_num_threads(previous_); }
  ThreadsRestored(const ThreadsRestored&) = delete;
  ThreadsRestored& operator=(const ThreadsRestored&) = delete;

 private:
  int previous_;
};

}  // namespace

py::dict train(const TrainArgs& a, const py::object& callback, const py::object& log) {
  if (a.has_out && a.out.empty()) throw py::value_error("out: empty; give the run directory");
  config::Config cfg;
  {
    py::gil_scoped_release nogil;  // a text task's corpus is read to size the run
    cfg = a.path.empty() ? config::parse_config(a.text, a.source, a.overrides, io::physical_memory_bytes())
                         : config::load_config(a.path, a.overrides, io::physical_memory_bytes());
    // The checkpoint is verified (header and checksum) before HDF5 parses a byte when the run
    // resumes from it: a damaged file is an IoError, in this process, without a child.
    if (!a.resume.empty()) io::check_input_file(a.resume, "resume");
  }
  const train::RunOptions o = runs::run_options(a.resume, a.out, a.overwrite, a.stop_after);
  const std::string dir = a.out.empty() ? cfg.run.out : a.out;

  // What the callbacks saw, handed back to Python after the loop has saved last.h5.
  struct Outcome {
    std::optional<py::error_already_set> interrupt;  // from PyErr_CheckSignals (KeyboardInterrupt)
    std::optional<py::error_already_set> error;      // raised by the user's callback
    bool callback_stop = false;                      // the callback returned False or raised StopIteration
  } outcome;
  auto say = [&log](const std::string& line) {  // with the GIL
    if (!log.is_none()) log(line);
  };
  train::Callbacks cb;
  cb.stop_requested = [&] {
    if (outcome.callback_stop || outcome.error || outcome.interrupt) return true;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) outcome.interrupt.emplace();  // fetches (and clears) the error the handler raised
    return outcome.interrupt.has_value();
  };
  cb.on_start = [&](train::Session& s) {
    py::gil_scoped_acquire gil;
    say(std::string("qkv ") + QKV_VERSION + " | " + s.task().name() + " | " +
        std::to_string(s.model().module().num_parameters()) + " parameters | " + std::to_string(num_threads()) +
        " thread(s) | " + s.dp().comm().description());
    say("BLAS: " + kernels::blas_info());
    if (const std::string m = runs::precision_message(s); !m.empty()) say(m);
    if (s.state().step > 0) say("resumed from " + a.resume + " at step " + std::to_string(s.state().step));
  };
  cb.on_evaluation = [&](train::Session& s) {
    py::gil_scoped_acquire gil;
    const model::EvalMetrics& e = s.state().last_eval;
    char line[200];
    std::snprintf(line, sizeof line, "eval @ %lld: loss %.4f  token acc %.2f%%  seq acc %.2f%%",
                  (long long)s.state().step, e.loss, 100 * e.token_accuracy, 100 * e.sequence_accuracy);
    say(line);
    if (callback.is_none()) return;
    py::dict metrics;
    for (auto& column : s.metrics().columns()) metrics[py::str(column)] = s.metrics().last(column);
    try {
      py::object r = callback(s.state().step, metrics);
      if (!r.is_none() && PyObject_IsTrue(r.ptr()) == 0) outcome.callback_stop = true;
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_StopIteration))
        outcome.callback_stop = true;
      else if (e.matches(PyExc_KeyboardInterrupt))
        outcome.interrupt = e;  // Ctrl-C while the callback ran: as between steps
      else
        outcome.error = e;  // re-raised after the loop has stopped and saved last.h5
    }
  };
  cb.on_end = [&](train::Session&, const train::RunResult& r) {
    if (r.stop_reason != "interrupted") return;
    py::gil_scoped_acquire gil;
    say("stopped at step " + std::to_string(r.step) + ": saving " + dir + "/last.h5");
  };

  train::RunResult r;
  {
    ThreadsRestored threads;
    dist::Comm one;
    py::gil_scoped_release nogil;
    r = runs::train_with_snapshots(
        cfg, o, cb, one,
        [&](const std::string& note) {
          py::gil_scoped_acquire gil;
          say("qkv: " + note);
        },
        a.threads);
  }
  py::dict result;
  result["stop_reason"] = outcome.callback_stop && r.stop_reason == "interrupted" ? "callback" : r.stop_reason;
  result["step"] = r.step;
  result["last"] = metrics_dict(r.last);
  result["best"] = metrics_dict(r.best);
  result["steps_to_target"] = r.steps_to_target;
  result["wall_seconds"] = r.wall_seconds;
  result["tokens_per_s"] = r.tokens_per_s;
  result["message"] = r.message;
  result["run_dir"] = dir;
  if (outcome.error) throw *outcome.error;
  if (outcome.interrupt) {
    if (!outcome.interrupt->matches(PyExc_KeyboardInterrupt)) throw *outcome.interrupt;
    // A KeyboardInterrupt that says where the run stopped and how to go on, the result attached.
    py::object e = py::module_::import("builtins").attr("KeyboardInterrupt")(
        "training interrupted at step " + std::to_string(r.step) + "; saved " + dir + "/last.h5 (resume with " +
        "qkv.train(..., resume='" + dir + "/last.h5'))");
    e.attr("result") = result;
    PyErr_SetObject(PyExc_KeyboardInterrupt, e.ptr());
    throw py::error_already_set();
  }
  return result;
}

}  // namespace qkv::python
