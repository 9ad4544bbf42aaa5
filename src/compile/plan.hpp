#pragma once
// Internal to src/compile: where every operation of a program goes in the model (the plan), before
// any weight is written.

#include <string>
#include <vector>

#include "qkv/rasp/program.hpp"

namespace qkv::compile::detail {

// One side (keys or queries) of a select as a head reads it: the S-op `node`, whose i-th value
// the predicate sees as seen[i]. Categorical maps of a side are folded into W_Q or W_K: a head
// reading map(s, f) reads s and compares f of its values.
struct Side {
  std::size_t node = 0;
  std::vector<rasp::Value> seen;
};

// An attention head: an aggregate, or the attention half of a selector_width.
struct Head {
  std::size_t node = 0;    // the aggregate or selector_width
  std::size_t select = 0;  // its selector
  Side keys, queries;
  std::size_t block = 0, index = 0;
};

// An MLP's share of a block's hidden units: a map, sequence_map, or a selector_width's MLP half.
struct Mlp {
  std::size_t node = 0;
  std::size_t block = 0, first = 0, count = 0;
};

struct Plan {
  std::vector<bool> materialized;    // the S-op has its own residual dimensions
  std::vector<std::size_t> ready;    // the first sublayer (attention 2L, MLP 2L + 1) that can read it
  std::vector<std::size_t> first;    // its first residual dimension
  std::vector<std::size_t> width_dim;  // selector_width: the dimension its head writes 1 / (w + 1) to
  std::vector<std::string> residual;   // every dimension's label
  std::size_t one = 0, bos = 1;
  std::vector<Head> heads;
  std::vector<Mlp> mlps;
  std::size_t blocks = 1, heads_per_block = 1, head_dim = 1, value_dim = 1, hidden = 1;
  bool attn_only = true;  // no MLP at all
};

// The hidden units of one MLP for a numerical input: a start unit (the output at the smallest
// value) and a pair per threshold where the output changes.
struct Step {
  double threshold = 0, gain = 0;  // t, and L: the pair switches within t +- 0.5 / L
  std::size_t below = 0, above = 0;  // the outputs (indices into the inputs) either side
};
struct Discretised {
  std::vector<Step> steps;
  double gate = 2;  // G: what a unit's pre-activation loses at BOS (bos = 1), more than it can gain
};
// xs sorted ascending; same(i, j): the outputs at xs[i] and xs[j] are equal. ValueError naming
// `who` when two neighbouring values whose outputs differ are too close for float32.
Discretised discretise(const std::vector<double>& xs, const std::vector<bool>& changes, const std::string& who);

Plan make_plan(const rasp::Program& program);

// "tokens:a", "length": the label of an S-op's value dimension (numerical: its name).
std::string value_label(const rasp::Node& node, const rasp::Value& value);

}  // namespace qkv::compile::detail
