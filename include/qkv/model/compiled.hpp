#pragma once
/// @file
/// What a compiled program's model is made of (qkv compile, docs/compile.md): the label of every
/// residual dimension, and the RASP operation each attention head and MLP computes, with the
/// edges between them. Stored in a checkpoint's /compiled group; checkpoints of trained models
/// have none.
///
/// Components are attention heads ("L.H", as `qkv ablate --heads` names them) and MLPs ("mlpL").
/// An edge says that a component reads, at one of its inputs ("q", "k", "v" for a head, "in" for
/// an MLP, "out" for the model's output layer), a residual subspace that another one wrote
/// ("embed": the token and position embeddings).

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "qkv/io/checkpoint.hpp"

namespace qkv::model {

/// One RASP operation and where the model computes it.
struct CompiledOp {
  std::string component;  ///< "L.H" (a head) or "mlpL"
  std::size_t layer = 0;
  std::size_t head = 0;   ///< heads only
  /// "aggregate", "numerical aggregate", "selector_width" (its head and its MLP are two ops),
  /// "map", "numerical map", "sequence_map", "numerical sequence_map".
  std::string op;
  std::string sop;        ///< the S-op it writes (a selector_width's head: "<sop>.width")
  std::size_t line = 0;   ///< where the program writes it
  std::string expr;       ///< its source text
  /// Heads: what each query/key dimension means ("keys == 3", "one", "bos") and each value
  /// dimension; MLPs: the hidden units it uses [first, first + count).
  std::vector<std::string> qk_dims, v_dims;
  std::size_t hidden_first = 0, hidden_count = 0;
};

/// Component `to` reads at `port` the S-op `sop` that `from` wrote.
struct CompiledEdge {
  std::string from, to, port, sop;
};

struct CompiledInfo {
  std::string program;                 ///< the program's source text
  std::string output;                  ///< the output S-op
  std::vector<std::string> residual;   ///< d_model labels: "one", "bos", "tokens:a", "indices:3", "length:2", "frac" ...
  std::vector<CompiledOp> ops;
  std::vector<CompiledEdge> edges;
  /// The components (heads and MLPs) that compute something, in model order, without repeats.
  std::vector<std::string> components() const;
};

/// The value S-op `sop` holds in one position's residual vector `x` (d_model floats, labelled by
/// CompiledInfo::residual): a categorical S-op's label after "sop:" of the dimension above 1/2
/// ("" when none is: None); a numerical S-op's one dimension, as a number.
std::string sop_value(const float* x, const std::vector<std::string>& residual, const std::string& sop);

/// The /compiled entries that store `info` (plus "circuit": `circuit_json` when not empty).
std::vector<std::pair<std::string, std::string>> compiled_entries(const CompiledInfo& info,
                                                                  const std::string& circuit_json = "");
/// The compiled program of a checkpoint; nullopt for one without /compiled. IoError naming
/// `path` when the entries are malformed.
std::optional<CompiledInfo> compiled_info(const io::Checkpoint& checkpoint, const std::string& path = "checkpoint");

}  // namespace qkv::model
