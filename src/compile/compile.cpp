// Weights from the plan: the embeddings, one attention head per aggregate and selector_width,
// MLP units per map, and the output layer (docs/compile.md derives each construction).
#include "qkv/compile/compile.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "plan.hpp"
#include "qkv/data/program_task.hpp"
#include "qkv/tensor/options.hpp"

namespace qkv::compile {

using detail::Head;
using detail::Mlp;
using detail::Plan;
using rasp::Encoding;
using rasp::Node;
using rasp::Op;

std::string circuit_json(const rasp::Program& program, const Plan& plan, const config::Config& cfg,
                         const model::CompiledInfo& info);

void CompileOptions::validate() const {
  OptionChecker c("CompileOptions");
  c.require(std::isfinite(attention_scale) && attention_scale > 0, {"attention_scale"},
            "expected a positive number, found " + number_text(attention_scale));
  c.require(std::isfinite(output_gain) && output_gain > 0, {"output_gain"},
            "expected a positive number, found " + number_text(output_gain));
}

std::string circuit_path(const std::string& path) {
  const bool h5 = path.size() > 3 && path.compare(path.size() - 3, 3, ".h5") == 0;
  return (h5 ? path.substr(0, path.size() - 3) : path) + ".circuit.json";
}

namespace {

// The model's parameters by name, all zero until written.
class Weights {
 public:
  explicit Weights(StateDict<float> state) : state_(std::move(state)) {
    for (auto& [name, a] : state_) std::fill(a.begin(), a.end(), 0.0f);
  }
  Array<float>& operator[](const std::string& name) {
    for (auto& [n, a] : state_)
      if (n == name) return a;
    throw Error("compile: the model has no parameter " + name);
  }
  StateDict<float> release() { return std::move(state_); }

 private:
  StateDict<float> state_;
};

std::string block(std::size_t b, const char* rest) { return "blocks." + std::to_string(b) + "." + rest; }

class Builder {
 public:
  Builder(const rasp::Program& p, const Plan& plan, const CompileOptions& o, Weights& w)
      : p_(p), plan_(plan), o_(o), w_(w) {}

  void embeddings(std::size_t input_vocab) {
    Array<float>& e = w_["tok_emb.weight"];  // (V, C)
    const Node& tokens = node_of(Op::Tokens);
    for (std::size_t t = 0; t < input_vocab; ++t) e(t, plan_.one) = 1;
    for (std::size_t t = 0; t < p_.vocab.size(); ++t) e(t, dim(tokens, p_.vocab[t])) = 1;
    e(p_.vocab.size(), plan_.bos) = 1;
    Array<float>& pos = w_["pos.weight"];  // (max_len, C): position 0 is BOS's, 1 + i holds index i
    const Node& indices = node_of(Op::Indices);
    for (std::size_t i = 0; i < p_.max_len; ++i) pos(1 + i, dim(indices, rasp::Value::of_number(double(i)))) = 1;
  }

  void output(std::size_t classes) {
    Array<float>& h = w_["head.weight"];  // (classes, C); a decoder's (input vocabulary, C)
    for (std::size_t c = 0; c < classes; ++c) h(c, plan_.first[p_.output] + c) = float(o_.output_gain);
  }

  // score(q, k) = sum_d q_d k_d = [P(key, query)] + c bos_k, c = 1/2 (aggregate: BOS wins only
  // when nothing is selected) or 1 (selector_width: BOS is always one of the selected).
  model::CompiledOp head(const Head& h) {
    const Node& node = p_.nodes[h.node];
    const Node& sel = p_.nodes[h.select];
    const Node& kn = p_.nodes[h.keys.node];
    const Node& qn = p_.nodes[h.queries.node];
    const std::size_t D = plan_.head_dim, Dv = plan_.value_dim, r0 = h.index * D, v0 = h.index * Dv;
    Array<float>& wq = w_[block(h.block, "attn.w_q.weight")];
    Array<float>& wk = w_[block(h.block, "attn.w_k.weight")];
    Array<float>& wv = w_[block(h.block, "attn.w_v.weight")];
    Array<float>& wo = w_[block(h.block, "attn.w_o.weight")];
    const float c = node.op == Op::SelectorWidth ? 1.0f : 0.5f;
    model::CompiledOp op = record(node, std::to_string(h.block) + "." + std::to_string(h.index), h.block, h.index);
    op.head = h.index;
    // The smaller side is one-hot (k_d = [key = b_d], or q_d = [query = a_d]); the other carries the
    // predicate (q_d = P(b_d, query), or k_d = P(key, a_d)); the last dimension pairs `one` in the
    // query with `bos` in the key, c on one of the two.
    const bool keys_one_hot = kn.values.size() <= qn.values.size();
    const Node& hot = keys_one_hot ? kn : qn;
    const Node& other = keys_one_hot ? qn : kn;
    const std::size_t hot_first = plan_.first[keys_one_hot ? h.keys.node : h.queries.node];
    const std::size_t other_first = plan_.first[keys_one_hot ? h.queries.node : h.keys.node];
    Array<float>& w_hot = keys_one_hot ? wk : wq;
    Array<float>& w_other = keys_one_hot ? wq : wk;
    for (std::size_t d = 0; d < hot.values.size(); ++d) {
      w_hot(r0 + d, hot_first + d) = 1;
      for (std::size_t j = 0; j < other.values.size(); ++j) {
        const rasp::Value& key = keys_one_hot ? h.keys.seen[d] : h.keys.seen[j];
        const rasp::Value& query = keys_one_hot ? h.queries.seen[j] : h.queries.seen[d];
        if (rasp::holds(sel.predicate, key, query)) w_other(r0 + d, other_first + j) = 1;
      }
      op.qk_dims.push_back((keys_one_hot ? "key " : "query ") + detail::value_label(hot, hot.values[d]));
    }
    const std::size_t last = r0 + hot.values.size();
    wq(last, plan_.one) = keys_one_hot ? c : 1.0f;
    wk(last, plan_.bos) = keys_one_hot ? 1.0f : c;
    op.qk_dims.push_back(keys_one_hot ? "bos" : "one");
    if (node.op == Op::SelectorWidth) {
      // The weight on BOS, 1 / (w + 1), into the width dimension: v = bos.
      wv(v0, plan_.bos) = 1;
      wo(plan_.width_dim[h.node], v0) = 1;
      op.v_dims.push_back("bos");
      op.op = "selector_width";
      op.sop = node.name + ".bos_weight";
      return op;
    }
    const Node& values = p_.nodes[node.inputs[1]];
    const std::size_t width = node.encoding == Encoding::Numerical ? 1 : values.values.size();
    for (std::size_t e = 0; e < width; ++e) {  // a copy: the values' dimensions into the result's
      wv(v0 + e, plan_.first[node.inputs[1]] + e) = 1;
      wo(plan_.first[h.node] + e, v0 + e) = 1;
      op.v_dims.push_back(plan_.residual[plan_.first[node.inputs[1]] + e]);
    }
    return op;
  }

  model::CompiledOp mlp(const Mlp& m) {
    const Node& node = p_.nodes[m.node];
    Array<float>& fc1 = w_[block(m.block, "ff.fc1.weight")];  // (F, C)
    Array<float>& fc2 = w_[block(m.block, "ff.fc2.weight")];  // (C, F)
    model::CompiledOp op = record(node, "mlp" + std::to_string(m.block), m.block, 0);
    op.hidden_first = m.first;
    op.hidden_count = m.count;
    if (node.op == Op::SelectorWidth) {
      // Read w back from x = 1 / (w + 1): the values 1/(N+1) < ... < 1/2 < 1 give w = N ... 0.
      std::vector<double> xs;
      std::vector<rasp::Value> ys;
      for (std::size_t w = p_.max_len + 1; w-- > 0;) {
        xs.push_back(1.0 / double(w + 1));
        ys.push_back(rasp::Value::of_number(double(w)));
      }
      discretised(m, node, plan_.width_dim[m.node], xs, ys, fc1, fc2);
      op.op = "selector_width";
      return op;
    }
    if (node.op == Op::SequenceMap) {
      // hidden_ij = ReLU(x_i + y_j - 1): 1 exactly when x is its i-th value and y its j-th.
      const Node& a = p_.nodes[node.inputs[0]];
      const Node& b = p_.nodes[node.inputs[1]];
      for (std::size_t i = 0; i < a.values.size(); ++i)
        for (std::size_t j = 0; j < b.values.size(); ++j) {
          const std::size_t u = m.first + i * b.values.size() + j;
          fc1(u, plan_.first[node.inputs[0]] + i) += 1;
          fc1(u, plan_.first[node.inputs[1]] + j) += 1;
          fc1(u, plan_.one) -= 1;
          write(fc2, node, u, node.table[i * b.values.size() + j], 1);
        }
      return op;
    }
    const Node& in = p_.nodes[node.inputs[0]];
    if (in.encoding == Encoding::Categorical) {
      // hidden_i = ReLU(x_i): the input's one-hot; the output its value's f, a lookup table.
      for (std::size_t i = 0; i < in.values.size(); ++i) {
        fc1(m.first + i, plan_.first[node.inputs[0]] + i) = 1;
        write(fc2, node, m.first + i, node.table[i], 1);
      }
      return op;
    }
    std::vector<double> xs;
    for (auto& v : in.values) xs.push_back(v.number);
    discretised(m, node, plan_.first[node.inputs[0]], xs, node.table, fc1, fc2);
    return op;
  }

 private:
  const Node& node_of(Op op) const {
    for (auto& n : p_.nodes)
      if (n.op == op) return n;
    throw Error("compile: the program has no " + std::string(rasp::name(op)));
  }
  std::size_t index_of(const Node& n) const { return std::size_t(&n - p_.nodes.data()); }
  std::size_t dim(const Node& n, const rasp::Value& v) const { return plan_.first[index_of(n)] + p_.value_index(index_of(n), v); }

  model::CompiledOp record(const Node& node, std::string component, std::size_t layer, std::size_t head) const {
    model::CompiledOp op;
    op.component = std::move(component);
    op.layer = layer;
    op.head = head;
    const bool num = node.encoding == Encoding::Numerical;
    op.op = (num ? "numerical " : "") + std::string(rasp::name(node.op));
    op.sop = node.name;
    op.line = std::size_t(node.line);
    op.expr = node.text;
    return op;
  }

  // fc2's column `unit` adds sign * (the one-hot of y, or the number y) to the node's dimensions.
  void write(Array<float>& fc2, const Node& node, std::size_t unit, const rasp::Value& y, float sign) {
    const std::size_t k = index_of(node);
    if (node.encoding == Encoding::Numerical)
      fc2(plan_.first[k], unit) += sign * float(y.number);
    else
      fc2(plan_.first[k] + p_.value_index(k, y), unit) += sign;
  }

  // f of a numerical input x (dimension `in`) taking the values xs (ascending) to ys: a start unit
  // ReLU(one) giving f(xs[0]), and per threshold t where f changes a pair
  //   ReLU(L (x - t) + 1/2) - ReLU(L (x - t) - 1/2)  (0 below t - 1/(2L), 1 above t + 1/(2L))
  // weighted by f's change there. Every unit loses G at BOS, so that the MLP writes nothing there.
  void discretised(const Mlp& m, const Node& node, std::size_t in, const std::vector<double>& xs,
                   const std::vector<rasp::Value>& ys, Array<float>& fc1, Array<float>& fc2) {
    std::vector<bool> changes(xs.size(), false);
    for (std::size_t k = 1; k < xs.size(); ++k) changes[k] = ys[k] != ys[k - 1];
    const detail::Discretised d = detail::discretise(xs, changes, p_.path + ":" + std::to_string(node.line) + ": " + node.name);
    std::size_t u = m.first;
    fc1(u, plan_.one) = 1;
    fc1(u, plan_.bos) = float(-d.gate);
    write(fc2, node, u++, ys[0], 1);
    for (const detail::Step& s : d.steps) {
      for (int half = 0; half < 2; ++half, ++u) {
        fc1(u, in) = float(s.gain);
        fc1(u, plan_.one) = float(-s.gain * s.threshold + (half == 0 ? 0.5 : -0.5));
        fc1(u, plan_.bos) = float(-d.gate);
        const float sign = half == 0 ? 1.0f : -1.0f;
        write(fc2, node, u, ys[s.above], sign);
        write(fc2, node, u, ys[s.below], -sign);
      }
    }
  }

  const rasp::Program& p_;
  const Plan& plan_;
  const CompileOptions& o_;
  Weights& w_;
};

// Component-level edges: who wrote what each op reads.
model::CompiledInfo describe(const rasp::Program& p, const Plan& plan, std::vector<model::CompiledOp> ops) {
  model::CompiledInfo info;
  info.program = p.source;
  info.output = p.nodes[p.output].name;
  info.residual = plan.residual;
  std::vector<std::string> writer(p.nodes.size(), "embed");
  for (auto& op : ops) {
    if (op.op == "selector_width" && op.component.rfind("mlp", 0) != 0) continue;  // its MLP writes the S-op
    writer[p.find(op.sop)] = op.component;
  }
  auto edge = [&](const std::string& from, const std::string& to, const std::string& port, const std::string& sop) {
    for (auto& e : info.edges)
      if (e.from == from && e.to == to && e.port == port && e.sop == sop) return;
    info.edges.push_back({from, to, port, sop});
  };
  for (const Head& h : plan.heads) {
    const std::string id = std::to_string(h.block) + "." + std::to_string(h.index);
    edge(writer[h.queries.node], id, "q", p.nodes[h.queries.node].name);
    edge(writer[h.keys.node], id, "k", p.nodes[h.keys.node].name);
    const Node& n = p.nodes[h.node];
    if (n.op == Op::Aggregate)
      edge(writer[n.inputs[1]], id, "v", p.nodes[n.inputs[1]].name);
    else
      edge("embed", id, "v", "bos");
  }
  for (const Mlp& m : plan.mlps) {
    const std::string id = "mlp" + std::to_string(m.block);
    const Node& n = p.nodes[m.node];
    if (n.op == Op::SelectorWidth) {
      for (const Head& h : plan.heads)
        if (h.node == m.node) edge(std::to_string(h.block) + "." + std::to_string(h.index), id, "in", n.name + ".bos_weight");
    } else {
      for (std::size_t i : n.inputs) edge(writer[i], id, "in", p.nodes[i].name);
    }
  }
  edge(writer[p.output], "output", "out", p.nodes[p.output].name);
  info.ops = std::move(ops);
  return info;
}

}  // namespace

CompiledModel compile_program(const rasp::Program& program, const CompileOptions& options) {
  options.validate();
  const Plan plan = detail::make_plan(program);
  CompiledModel out;
  config::Config& cfg = out.config;
  nn::TransformerOptions& m = cfg.model;
  m.arch = program.causal ? nn::Arch::Decoder : nn::Arch::Encoder;
  m.d_model = plan.residual.size();
  m.layers = plan.blocks;
  m.attn.num_heads = plan.heads_per_block;
  m.attn.head_dim = plan.head_dim;
  m.attn.value_dim = plan.value_dim;
  m.attn.scale = options.attention_scale;
  m.ff.hidden = plan.hidden;
  m.ff.activation = nn::Activation::Relu;
  m.norm = nn::Norm::None;
  m.positional = nn::Positional::Learned;
  m.attn_only = plan.attn_only;
  m.dropout = 0;
  m.attn.dropout = 0;
  cfg.task.name = "program";
  cfg.task.program = program.source;
  cfg.task.length = program.max_len + 1;
  config::validate(cfg);

  const std::shared_ptr<data::Task> task = data::make_task(cfg.task);
  Generator gen(0);
  const std::unique_ptr<model::TaskModel> model = model::make_model(cfg, *task, gen);
  Weights w(model->module().state_dict());
  Builder b(program, plan, options, w);
  const data::ProgramLayout layout = data::program_layout(program);
  b.embeddings(layout.input_vocab);
  b.output(layout.classes);
  std::vector<model::CompiledOp> ops;
  for (const Head& h : plan.heads) ops.push_back(b.head(h));
  for (const Mlp& mlp : plan.mlps) ops.push_back(b.mlp(mlp));
  // Model order: block by block, its heads, then its MLP.
  std::stable_sort(ops.begin(), ops.end(), [](const model::CompiledOp& a, const model::CompiledOp& b) {
    const bool ma = a.component.rfind("mlp", 0) == 0, mb = b.component.rfind("mlp", 0) == 0;
    return std::make_tuple(a.layer, ma, a.head) < std::make_tuple(b.layer, mb, b.head);
  });
  out.info = describe(program, plan, std::move(ops));
  out.circuit_json = circuit_json(program, plan, cfg, out.info);

  io::Checkpoint& ck = out.checkpoint;
  ck.config_yaml = config::to_yaml(cfg);
  ck.model = w.release();
  ck.compiled = model::compiled_entries(out.info, out.circuit_json);
  return out;
}

}  // namespace qkv::compile
