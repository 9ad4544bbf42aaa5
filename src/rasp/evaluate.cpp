// The reference interpreter: every S-op the output needs, position by position.
#include "qkv/rasp/evaluate.hpp"

#include <algorithm>

namespace qkv::rasp {

namespace {

Cell some(Value v) { return Cell{Cell::State::Some, std::move(v)}; }
Cell none() { return Cell{Cell::State::None, {}}; }
Cell undefined() { return Cell{Cell::State::Undefined, {}}; }

// The index of the value of `c` in `values` (sorted): exact for categorical S-ops; for numerical
// ones the region between the thresholds halfway to the neighbours, as the compiled MLP reads it.
std::size_t lookup(const Node& in, const Value& v) {
  const auto& vs = in.values;
  if (in.encoding == Encoding::Numerical) {
    std::size_t k = 0;
    while (k + 1 < vs.size() && v.number >= (vs[k].number + vs[k + 1].number) / 2) ++k;
    return k;
  }
  const auto it = std::lower_bound(vs.begin(), vs.end(), v);
  return it != vs.end() && *it == v ? std::size_t(it - vs.begin()) : vs.size();
}

}  // namespace

std::vector<bool> needed_nodes(const Program& p) {
  std::vector<bool> need(p.nodes.size(), false);
  need[p.output] = true;
  for (std::size_t k = p.nodes.size(); k-- > 0;)
    if (need[k])
      for (std::size_t j : p.nodes[k].inputs) need[j] = true;
  return need;
}

Evaluation evaluate(const Program& p, const std::vector<std::size_t>& tokens) {
  const std::size_t n = tokens.size();
  if (n == 0 || n > p.max_len)
    throw ValueError(p.path + ": an input of " + std::to_string(n) + " tokens; the program reads 1 to " +
                     std::to_string(p.max_len));
  for (std::size_t t : tokens)
    if (t >= p.vocab.size())
      throw ValueError(p.path + ": token id " + std::to_string(t) + " is outside the vocabulary of " +
                       std::to_string(p.vocab.size()) + " tokens");
  const std::vector<bool> need = needed_nodes(p);
  Evaluation e;
  e.cells.resize(p.nodes.size());
  // selected[s][q][k]: selector s selects key k for query q.
  std::vector<std::vector<std::vector<bool>>> selected(p.nodes.size());
  for (std::size_t k = 0; k < p.nodes.size(); ++k) {
    if (!need[k]) continue;
    const Node& node = p.nodes[k];
    auto& out = e.cells[k];
    auto in = [&](std::size_t i) -> const std::vector<Cell>& { return e.cells[node.inputs[i]]; };
    const bool numerical = node.encoding == Encoding::Numerical;
    switch (node.op) {
      case Op::Tokens:
        for (std::size_t t : tokens) out.push_back(some(p.vocab[t]));
        break;
      case Op::Indices:
        for (std::size_t i = 0; i < n; ++i) out.push_back(some(Value::of_number(double(i))));
        break;
      case Op::Map: {
        const Node& src = p.nodes[node.inputs[0]];
        for (const Cell& c : in(0)) {
          if (c.state == Cell::State::Undefined) out.push_back(undefined());
          else if (c.state == Cell::State::None) out.push_back(numerical ? some(Value::of_number(0)) : none());
          else {
            const std::size_t i = lookup(src, c.value);
            out.push_back(i < node.table.size() ? some(node.table[i]) : undefined());
          }
        }
        break;
      }
      case Op::SequenceMap: {
        const Node& a = p.nodes[node.inputs[0]];
        const Node& b = p.nodes[node.inputs[1]];
        for (std::size_t i = 0; i < n; ++i) {
          const Cell &x = in(0)[i], &y = in(1)[i];
          if (x.state == Cell::State::Undefined || y.state == Cell::State::Undefined) out.push_back(undefined());
          else if (!x.some() || !y.some()) out.push_back(numerical ? some(Value::of_number(0)) : none());
          else {
            const std::size_t ix = lookup(a, x.value), iy = lookup(b, y.value);
            out.push_back(ix < a.values.size() && iy < b.values.size() ? some(node.table[ix * b.values.size() + iy])
                                                                       : undefined());
          }
        }
        break;
      }
      case Op::Select: {
        auto& s = selected[k];
        s.assign(n, std::vector<bool>(n, false));
        const auto &keys = in(0), &queries = in(1);
        for (std::size_t q = 0; q < n; ++q)
          for (std::size_t j = 0; j < n && (!p.causal || j <= q); ++j)
            s[q][j] = keys[j].some() && queries[q].some() && holds(node.predicate, keys[j].value, queries[q].value);
        break;
      }
      case Op::Aggregate:
      case Op::SelectorWidth: {
        const auto& s = selected[node.inputs[0]];
        // An Undefined key or query may or may not select: whatever reads it is Undefined.
        const Node& sel = p.nodes[node.inputs[0]];
        const auto &keys = e.cells[sel.inputs[0]], &queries = e.cells[sel.inputs[1]];
        auto unknown = [&](std::size_t q) {
          if (queries[q].state == Cell::State::Undefined) return true;
          for (std::size_t j = 0; j < n && (!p.causal || j <= q); ++j)
            if (keys[j].state == Cell::State::Undefined) return true;
          return false;
        };
        for (std::size_t q = 0; q < n; ++q) {
          if (unknown(q)) {
            out.push_back(undefined());
            continue;
          }
          std::size_t width = 0;
          for (std::size_t j = 0; j < n; ++j) width += s[q][j];
          if (node.op == Op::SelectorWidth) {
            out.push_back(some(Value::of_number(double(width))));
            continue;
          }
          const auto& values = in(1);
          // Categorical: the one value of the selected keys; all None is None (a zero one-hot),
          // a None beside a value or two values are a mixture.
          Cell c = numerical ? some(Value::of_number(0)) : none();
          double sum = 0;
          std::size_t nones = 0, somes = 0;
          for (std::size_t j = 0; j < n && c.state != Cell::State::Undefined; ++j) {
            if (!s[q][j]) continue;
            const Cell& v = values[j];
            if (v.state == Cell::State::Undefined) c = undefined();
            else if (numerical) sum += v.value.number;
            else if (v.state == Cell::State::None) ++nones;
            else if (somes++ == 0) c = v;
            else if (c.value != v.value) c = undefined();
          }
          if (!numerical && c.some() && nones > 0) c = undefined();
          if (numerical && c.some() && width > 0) c = some(Value::of_number(sum / double(width)));
          out.push_back(c);
        }
        break;
      }
    }
  }
  return e;
}

std::vector<Cell> run(const Program& p, const std::vector<std::size_t>& tokens) {
  return std::move(evaluate(p, tokens).cells[p.output]);
}

}  // namespace qkv::rasp
