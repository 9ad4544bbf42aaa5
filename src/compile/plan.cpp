// The plan of a compiled program: which S-ops get residual dimensions, which block computes each
// operation (the longest path from the inputs, attention before MLP in every block, as Tracr
// allocates layers), the residual layout, and the sizes every block shares.
#include "plan.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "qkv/rasp/evaluate.hpp"

namespace qkv::compile::detail {

using rasp::Encoding;
using rasp::Node;
using rasp::Op;

namespace {

// What a select's side reads, through every categorical map of a categorical S-op.
Side fold(const rasp::Program& p, std::size_t node) {
  Side s{node, p.nodes[node].values};
  while (true) {
    const Node& n = p.nodes[s.node];
    if (n.op != Op::Map || n.encoding != Encoding::Categorical) return s;
    const Node& in = p.nodes[n.inputs[0]];
    if (in.encoding != Encoding::Categorical) return s;
    std::vector<rasp::Value> seen;
    for (const rasp::Value& out : n.table) seen.push_back(s.seen[p.value_index(s.node, out)]);
    s = Side{n.inputs[0], std::move(seen)};
  }
}

// The MLP units an operation needs.
std::size_t units(const rasp::Program& p, std::size_t k) {
  const Node& n = p.nodes[k];
  if (n.op == Op::SelectorWidth) return 1 + 2 * p.max_len;  // a step at every width
  if (n.op == Op::SequenceMap) return p.nodes[n.inputs[0]].values.size() * p.nodes[n.inputs[1]].values.size();
  const Node& in = p.nodes[n.inputs[0]];
  if (in.encoding == Encoding::Categorical) return in.values.size();  // one unit per input value
  std::size_t changes = 0;
  for (std::size_t i = 1; i < n.table.size(); ++i) changes += n.table[i] != n.table[i - 1];
  return 1 + 2 * changes;
}

std::size_t even_at_or_after(std::size_t r) { return r % 2 ? r + 1 : r; }
std::size_t odd_at_or_after(std::size_t r) { return r % 2 ? r : r + 1; }

}  // namespace

std::string value_label(const Node& node, const rasp::Value& value) {
  return node.encoding == Encoding::Numerical ? node.name : node.name + ":" + value.label();
}

Discretised discretise(const std::vector<double>& xs, const std::vector<bool>& changes, const std::string& who) {
  Discretised d;
  double worst = 0;
  for (std::size_t k = 1; k < xs.size(); ++k) {
    if (!changes[k]) continue;
    const double gap = xs[k] - xs[k - 1];
    // The pair's ramp is 1/L wide, centred on the threshold: L = 4 / gap keeps it an eighth of the
    // gap away from either value, so inputs a little off (a softmax's leak) read the same.
    const double L = 4 / gap;
    if (!(gap > 0) || L > 1e6)
      throw ValueError(who + ": its input takes the values " + std::to_string(xs[k - 1]) + " and " + std::to_string(xs[k]) +
                       ", too close together for a float32 MLP to tell apart (a gap of at least 4e-6 is needed)");
    const double t = (xs[k - 1] + xs[k]) / 2;
    d.steps.push_back(Step{t, L, k - 1, k});
    worst = std::max(worst, L * (1 + std::fabs(t)) + 1);
  }
  d.gate = worst + 2;
  return d;
}

Plan make_plan(const rasp::Program& p) {
  const std::size_t n = p.nodes.size();
  Plan plan;
  plan.materialized.assign(n, false);
  plan.ready.assign(n, 0);
  plan.first.assign(n, 0);
  plan.width_dim.assign(n, 0);
  std::vector<Side> keys(n), queries(n);
  for (std::size_t k = 0; k < n; ++k)
    if (p.nodes[k].op == Op::Select) keys[k] = fold(p, p.nodes[k].inputs[0]), queries[k] = fold(p, p.nodes[k].inputs[1]);

  // The S-ops that need dimensions: the inputs, the output, the kept ones, and what a computed
  // operation reads.
  std::function<void(std::size_t)> need = [&](std::size_t k) {
    if (plan.materialized[k]) return;
    plan.materialized[k] = true;
    const Node& node = p.nodes[k];
    if (node.op == Op::Map || node.op == Op::SequenceMap)
      for (std::size_t i : node.inputs) need(i);
    if (node.op == Op::Aggregate) need(node.inputs[1]);
    if (node.op == Op::Aggregate || node.op == Op::SelectorWidth) {
      need(keys[node.inputs[0]].node);
      need(queries[node.inputs[0]].node);
    }
  };
  for (std::size_t k = 0; k < n; ++k)
    if (p.nodes[k].op == Op::Tokens || p.nodes[k].op == Op::Indices) need(k);
  need(p.output);
  for (std::size_t k : p.kept) need(k);

  // Longest path: an operation goes to the first sublayer of its kind after its inputs are ready.
  std::vector<std::vector<std::size_t>> heads_of, mlps_of;
  auto place = [](std::vector<std::vector<std::size_t>>& of, std::size_t block, std::size_t k) {
    if (of.size() <= block) of.resize(block + 1);
    of[block].push_back(k);
  };
  for (std::size_t k = 0; k < n; ++k) {
    if (!plan.materialized[k]) continue;
    const Node& node = p.nodes[k];
    std::size_t r = 0;
    for (std::size_t i : node.inputs)
      if (p.nodes[i].op != Op::Select) r = std::max(r, plan.ready[i]);
    if (node.op == Op::Aggregate || node.op == Op::SelectorWidth) {
      const std::size_t sel = node.inputs[0];
      r = std::max({r, plan.ready[keys[sel].node], plan.ready[queries[sel].node]});
      const std::size_t s = even_at_or_after(r);
      place(heads_of, s / 2, k);
      if (node.op == Op::SelectorWidth) place(mlps_of, s / 2, k);
      plan.ready[k] = s + (node.op == Op::SelectorWidth ? 2 : 1);
    } else if (node.op == Op::Map || node.op == Op::SequenceMap) {
      const std::size_t s = odd_at_or_after(r);
      place(mlps_of, (s - 1) / 2, k);
      plan.ready[k] = s + 1;
    }
  }
  plan.blocks = std::max<std::size_t>({1, heads_of.size(), mlps_of.size()});

  // The residual stream: one, bos, then every materialised S-op in program order.
  plan.residual = {"one", "bos"};
  for (std::size_t k = 0; k < n; ++k) {
    if (!plan.materialized[k]) continue;
    const Node& node = p.nodes[k];
    if (node.op == Op::SelectorWidth) {
      plan.width_dim[k] = plan.residual.size();
      plan.residual.push_back(node.name + ".bos_weight");
    }
    plan.first[k] = plan.residual.size();
    if (node.encoding == Encoding::Numerical)
      plan.residual.push_back(node.name);
    else
      for (auto& v : node.values) plan.residual.push_back(value_label(node, v));
  }

  for (std::size_t b = 0; b < heads_of.size(); ++b)
    for (std::size_t k : heads_of[b]) {
      const std::size_t sel = p.nodes[k].inputs[0];
      plan.heads.push_back(Head{k, sel, keys[sel], queries[sel], b, 0});
    }
  for (std::size_t b = 0; b < mlps_of.size(); ++b) {
    std::size_t used = 0;
    for (std::size_t k : mlps_of[b]) {
      const std::size_t u = units(p, k);
      plan.mlps.push_back(Mlp{k, b, used, u});
      used += u;
    }
    plan.hidden = std::max(plan.hidden, used);
  }
  // Every block has as many heads as the busiest one; a head's query/key width is its smaller
  // side's values plus one (the BOS term), its value width its values' dimensions.
  std::vector<std::size_t> count(plan.blocks, 0);
  for (Head& h : plan.heads) {
    h.index = count[h.block]++;
    plan.heads_per_block = std::max(plan.heads_per_block, count[h.block]);
    const std::size_t side = std::min(p.nodes[h.keys.node].values.size(), p.nodes[h.queries.node].values.size()) + 1;
    plan.head_dim = std::max(plan.head_dim, side);
    const Node& node = p.nodes[h.node];
    if (node.op == Op::Aggregate && node.encoding == Encoding::Categorical)
      plan.value_dim = std::max(plan.value_dim, p.nodes[node.inputs[1]].values.size());
  }
  plan.attn_only = plan.mlps.empty();
  return plan;
}

}  // namespace qkv::compile::detail
