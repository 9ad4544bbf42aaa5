// The shelf of known circuits: compiled programs widened with distractor heads whose output
// nothing reads (docs/grade.md).
#include "qkv/compile/shelf.hpp"

#include <algorithm>

#include "qkv/data/program_task.hpp"
#include "qkv/io/json.hpp"

namespace qkv::compile {

const char* name(DistractorPattern p) {
  switch (p) {
    case DistractorPattern::Mimic: return "mimic";
    case DistractorPattern::PreviousToken: return "previous-token";
    case DistractorPattern::SameToken: return "same-token";
    case DistractorPattern::FirstToken: return "first-token";
  }
  return "?";
}

namespace {

std::string ends(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0 ? tail : "";
}

// The first circuit head of layer l (its index) in a circuit file's components, or -1.
long circuit_head(const json::Value& circuit, std::size_t l) {
  const json::Value* components = circuit.find("components");
  if (!components) return -1;
  for (auto& c : components->items) {
    const json::Value* kind = c.find("kind");
    const json::Value* id = c.find("id");
    if (!kind || !id || kind->text != "head") continue;
    const std::size_t dot = id->text.find('.');
    if (dot != std::string::npos && id->text.substr(0, dot) == std::to_string(l)) return std::stol(id->text.substr(dot + 1));
  }
  return -1;
}

// One JSON value as text: the circuit file's layout (a member per line at the top, an item per
// line in arrays of objects).
void write_value(const json::Value& v, std::string& out, int depth) {
  switch (v.kind) {
    case json::Value::Kind::Null: out += "null"; return;
    case json::Value::Kind::Bool: out += v.boolean ? "true" : "false"; return;
    case json::Value::Kind::Number: out += v.text; return;
    case json::Value::Kind::String: out += json::quote(v.text); return;
    case json::Value::Kind::Array: {
      const bool lines = !v.items.empty() && v.items[0].kind == json::Value::Kind::Object && depth <= 1;
      out += "[";
      for (std::size_t i = 0; i < v.items.size(); ++i) {
        out += i ? (lines ? ",\n    " : ", ") : (lines ? "\n    " : "");
        write_value(v.items[i], out, depth + 1);
      }
      out += lines ? "\n  ]" : "]";
      return;
    }
    case json::Value::Kind::Object: {
      out += depth == 0 ? "{\n  " : "{";
      for (std::size_t i = 0; i < v.members.size(); ++i) {
        if (i) out += depth == 0 ? ",\n  " : ", ";
        out += json::quote(v.members[i].first) + ": ";
        write_value(v.members[i].second, out, depth + 1);
      }
      out += depth == 0 ? "\n}\n" : "}";
      return;
    }
  }
}

json::Value number_value(std::size_t n) {
  json::Value v;
  v.kind = json::Value::Kind::Number;
  v.number = double(n);
  v.text = std::to_string(n);
  return v;
}
json::Value string_value(const std::string& s) {
  json::Value v;
  v.kind = json::Value::Kind::String;
  v.text = s;
  return v;
}
json::Value& member(json::Value& object, const std::string& key) {
  if (object.kind == json::Value::Kind::Null) object.kind = json::Value::Kind::Object;
  for (auto& [k, v] : object.members)
    if (k == key) return v;
  object.members.push_back({key, json::Value{}});
  return object.members.back().second;
}

}  // namespace

CompiledModel add_distractors(const CompiledModel& c, const rasp::Program& program,
                              const std::vector<Distractor>& distractors) {
  const auto& m0 = c.config.model;
  // head_dim 0 means C / H, value_dim 0 means head_dim (nn::MultiHeadAttentionOptions).
  const std::size_t C = m0.d_model, H = m0.attn.num_heads, D = m0.attn.head_dim ? m0.attn.head_dim : C / H,
                    Dv = m0.attn.value_dim ? m0.attn.value_dim : D;
  json::Value circuit = json::parse(c.circuit_json, "the circuit file");
  const std::vector<std::string>& labels = c.info.residual;
  auto find_label = [&](const std::string& label) -> long {
    auto it = std::find(labels.begin(), labels.end(), label);
    return it == labels.end() ? -1 : long(it - labels.begin());
  };
  std::vector<long> token_dims, index_dims;
  for (auto& v : program.vocab) token_dims.push_back(find_label("tokens:" + v.label()));
  for (std::size_t i = 0; i < program.max_len; ++i) index_dims.push_back(find_label("indices:" + std::to_string(i)));
  const long one = find_label("one"), bos = find_label("bos");

  // New heads per layer, and the widths the patterns need.
  std::vector<std::size_t> extra(m0.layers, 0);
  std::size_t need_d = D, need_dv = std::max(Dv, program.vocab.size());
  for (std::size_t i = 0; i < distractors.size(); ++i) {
    const Distractor& d = distractors[i];
    const std::string where = "distractors[" + std::to_string(i) + "]";
    if (d.layer >= m0.layers)
      throw ValueError(where + ": layer " + std::to_string(d.layer) + " out of range (the model has " +
                       std::to_string(m0.layers) + ")");
    ++extra[d.layer];
    if (d.pattern == DistractorPattern::Mimic && circuit_head(circuit, d.layer) < 0)
      throw ValueError(where + ": a mimic needs a circuit head in layer " + std::to_string(d.layer) + ", which has none");
    // The other patterns read the residual's labelled dimensions: a compiled model's.
    const bool lacks = std::count(token_dims.begin(), token_dims.end(), -1L) > 0 || one < 0 || bos < 0 ||
                       (d.pattern == DistractorPattern::PreviousToken && std::count(index_dims.begin(), index_dims.end(), -1L) > 0);
    if (d.pattern != DistractorPattern::Mimic && lacks)
      throw ValueError(where + ": a " + std::string(name(d.pattern)) + " distractor reads the residual's one, bos, tokens" +
                       (d.pattern == DistractorPattern::PreviousToken ? " and indices" : "") +
                       " dimensions, which this model of " + program.path + " does not label (a compiled model does)");
    if (d.pattern == DistractorPattern::PreviousToken) need_d = std::max(need_d, program.max_len);
    if (d.pattern == DistractorPattern::SameToken) need_d = std::max(need_d, program.vocab.size());
  }
  const std::size_t H2 = H + *std::max_element(extra.begin(), extra.end());

  CompiledModel out;
  out.config = c.config;
  auto& m = out.config.model;
  m.d_model = C + distractors.size();
  m.attn.num_heads = H2;
  m.attn.head_dim = need_d;
  m.attn.value_dim = need_dv;
  config::validate(out.config);
  const std::shared_ptr<data::Task> task = data::make_task(out.config.task);
  Generator gen(0);
  StateDict<float> state = model::make_model(out.config, *task, gen)->module().state_dict();

  // Every compiled weight into its place: head h's rows (q, k, v) and columns (o) at h * D', the
  // residual's dimensions first, the rest zero.
  for (auto& [pname, w] : state) {
    std::fill(w.begin(), w.end(), 0.0f);
    const Array<float>* old = nullptr;
    for (auto& [n, a] : c.checkpoint.model)
      if (n == pname) old = &a;
    if (!old) throw Error("add_distractors: the compiled model has no parameter " + pname);
    const bool qk = !ends(pname, "attn.w_q.weight").empty() || !ends(pname, "attn.w_k.weight").empty() ||
                    !ends(pname, "attn.w_q.bias").empty() || !ends(pname, "attn.w_k.bias").empty();
    const bool v = !ends(pname, "attn.w_v.weight").empty() || !ends(pname, "attn.w_v.bias").empty();
    const bool o = !ends(pname, "attn.w_o.weight").empty();
    auto row = [&](std::size_t r) {  // an old row of q, k or v -> its new row
      if (!qk && !v) return r;
      const std::size_t w0 = qk ? D : Dv, w1 = qk ? need_d : need_dv;
      return r / w0 * w1 + r % w0;
    };
    if (old->dimension() == 1) {
      for (std::size_t r = 0; r < old->shape()[0]; ++r) w(row(r)) = (*old)(r);
    } else {
      for (std::size_t r = 0; r < old->shape()[0]; ++r)
        for (std::size_t k = 0; k < old->shape()[1]; ++k) {
          const std::size_t col = o ? k / Dv * need_dv + k % Dv : k;
          w(row(r), col) = (*old)(r, k);
        }
    }
  }
  auto has = [&](const std::string& pname) {
    for (auto& [n, a] : state)
      if (n == pname) return true;
    return false;
  };
  auto weight = [&](const std::string& pname) -> Array<float>& {
    for (auto& [n, a] : state)
      if (n == pname) return a;
    throw Error("add_distractors: the model has no parameter " + pname);
  };

  json::Value list;
  list.kind = json::Value::Kind::Array;
  out.info = c.info;
  std::vector<std::size_t> next(m0.layers, H);
  for (std::size_t i = 0; i < distractors.size(); ++i) {
    const Distractor& d = distractors[i];
    const std::size_t h = next[d.layer]++, dead = C + i;
    const std::string id = std::to_string(d.layer) + "." + std::to_string(h);
    const std::string b = "blocks." + std::to_string(d.layer) + ".attn.";
    Array<float>& wq = weight(b + "w_q.weight");
    Array<float>& wk = weight(b + "w_k.weight");
    Array<float>& wv = weight(b + "w_v.weight");
    Array<float>& wo = weight(b + "w_o.weight");
    const std::size_t r0 = h * need_d, v0 = h * need_dv;
    json::Value entry;
    entry.kind = json::Value::Kind::Object;
    member(entry, "id") = string_value(id);
    member(entry, "pattern") = string_value(name(d.pattern));
    switch (d.pattern) {
      case DistractorPattern::Mimic: {  // the head's q, k and v, weights and biases; w_o to the dead dimension
        const std::size_t src = std::size_t(circuit_head(circuit, d.layer));
        for (const char* part : {"w_q.", "w_k.", "w_v."}) {
          const std::size_t width = part[2] == 'v' ? need_dv : need_d;
          Array<float>& pw = weight(b + part + "weight");
          for (std::size_t r = 0; r < width; ++r)
            for (std::size_t k = 0; k < C; ++k) pw(h * width + r, k) = pw(src * width + r, k);
          if (has(b + part + "bias")) {
            Array<float>& pb = weight(b + part + "bias");
            for (std::size_t r = 0; r < width; ++r) pb(h * width + r) = pb(src * width + r);
          }
        }
        for (std::size_t e = 0; e < need_dv; ++e) wo(dead, v0 + e) = float(e + 1);
        member(entry, "mimics") = string_value(std::to_string(d.layer) + "." + std::to_string(src));
        break;
      }
      case DistractorPattern::PreviousToken:
        for (std::size_t j = 0; j + 1 < program.max_len; ++j) {
          wq(r0 + j, std::size_t(index_dims[j + 1])) = 1;
          wk(r0 + j, std::size_t(index_dims[j])) = 1;
        }
        break;
      case DistractorPattern::SameToken:
        for (std::size_t t = 0; t < token_dims.size(); ++t) {
          wq(r0 + t, std::size_t(token_dims[t])) = 1;
          wk(r0 + t, std::size_t(token_dims[t])) = 1;
        }
        break;
      case DistractorPattern::FirstToken:
        wq(r0, std::size_t(one)) = 1;
        wk(r0, std::size_t(bos)) = 1;
        break;
    }
    if (d.pattern != DistractorPattern::Mimic)
      for (std::size_t t = 0; t < token_dims.size(); ++t) {
        wv(v0 + t, std::size_t(token_dims[t])) = 1;
        wo(dead, v0 + t) = float(t + 1);
      }
    const std::string label = "dead:" + id;
    out.info.residual.push_back(label);
    member(entry, "writes") = string_value(label);
    list.items.push_back(std::move(entry));
  }

  json::Value& model = member(circuit, "model");
  member(model, "heads") = number_value(H2);
  member(model, "d_model") = number_value(m.d_model);
  member(model, "head_dim") = number_value(need_d);
  member(model, "value_dim") = number_value(need_dv);
  if (circuit.find("residual"))
    for (std::size_t i = C; i < out.info.residual.size(); ++i)
      member(circuit, "residual").items.push_back(string_value(out.info.residual[i]));
  member(circuit, "distractors") = std::move(list);
  out.circuit_json.clear();
  write_value(circuit, out.circuit_json, 0);

  out.checkpoint = c.checkpoint;
  out.checkpoint.config_yaml = config::to_yaml(out.config);
  out.checkpoint.model = std::move(state);
  if (!c.checkpoint.compiled.empty()) out.checkpoint.compiled = model::compiled_entries(out.info, out.circuit_json);
  return out;
}

std::vector<Distractor> shelf_distractors(const CompiledModel& c, bool mimics_only) {
  static const DistractorPattern others[] = {DistractorPattern::PreviousToken, DistractorPattern::SameToken,
                                             DistractorPattern::FirstToken};
  std::vector<Distractor> out;
  for (std::size_t l = 0; l < c.config.model.layers; ++l) {
    if (circuit_head(json::parse(c.circuit_json, "the circuit file"), l) >= 0) out.push_back({l, DistractorPattern::Mimic});
    if (!mimics_only) out.push_back({l, others[l % 3]});
  }
  return out;
}

const std::vector<ShelfEntry>& shelf() {
  static const std::vector<ShelfEntry> entries = {
      {"induction", "a previous-token head (0.0), then an induction head (1.0) whose key reads it"},
      {"who_what", "at each verb, a 'who' head and a 'what' head reading the nouns' ranks and whether 被 occurs"},
      {"reverse", "a length head and its MLP, the mirror position's MLP, a head copying the mirrored token"},
      {"sort", "a width head counting the smaller keys, then a head fetching the token that goes to each place"},
      {"histogram", "one selector-width head over same-token keys and the MLP that reads its width"},
  };
  return entries;
}

const ShelfEntry& shelf_entry(const std::string& name) {
  std::string names;
  for (auto& e : shelf()) {
    if (e.name == name) return e;
    names += (names.empty() ? "" : ", ") + e.name;
  }
  throw ValueError("shelf: no model named '" + name + "' (the shelf holds " + names + ")");
}

ShelfModel build_shelf_model(const ShelfEntry& entry, const std::string& programs_dir, const CompileOptions& options) {
  ShelfModel s{entry, rasp::load_program(programs_dir + "/" + entry.name + ".rasp"), {}};
  const CompiledModel c = compile_program(s.program, options);
  s.compiled = add_distractors(c, s.program, shelf_distractors(c));
  return s;
}

}  // namespace qkv::compile
