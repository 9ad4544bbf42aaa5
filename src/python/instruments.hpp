#pragma once
// The instruments for Python (instruments.cpp): each builds the library's request from Python's
// arguments, calls the library (the same call as the qkv command and the studio) and returns the
// library's JSON text, which python/qkv/instruments.py reads: one text, one set of numbers. The
// model runs with the GIL released, under the model's mutex. A field error of the library becomes
// a ValueError naming the Python argument.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file of the module: one meaning for each converted type

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model.hpp"

namespace qkv::python {
namespace py = pybind11;

/// Binds the instruments into the module `m`:
///   heads(model, examples, similarity) -> str                 interp::heads
///   ablate(model, heads: str | None, mode, examples, prune, step, relation) -> str   interp::ablate
///   swap(model, examples, seed) -> str                        interp::value_swap
///   evaluate(model, train) -> str                             model::evaluate (`qkv eval`)
///   explain(model, input, layer, head, query) -> str          interp::explain (one object, or a list)
///   fill(model, input, k) -> str                              model::fill
///   generate(model, prompt, max_tokens, temperature, top_k, top_p, seed, cache, on_token) -> str
///   patch(model, clean, corrupt, position, answer, wrong, point, metric) -> str   interp::patch
///   analyze(model, input, ablate, mode, top_k) -> str         interp::analyze (the studio's grid)
/// An input is a dict: {"text", "mask_text"} | {"ids"} | {"example", "split"} | {"row": batch dict}.
void bind_instruments(py::module_& m);

}  // namespace qkv::python
