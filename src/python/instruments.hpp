#pragma once
// The instruments for Python (instruments.cpp): the numbers of `qkv heads`, `qkv ablate`, `qkv
// explain --json`, `qkv fill` and `qkv generate`, as plain data.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file of the module: one meaning for each converted type

#include <cstdint>
#include <string>
#include <vector>

#include "model.hpp"

namespace qkv::python {
namespace py = pybind11;

/// interp::head_scores on the first `examples` rows of the test split, as `qkv heads --csv`:
/// {"heads": one dict per head with the CSV's columns (layer, layer_index, head, kind, the scores
/// of "score_names" (NaN: does not apply; the task's relations last), label), "score_names",
/// "baselines": {relation: {"offset", "share", "count"}} (the best fixed offset, the CSV's
/// baseline row)}.
py::dict heads(Model& m, std::size_t examples);

/// interp::head_divergence on the first `examples` test rows (`qkv heads --similarity`): per
/// attention layer an (H, H) array of Jensen-Shannon divergences in bits.
py::list head_divergence(Model& m, std::size_t examples);

/// `qkv ablate`: {"mode", "examples", "intact": metrics} plus, with `has_heads`, "ablated" (those
/// heads removed together); with `prune`, "curve" (the pruning curve); else "each" (every head
/// removed alone, in model order). `relation` (not empty): only the tokens with that gold relation
/// are scored (interp::restrict_to_relation, as --relation). Metrics: loss, token_accuracy, sequence_accuracy (and
/// loss_change, accuracy_change against the intact model).
py::dict ablate(Model& m, const std::string& heads, bool has_heads, const std::string& mode, std::size_t examples,
                bool prune, std::size_t step, const std::string& relation);

/// interp::explanation_json of one query (what `qkv explain --json` prints) for a one-row batch.
std::string explain(Model& m, const py::dict& row, std::size_t layer, std::size_t head, std::size_t query);

/// model::fill_masks on the task's row of `text`: per mask, {"position", "top": [(label, id, p)]}.
py::list fill(Model& m, const std::string& text, const std::string& mask_text, std::size_t k);

/// model::generate with `qkv generate`'s checks: the new token ids; on_token(id) (when not None)
/// as each is chosen.
std::vector<Index> generate(Model& m, const std::vector<Index>& prompt, std::size_t max_tokens, double temperature,
                            std::size_t top_k, double top_p, std::uint64_t seed, bool cache, const py::object& on_token);

}  // namespace qkv::python
