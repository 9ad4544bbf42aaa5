#pragma once
// Training from Python (train.cpp): the run `qkv train` makes, in the interpreter's process.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file of the module: one meaning for each converted type

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::python {
namespace py = pybind11;

/// What `qkv train` takes on its command line: the config as a file (`path`) or as YAML text
/// (`text`, named `source` in errors), --set overrides, --out, --resume, --overwrite, --threads,
/// --stop-after.
struct TrainArgs {
  std::string path, text, source;
  std::vector<std::string> overrides;
  std::string out, resume;
  bool has_out = false;
  bool overwrite = false;
  int threads = 0;
  std::int64_t stop_after = 0;
};

/// runs::train_with_snapshots as `qkv train` runs it, bit for bit. callback(step, metrics) (when not None)
/// after every evaluation: returning False or raising StopIteration stops the run after that step
/// (stop_reason "callback"); any other exception stops it too and is raised once last.h5 is
/// saved. Ctrl-C (Python's SIGINT handler, polled with PyErr_CheckSignals before each step) stops
/// after the current step, saves last.h5 and raises KeyboardInterrupt with the result attached
/// (.result). log(line) (when not None) receives the lines the command prints. Threads: `threads`,
/// else train.threads, for the call only. Returns the run's result as a dict.
py::dict train(const TrainArgs& args, const py::object& callback, const py::object& log);

}  // namespace qkv::python
