#pragma once
/// @file
/// The shelf of known circuits (docs/grade.md): compiled programs whose circuit is known by
/// construction, widened with *distractor* heads that are known to be outside it, so that an
/// instrument that is to find the circuit has heads to tell apart.
///
/// A distractor is an extra head of a layer whose output goes to a residual dimension of its own
/// ("dead:L.H") that nothing reads (no later head, MLP or the output layer): it cannot change
/// an output, in any input. Its attention pattern is chosen to look like a circuit's:
///
///   mimic          the query, key and value weights (and biases) of the layer's first circuit
///                  head, copied: the same pattern and z as the real head, on every input
///   previous-token q . k = [index(k) = index(q) - 1]  (reads the indices' one-hot)
///   same-token     q . k = [token(k) = token(q)]      (reads the tokens' one-hot)
///   first-token    q . k = [k is BOS]                  (the attention sink)
///
/// with the model's softmax scale, so the patterns are as hard as the compiled heads'. The value
/// of the other patterns reads the tokens' one-hot. Widening keeps every compiled weight: new heads go after a layer's
/// heads, new dimensions after the residual's, head_dim and value_dim grow to what the
/// distractors need; the model computes the same outputs to the bit (compile::check_model agrees).

#include <string>
#include <vector>

#include "qkv/compile/compile.hpp"

namespace qkv::compile {

enum class DistractorPattern { Mimic, PreviousToken, SameToken, FirstToken };
/// "mimic", "previous-token", "same-token", "first-token".
const char* name(DistractorPattern pattern);

struct Distractor {
  std::size_t layer = 0;
  DistractorPattern pattern = DistractorPattern::Mimic;
};

/// `c` (compiled from `program`, or a trained model of the program's task with `c.circuit_json` its
/// ground truth: mimics only) with the distractors added, in order: each becomes the next new head
/// of its layer; a mimic copies the first circuit head of its layer (the circuit's "components").
/// Its info lists the dead dimensions in `residual`; its circuit file gains
///   "distractors": [{"id": "L.H", "pattern": "mimic", "mimics": "L.H0", "writes": "dead:L.H"}]
/// and the widened sizes in "model"; "components" and "edges" (the circuit) are unchanged.
/// ValueError for a layer out of range, a mimic in a layer without a circuit head, another
/// pattern on a residual without the labels it reads. A model without /compiled (trained) gets none.
CompiledModel add_distractors(const CompiledModel& c, const rasp::Program& program,
                              const std::vector<Distractor>& distractors);

/// The shelf's rule: every layer gets a mimic of its first circuit head (when it has one), then
/// one of previous-token, same-token, first-token (layer l: the (l mod 3)-th); only the mimics with
/// `mimics_only` (a trained model, whose residual has no labelled dimensions).
std::vector<Distractor> shelf_distractors(const CompiledModel& c, bool mimics_only = false);

/// One model of the shelf: a program of programs/.
struct ShelfEntry {
  std::string name;     ///< "induction": programs/induction.rasp
  std::string summary;  ///< what its circuit is, in a line
};
/// The shelf: induction, who_what, reverse, sort, histogram (docs/grade.md lists each circuit).
const std::vector<ShelfEntry>& shelf();
/// The entry named `name`; ValueError listing the names otherwise.
const ShelfEntry& shelf_entry(const std::string& name);

/// The entry compiled from `programs_dir`/<name>.rasp with shelf_distractors added.
struct ShelfModel {
  ShelfEntry entry;
  rasp::Program program;
  CompiledModel compiled;
};
ShelfModel build_shelf_model(const ShelfEntry& entry, const std::string& programs_dir,
                             const CompileOptions& options = {});

}  // namespace qkv::compile
