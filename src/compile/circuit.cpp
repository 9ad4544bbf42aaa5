// The circuit file: the ground truth of a compiled model as JSON (docs/compile.md, "The circuit
// file"), for the instruments to be graded against.
#include <sstream>

#include "plan.hpp"
#include "qkv/compile/compile.hpp"

namespace qkv::compile {

namespace {

// A JSON string: UTF-8 kept; quotes, backslashes and control characters escaped (\" \\ \u00XX).
std::string quoted(const std::string& s) {
  static const char* const hex = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c >= 0x20 && c != '"' && c != '\\') {
      out += char(c);
      continue;
    }
    out += '\\';
    if (c >= 0x20) out += char(c);
    else out += std::string("u00") + hex[c >> 4] + hex[c & 15];
  }
  return out + "\"";
}

std::string strings(const std::vector<std::string>& xs) {
  std::string out = "[";
  for (std::size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + quoted(xs[i]);
  return out + "]";
}

std::string number(double x) {
  std::ostringstream s;
  s.precision(17);
  s << x;
  return s.str();
}

}  // namespace

std::string circuit_json(const rasp::Program& p, const detail::Plan& plan, const config::Config& cfg,
                         const model::CompiledInfo& info) {
  std::ostringstream j;
  const auto& m = cfg.model;
  std::vector<std::string> vocab;
  for (auto& v : p.vocab) vocab.push_back(v.label());
  j << "{\n  \"format\": \"qkv-circuit\",\n  \"format_version\": 1,\n";
  j << "  \"program\": {\"path\": " << quoted(p.path) << ", \"output\": " << quoted(info.output)
    << ", \"causal\": " << (p.causal ? "true" : "false") << ", \"max_len\": " << p.max_len << ", \"vocab\": " << strings(vocab)
    << "},\n";
  j << "  \"model\": {\"arch\": " << quoted(nn::arch_names().name(m.arch)) << ", \"layers\": " << m.layers
    << ", \"heads\": " << m.attn.num_heads << ", \"d_model\": " << m.d_model << ", \"head_dim\": " << m.attn.head_dim
    << ", \"value_dim\": " << m.attn.value_dim << ", \"d_ff\": " << m.ff.hidden << ", \"attn_only\": "
    << (m.attn_only ? "true" : "false") << ", \"scale\": " << number(m.attn.scale.value_or(0)) << "},\n";
  j << "  \"residual\": " << strings(info.residual) << ",\n";
  // The S-ops that have dimensions, and who writes them.
  j << "  \"sops\": [";
  bool first = true;
  for (std::size_t k = 0; k < p.nodes.size(); ++k) {
    if (!plan.materialized[k]) continue;
    const rasp::Node& n = p.nodes[k];
    std::string writer = "embed";
    for (auto& op : info.ops)
      if (op.sop == n.name) writer = op.component;
    const std::size_t count = n.encoding == rasp::Encoding::Numerical ? 1 : n.values.size();
    std::vector<std::string> values;
    for (auto& v : n.values) values.push_back(v.label());
    j << (first ? "\n" : ",\n") << "    {\"name\": " << quoted(n.name) << ", \"op\": " << quoted(rasp::name(n.op))
      << ", \"encoding\": " << quoted(rasp::name(n.encoding)) << ", \"line\": " << n.line << ", \"expr\": " << quoted(n.text)
      << ", \"dims\": [" << plan.first[k] << ", " << count << "], \"values\": " << strings(values)
      << ", \"written_by\": " << quoted(writer) << "}";
    first = false;
  }
  j << "\n  ],\n";
  // Components in model order, each with the operations it computes.
  j << "  \"components\": [";
  first = true;
  for (const std::string& id : info.components()) {
    const bool mlp = id.rfind("mlp", 0) == 0;
    std::size_t layer = 0;
    j << (first ? "\n" : ",\n") << "    {\"id\": " << quoted(id) << ", \"kind\": " << quoted(mlp ? "mlp" : "head");
    std::string ops;
    for (auto& op : info.ops) {
      if (op.component != id) continue;
      layer = op.layer;
      ops += std::string(ops.empty() ? "" : ", ") + "{\"op\": " + quoted(op.op) + ", \"sop\": " + quoted(op.sop) +
             ", \"line\": " + std::to_string(op.line) + ", \"expr\": " + quoted(op.expr);
      if (mlp)
        ops += ", \"hidden\": [" + std::to_string(op.hidden_first) + ", " + std::to_string(op.hidden_count) + "]";
      else
        ops += ", \"qk_dims\": " + strings(op.qk_dims) + ", \"v_dims\": " + strings(op.v_dims);
      ops += "}";
    }
    j << ", \"layer\": " << layer;
    if (!mlp) j << ", \"head\": " << id.substr(id.find('.') + 1);
    j << ", \"ops\": [" << ops << "]}";
    first = false;
  }
  j << "\n  ],\n";
  j << "  \"edges\": [";
  first = true;
  for (auto& e : info.edges) {
    j << (first ? "\n" : ",\n") << "    {\"from\": " << quoted(e.from) << ", \"to\": " << quoted(e.to)
      << ", \"port\": " << quoted(e.port) << ", \"sop\": " << quoted(e.sop) << "}";
    first = false;
  }
  j << "\n  ]\n}\n";
  return j.str();
}

}  // namespace qkv::compile
