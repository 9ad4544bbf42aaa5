// A compiled program's labels in a checkpoint: line-based text, one record per line, fields
// separated by tabs (backslash, tab and newline escaped), so that h5py users can read them too.
#include "qkv/model/compiled.hpp"

#include <algorithm>
#include <cstdio>

namespace qkv::model {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 't' ? '\t' : c == 'n' ? '\n' : c;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

std::string record(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "\t" : "") + escape(fields[i]);
  return out + "\n";
}

// The records of an entry: its non-empty lines, each split into unescaped fields.
std::vector<std::vector<std::string>> records(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  for (const std::string& line : split(text, '\n')) {
    if (line.empty()) continue;
    std::vector<std::string> fields;
    for (const std::string& f : split(line, '\t')) fields.push_back(unescape(f));
    out.push_back(std::move(fields));
  }
  return out;
}

std::size_t number(const std::string& s, const std::string& what) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    throw io::IoError(what + ": expected a whole number, found '" + s + "'");
  return std::size_t(std::stoul(s));
}

}  // namespace

std::vector<std::string> CompiledInfo::components() const {
  std::vector<std::string> out;
  for (auto& op : ops)
    if (std::find(out.begin(), out.end(), op.component) == out.end()) out.push_back(op.component);
  return out;
}

std::vector<std::pair<std::string, std::string>> compiled_entries(const CompiledInfo& info, const std::string& circuit_json) {
  std::string residual, ops, edges;
  for (auto& label : info.residual) residual += escape(label) + "\n";
  for (auto& o : info.ops) {
    std::vector<std::string> f = {o.component, std::to_string(o.layer), std::to_string(o.head), o.op, o.sop,
                                  std::to_string(o.line), o.expr, std::to_string(o.hidden_first),
                                  std::to_string(o.hidden_count), std::to_string(o.qk_dims.size())};
    f.insert(f.end(), o.qk_dims.begin(), o.qk_dims.end());
    f.insert(f.end(), o.v_dims.begin(), o.v_dims.end());
    ops += record(f);
  }
  for (auto& e : info.edges) edges += record({e.from, e.to, e.port, e.sop});
  std::vector<std::pair<std::string, std::string>> out = {
      {"program", info.program}, {"output", info.output}, {"residual", residual}, {"ops", ops}, {"edges", edges}};
  if (!circuit_json.empty()) out.emplace_back("circuit", circuit_json);
  return out;
}

std::optional<CompiledInfo> compiled_info(const io::Checkpoint& c, const std::string& path) {
  if (c.compiled.empty()) return std::nullopt;
  auto entry = [&](const char* name) -> const std::string& {
    for (auto& [n, text] : c.compiled)
      if (n == name) return text;
    throw io::IoError(path + ": /compiled/" + name + " is missing");
  };
  CompiledInfo info;
  info.program = entry("program");
  info.output = entry("output");
  for (auto& r : records(entry("residual"))) info.residual.push_back(r.at(0));
  for (auto& r : records(entry("ops"))) {
    const std::string what = path + ": /compiled/ops";
    if (r.size() < 10) throw io::IoError(what + ": a record of " + std::to_string(r.size()) + " fields, expected at least 10");
    CompiledOp o;
    o.component = r[0];
    o.layer = number(r[1], what);
    o.head = number(r[2], what);
    o.op = r[3];
    o.sop = r[4];
    o.line = number(r[5], what);
    o.expr = r[6];
    o.hidden_first = number(r[7], what);
    o.hidden_count = number(r[8], what);
    const std::size_t nq = number(r[9], what);
    if (10 + nq > r.size()) throw io::IoError(what + ": " + std::to_string(nq) + " query/key labels announced, fewer given");
    o.qk_dims.assign(r.begin() + 10, r.begin() + long(10 + nq));
    o.v_dims.assign(r.begin() + long(10 + nq), r.end());
    info.ops.push_back(std::move(o));
  }
  for (auto& r : records(entry("edges"))) {
    if (r.size() != 4)
      throw io::IoError(path + ": /compiled/edges: a record of " + std::to_string(r.size()) + " fields, expected 4");
    info.edges.push_back({r[0], r[1], r[2], r[3]});
  }
  return info;
}

std::string sop_value(const float* x, const std::vector<std::string>& residual, const std::string& sop) {
  std::string value;
  float top = 0.5f;
  for (std::size_t c = 0; c < residual.size(); ++c) {
    if (residual[c] == sop) {
      char b[32];
      std::snprintf(b, sizeof b, "%.6g", double(x[c]));
      return b;
    }
    if (residual[c].rfind(sop + ":", 0) == 0 && x[c] > top) top = x[c], value = residual[c].substr(sop.size() + 1);
  }
  return value;
}

}  // namespace qkv::model
