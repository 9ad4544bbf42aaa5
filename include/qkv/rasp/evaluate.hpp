#pragma once
/// @file
/// The reference interpreter of rasp programs: what a compiled model is checked against.
///
/// Semantics (docs/compile.md, "What a program means"), position by position, n = input length:
///   tokens[i] = the i-th token, indices[i] = i
///   map(s, f)[i] = f(s[i]); sequence_map(a, b, f)[i] = f(a[i], b[i])
///   select(keys, queries, P)[k, q] = P(keys[k], queries[q]) (and k <= q in a causal program)
///   aggregate(S, s)[q]: categorical: the value of the selected keys when they all hold the same
///       value; numerical: their mean
///   selector_width(S)[q] = the number of keys selected for q
/// Values that are not there: a categorical aggregate that selects nothing gives None (the
/// compiled model's one-hot is all zeros); a categorical aggregate of keys holding different
/// values, or of a None and a value, is Undefined (the compiled model holds a mixture there).
/// None and Undefined propagate through categorical maps; a numerical map of None is 0 (every
/// hidden unit of its MLP is off); a None never selects nor is selected; an Undefined input
/// makes everything computed from it Undefined. A numerical aggregate of nothing is 0. A map of
/// a numerical S-op reads its input as the nearest value of its value set (the MLP's
/// thresholds halfway between neighbouring values).

#include <cstddef>
#include <vector>

#include "qkv/rasp/program.hpp"

namespace qkv::rasp {

/// One position of one S-op.
struct Cell {
  enum class State { Some, None, Undefined };
  State state = State::Some;
  Value value;  ///< when Some
  bool some() const { return state == State::Some; }
};

/// Every S-op of a program on one input: cells[node][position] (empty for selectors).
struct Evaluation {
  std::vector<std::vector<Cell>> cells;
  const std::vector<Cell>& operator[](std::size_t node) const { return cells[node]; }
};

/// Runs `program` on token ids `tokens` (each < vocab size, 1 <= length <= max_len; ValueError
/// otherwise). Only the nodes the output depends on are evaluated (the others are empty).
Evaluation evaluate(const Program& program, const std::vector<std::size_t>& tokens);
/// The program's output on `tokens`: evaluate(program, tokens)[program.output].
std::vector<Cell> run(const Program& program, const std::vector<std::size_t>& tokens);

/// nodes[i] is needed to compute the output (i itself included).
std::vector<bool> needed_nodes(const Program& program);

}  // namespace qkv::rasp
