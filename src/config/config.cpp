#include "qkv/config/config.hpp"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "qkv/io/files.hpp"
#include "qkv/tensor/names.hpp"

namespace qkv::config {

namespace {

// ---- the field table ----
//
// One table describes every key: which section and key it is, which field of the section's
// options struct it sets (its path there, e.g. "attn.num_heads" for model.heads, so that an
// OptionError from that struct's validate() is reported at this key), how to parse it, how to
// print it, and its choices. Parsing, locations, to_yaml, equality, resume differences and the
// reference all walk it, so a new key is added here and nowhere else.

struct Where;
enum class Kind { Unsigned, Int, Double, Bool, String, Choice };

struct Field {
  std::string section, key, member;
  Kind kind;
  std::function<void(const YAML::Node&, const Where&)> assign;
  std::function<std::string()> print;
  std::vector<std::string> choices;      // Choice fields
  const std::size_t* size = nullptr;     // Unsigned fields that size a run (for the memory message)
  std::string path() const { return section.empty() ? key : section + "." + key; }
};

const std::vector<std::string> kSections = {"model", "task", "optimizer", "schedule", "train", "run"};

std::vector<Field> fields(Config& c);

// ---- locations ----

struct Where {
  Where() = default;
  Where(std::string f, int l, std::string o = "") : file(std::move(f)), line(l), override_text(std::move(o)) {}
  std::string file;
  int line = 0;
  std::string override_text;  // non-empty for --set
};
using Origins = std::map<std::string, Where>;  // "section.key" -> where it was last set

[[noreturn]] void fail(const Where& at, const std::string& key, const std::string& message) {
  throw ConfigError(at.file, at.line, key, message, at.override_text);
}

int line_of(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

// ---- suggestions ----

std::string join(const std::vector<std::string>& v) { return join_names(v); }
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  return did_you_mean(word, candidates);
}

std::vector<std::string> keys_of(Config& c, const std::string& section) {
  std::vector<std::string> out;
  for (auto& f : fields(c))
    if (f.section == section) out.push_back(f.key);
  return out;
}

// Where `key` lives when it was put in the wrong section ("; 'lr' is a key of section 'optimizer'").
std::string other_section_hint(Config& c, const std::string& key, const std::string& section) {
  std::vector<std::string> others;
  for (auto& f : fields(c)) {
    if (f.section == section || f.section.empty()) continue;
    if (f.key == key) return "; '" + key + "' is a key of section '" + f.section + "'";
    others.push_back(f.key);
  }
  std::string hint = suggestion(key, others);
  if (hint.empty()) return "";
  std::string close = hint.substr(hint.find('\'') + 1);
  close.erase(close.find('\''));
  for (auto& f : fields(c))
    if (f.key == close && f.section != section && !f.section.empty())
      return "; did you mean '" + f.path() + "'?";
  return "";
}

// ---- scalars ----

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar:
      if (n.Tag() == "!") return "the string \"" + n.Scalar() + "\"";
      return "'" + n.Scalar() + "'";
    default: return "an undefined value";
  }
}

bool all_digits(const std::string& s, std::size_t from = 0) {
  if (s.size() <= from) return false;
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  // strtod also takes hex, "inf" and "nan": allow only decimal notation.
  for (char ch : s)
    if (!(std::isdigit(static_cast<unsigned char>(ch)) || ch == '.' || ch == 'e' || ch == 'E' || ch == '+' || ch == '-'))
      return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno == 0 && std::isfinite(out);
}

[[noreturn]] void fail(const Where& at, const std::string& key, const std::string& message);
std::string exact(double x);
std::string yaml_quoted(const std::string& s);

bool plain_scalar(const YAML::Node& v) { return v.IsScalar() && v.Tag() != "!"; }

template <class U>
void parse_unsigned(const YAML::Node& v, const Where& at, const std::string& key, U& out) {
  const std::string text = v.IsScalar() ? v.Scalar() : "";
  if (plain_scalar(v) && all_digits(text)) {
    errno = 0;
    unsigned long long x = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE || x > static_cast<unsigned long long>(std::numeric_limits<U>::max()))
      fail(at, key, "expected a non-negative integer, found " + text + " (too large)");
    out = static_cast<U>(x);
    return;
  }
  double d;
  if (plain_scalar(v) && parse_double(text, d)) {
    if (d < 0) fail(at, key, "expected a non-negative integer, found " + text + " (negative)");
    fail(at, key, "expected a non-negative integer, found " + text + " (not an integer)");
  }
  fail(at, key, "expected a non-negative integer, found " + describe(v));
}

void parse_int(const YAML::Node& v, const Where& at, const std::string& key, int& out) {
  const std::string text = v.IsScalar() ? v.Scalar() : "";
  if (plain_scalar(v) && (all_digits(text) || (!text.empty() && text[0] == '-' && all_digits(text, 1)))) {
    errno = 0;
    long long x = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE || x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      fail(at, key, "expected an integer, found " + text + " (out of range)");
    out = static_cast<int>(x);
    return;
  }
  double d;
  if (plain_scalar(v) && parse_double(text, d)) fail(at, key, "expected an integer, found " + text + " (not an integer)");
  fail(at, key, "expected an integer, found " + describe(v));
}

double parse_number(const YAML::Node& v, const Where& at, const std::string& key) {
  double d;
  if (plain_scalar(v) && parse_double(v.Scalar(), d)) return d;
  fail(at, key, "expected a number, found " + describe(v));
}

bool parse_bool(const YAML::Node& v, const Where& at, const std::string& key) {
  std::string low = v.IsScalar() ? v.Scalar() : "";
  std::transform(low.begin(), low.end(), low.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (plain_scalar(v) && (low == "true" || low == "yes" || low == "on")) return true;
  if (plain_scalar(v) && (low == "false" || low == "no" || low == "off")) return false;
  fail(at, key, "expected true or false, found " + describe(v));
}

std::string parse_string(const YAML::Node& v, const Where& at, const std::string& key) {
  if (!v.IsScalar()) fail(at, key, "expected a string, found " + describe(v));
  return v.Scalar();
}

// Field constructors, one per C++ type of the options structs.
Field field(const char* s, const char* k, const char* member, std::size_t& v) {
  Field f{s, k, member, Kind::Unsigned, {}, {}, {}, &v};
  const std::string key = f.path();
  f.assign = [&v, key](const YAML::Node& n, const Where& at) { parse_unsigned(n, at, key, v); };
  f.print = [&v] { return std::to_string(v); };
  return f;
}
// An unsigned field that does not size a training step (left out of the memory message's blame).
Field unsized(Field f) {
  f.size = nullptr;
  return f;
}
Field field(const char* s, const char* k, const char* member, std::int64_t& v) {
  Field f{s, k, member, Kind::Unsigned, {}, {}, {}, nullptr};
  const std::string key = f.path();
  f.assign = [&v, key](const YAML::Node& n, const Where& at) {
    std::uint64_t u = 0;
    parse_unsigned(n, at, key, u);
    if (u > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      fail(at, key, "expected a non-negative integer, found " + n.Scalar() + " (too large)");
    v = std::int64_t(u);
  };
  f.print = [&v] { return std::to_string(v); };
  return f;
}
Field field(const char* s, const char* k, const char* member, int& v) {
  Field f{s, k, member, Kind::Int, {}, {}, {}, nullptr};
  const std::string key = f.path();
  f.assign = [&v, key](const YAML::Node& n, const Where& at) { parse_int(n, at, key, v); };
  f.print = [&v] { return std::to_string(v); };
  return f;
}
Field field(const char* s, const char* k, const char* member, double& v) {
  Field f{s, k, member, Kind::Double, {}, {}, {}, nullptr};
  const std::string key = f.path();
  f.assign = [&v, key](const YAML::Node& n, const Where& at) { v = parse_number(n, at, key); };
  f.print = [&v] { return exact(v); };
  return f;
}
Field field(const char* s, const char* k, const char* member, bool& v) {
  Field f{s, k, member, Kind::Bool, {}, {}, {}, nullptr};
  const std::string key = f.path();
  f.assign = [&v, key](const YAML::Node& n, const Where& at) { v = parse_bool(n, at, key); };
  f.print = [&v] { return std::string(v ? "true" : "false"); };
  return f;
}
Field field(const char* s, const char* k, const char* member, std::string& v) {
  Field f{s, k, member, Kind::String, {}, {}, {}, nullptr};
  const std::string key = f.path();
  f.assign = [&v, key](const YAML::Node& n, const Where& at) { v = parse_string(n, at, key); };
  f.print = [&v] { return yaml_quoted(v); };
  return f;
}
// A string key whose allowed values are a list (task.name): validated by its struct, listed here.
Field field(const char* s, const char* k, const char* member, std::string& v, const std::vector<std::string>& choices) {
  Field f = field(s, k, member, v);
  f.kind = Kind::Choice;
  f.choices = choices;
  return f;
}
// An enum through its name table.
template <class E>
Field field(const char* s, const char* k, const char* member, E& v, const NameTable<E>& table) {
  Field f{s, k, member, Kind::Choice, {}, {}, table.names(), nullptr};
  const std::string key = f.path();
  f.assign = [&v, &table, key](const YAML::Node& n, const Where& at) {
    const std::string name = parse_string(n, at, key);
    if (!table.contains(name))
      fail(at, key, "expected one of " + join_names(table.names()) + ", found '" + name + "'" + did_you_mean(name, table.names()));
    v = table.parse(name, key);
  };
  f.print = [&v, &table] { return yaml_quoted(table.name(v)); };
  return f;
}
// An optional positive number written 0 for "none" (model.scale).
Field field(const char* s, const char* k, const char* member, std::optional<double>& v) {
  Field f{s, k, member, Kind::Double, {}, {}, {}, nullptr};
  const std::string key = f.path();
  f.assign = [&v, key](const YAML::Node& n, const Where& at) {
    const double x = parse_number(n, at, key);
    if (x < 0) fail(at, key, "expected 0 (meaning 1/sqrt(head_dim)) or a positive number, found " + n.Scalar());
    v = x == 0 ? std::nullopt : std::optional<double>(x);
  };
  f.print = [&v] { return exact(v.value_or(0.0)); };
  return f;
}
static_assert(std::is_same_v<std::uint64_t, std::size_t>, "seed is stored as an unsigned field");

// A field whose member has the key's name.
template <class V, class... Table>
Field field(const char* s, const char* k, V& v, const Table&... table) {
  return field(s, k, k, v, table...);
}

}  // namespace

const NameTable<TrainPrecision>& train_precision_names() {
  static const NameTable<TrainPrecision> table{{"fp32", TrainPrecision::Fp32}, {"bf16", TrainPrecision::Bf16}};
  return table;
}

namespace {

std::vector<Field> fields(Config& c) {
  auto& m = c.model;
  auto& t = c.task;
  auto& o = c.optimizer;
  auto& s = c.schedule;
  auto& r = c.train;
  return {field("", "seed", c.seed),
          field("model", "arch", m.arch, nn::arch_names()),
          field("model", "d_model", m.d_model),
          field("model", "heads", "attn.num_heads", m.attn.num_heads),
          field("model", "head_dim", "attn.head_dim", m.attn.head_dim),
          field("model", "value_dim", "attn.value_dim", m.attn.value_dim),
          field("model", "layers", m.layers),
          field("model", "d_ff", "ff.hidden", m.ff.hidden),
          field("model", "dropout", m.dropout),
          field("model", "attn_dropout", "attn.dropout", m.attn.dropout),
          field("model", "activation", "ff.activation", m.ff.activation, nn::activation_names()),
          field("model", "norm_first", m.norm_first),
          field("model", "norm", m.norm, nn::norm_names()),
          field("model", "positional", m.positional, nn::positional_names()),
          field("model", "attention", "attn.impl", m.attn.impl, nn::attention_impl_names()),
          field("model", "scale", "attn.scale", m.attn.scale),
          field("model", "qk_init_gain", "attn.qk_init_gain", m.attn.qk_init_gain),
          field("model", "tie_embeddings", m.tie_embeddings),
          field("model", "attn_only", m.attn_only),
          field("task", "name", t.name, data::task_names()),
          field("task", "vocab", t.vocab), field("task", "length", t.length),
          field("task", "pairs", t.pairs), field("task", "queries", t.queries),
          field("task", "eval_size", t.eval_size), field("task", "train_size", t.train_size),
          field("task", "path", t.path),
          field("task", "tokenizer", t.tokenizer, data::tokenizer_names()),
          field("task", "clean", t.clean, data::text_clean_names()),
          field("task", "val_fraction", t.val_fraction),
          field("task", "test_fraction", t.test_fraction),
          field("task", "train_fraction", t.train_fraction),
          field("task", "segment", t.segment),
          field("task", "objective", t.objective, data::objective_names()),
          field("task", "mask_rate", t.mask_rate),
          field("task", "language", t.language, data::language_names()),
          field("task", "grammar", t.grammar),
          field("task", "program", t.program),
          field("optimizer", "name", o.name, optim::optimizer_names()),
          field("optimizer", "lr", o.lr),
          field("optimizer", "weight_decay", o.weight_decay),
          field("optimizer", "beta1", "beta1", o.beta1), field("optimizer", "beta2", "beta2", o.beta2),
          field("optimizer", "eps", o.eps), field("optimizer", "momentum", o.momentum),
          field("optimizer", "dampening", o.dampening),
          field("optimizer", "nesterov", o.nesterov),
          field("optimizer", "decay_bias_and_norm", o.decay_bias_and_norm),
          field("optimizer", "clip_grad_norm", o.clip_grad_norm), field("optimizer", "qk_gain", o.qk_gain),
          field("schedule", "name", s.name, optim::schedule_names()),
          field("schedule", "warmup_steps", s.warmup_steps),
          field("schedule", "step_size", s.step_size), field("schedule", "min_lr", s.min_lr),
          field("schedule", "gamma", s.gamma),
          field("train", "steps", r.steps), field("train", "batch_size", r.batch_size),
          field("train", "accumulate", r.accumulate),
          field("train", "eval_every", r.eval_every),
          field("train", "checkpoint_every", r.checkpoint_every),
          field("train", "log_every", r.log_every),
          field("train", "target_accuracy", r.target_accuracy),
          field("train", "label_smoothing", r.label_smoothing),
          field("train", "threads", r.threads),
          field("train", "precision", r.precision, train_precision_names()),
          field("train", "diagnostics", r.diagnostics),
          unsized(field("train", "snapshot_every", r.snapshot_every)),
          unsized(field("train", "snapshot_examples", r.snapshot_examples)),
          field("run", "out", c.run.out)};
}

void assign(const Field& f, const YAML::Node& v, const Where& at) { f.assign(v, at); }

// Finds the field for section.key or throws with a suggestion.
const Field& find_field(std::vector<Field>& table, Config& c, const std::string& section, const std::string& key,
                        const Where& at) {
  for (auto& f : table)
    if (f.section == section && f.key == key) return f;
  std::vector<std::string> keys = keys_of(c, section);
  std::string hint = suggestion(key, keys);
  if (hint.empty()) hint = other_section_hint(c, key, section);
  fail(at, section + "." + key,
       "unknown key '" + key + "'" + hint + " (section '" + section + "' has: " + join(keys) + ")");
}

std::string unknown_section_message(Config& c, const std::string& name) {
  std::vector<std::string> top = kSections;
  top.insert(top.begin(), "seed");
  std::string hint = suggestion(name, top);
  if (hint.empty()) hint = other_section_hint(c, name, "");
  return "unknown section '" + name + "'" + hint + " (expected: " + join(top) + ")";
}

// Reject a key that appears twice in one mapping (yaml-cpp keeps both silently).
void check_duplicates(const YAML::Node& map, const std::string& file, const std::string& prefix) {
  std::map<std::string, int> seen;
  for (auto entry : map) {
    const YAML::Node k = entry.first;
    const std::string name = k.IsScalar() ? k.Scalar() : "";
    auto [pos, fresh] = seen.emplace(name, line_of(k));
    if (!fresh)
      fail({file, line_of(k)}, prefix + name,
           "duplicate key '" + name + "' (first at line " + std::to_string(pos->second) + ")");
  }
}

void parse_document(const YAML::Node& root, const std::string& file, Config& c, Origins& origins) {
  auto table = fields(c);
  if (!root.IsMap()) {
    if (root.IsNull())
      fail({file, line_of(root)}, "", "the file is empty; expected a mapping of sections (model, task, optimizer, schedule, train, run)");
    fail({file, line_of(root)}, "", "expected a mapping of sections at the top level, found " + describe(root));
  }
  check_duplicates(root, file, "");
  for (auto entry : root) {
    const YAML::Node k = entry.first;
    const YAML::Node v = entry.second;
    Where at{file, line_of(k)};
    if (!k.IsScalar()) fail(at, "", "expected a section name, found " + describe(k));
    const std::string name = k.Scalar();
    if (name == "seed") {
      assign(table[0], v, at);
      origins["seed"] = at;
      continue;
    }
    if (std::find(kSections.begin(), kSections.end(), name) == kSections.end())
      fail(at, name, unknown_section_message(c, name));
    if (!v.IsMap()) fail(at, name, "expected a mapping of keys for section '" + name + "', found " + describe(v));
    check_duplicates(v, file, name + ".");
    for (auto kv : v) {
      const YAML::Node key = kv.first;
      Where kat{file, line_of(key)};
      if (!key.IsScalar()) fail(kat, name, "expected a key name, found " + describe(key));
      const Field& f = find_field(table, c, name, key.Scalar(), kat);
      assign(f, kv.second, kat);
      origins[f.path()] = kat;
    }
  }
}

void apply_override(const std::string& text, Config& c, Origins& origins) {
  Where at{"--set", 0, text};
  auto eq = text.find('=');
  if (eq == std::string::npos)
    fail(at, text, "expected section.key=value, found no '='");
  const std::string path = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  auto table = fields(c);
  const Field* f = nullptr;
  if (path == "seed") {
    f = &table[0];
  } else {
    auto dot = path.find('.');
    if (dot == std::string::npos || path.find('.', dot + 1) != std::string::npos) {
      std::string hint;
      for (auto& g : table)
        if (g.key == path && !g.section.empty()) hint = "; did you mean '" + g.path() + "'?";
      fail(at, path, "expected section.key (or seed) before '=', found '" + path + "'" + hint);
    }
    const std::string section = path.substr(0, dot);
    if (std::find(kSections.begin(), kSections.end(), section) == kSections.end())
      fail(at, section, unknown_section_message(c, section));
    f = &find_field(table, c, section, path.substr(dot + 1), at);
  }
  YAML::Node node;
  try {
    node = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    fail(at, f->path(), "YAML syntax error in the value: " + e.msg);
  }
  assign(*f, node, at);
  origins[f->path()] = at;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

// ---- validation ----

double estimate_bytes(const Config& c);

// Report an OptionError of `section`'s struct at the key its first field (or the first field the
// user set) came from, with every {field} reference shown as its section.key.
[[noreturn]] void report(const OptionError& e, const std::string& section, const Config& config, const Origins& origins,
                         const std::function<Where(const std::string&)>& where,
                         const std::vector<std::pair<std::string, std::string>>& aliases = {}) {
  Config& c = const_cast<Config&>(config);  // fields() hands out pointers; nothing is written
  const auto table = fields(c);
  auto key_of = [&](const std::string& member) {
    for (auto& [from, to] : aliases)
      if (member == from) return to;
    for (auto& f : table)
      if (f.section == section && f.member == member) return f.path();
    return section + "." + member;  // a field with no key of its own
  };
  std::string blamed = key_of(e.fields.front());
  for (auto& f : e.fields)
    if (origins.count(key_of(f))) {
      blamed = key_of(f);
      break;
    }
  fail(where(blamed), blamed, e.render(key_of));
}

// Blame the size the user set furthest above its default: that is usually the typo.
void check_memory_impl(const Config& c, const Origins& origins, const std::function<Where(const std::string&)>& where,
                       std::size_t budget) {
  const double need = double(estimate_memory_bytes(c));
  if (need <= double(budget)) return;
  Config defaults;
  Config& cc = const_cast<Config&>(c);
  auto table = fields(cc), base = fields(defaults);
  std::string k = "train.batch_size";
  double worst = 0;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (!table[i].size || (!origins.empty() && !origins.count(table[i].path())) || table[i].key == "seed") continue;
    double v = static_cast<double>(*table[i].size);
    double d = std::max(1.0, static_cast<double>(*base[i].size));
    if (v / d > worst) worst = v / d, k = table[i].path();
  }
  fail(where(k), k, "a training step would need about " + human_bytes(need) + ", more than the " +
                        human_bytes(double(budget)) + " of memory available (V=" + std::to_string(c.task.vocab) +
                        ", T=" + std::to_string(c.task.length) + ", C=" + std::to_string(c.model.d_model) +
                        ", layers=" + std::to_string(c.model.layers) + ", B=" + std::to_string(c.train.batch_size) +
                        ", held-out examples " + std::to_string(c.task.eval_size) + ")");
}

void validate_impl(const Config& c, const Origins& origins, std::size_t memory_budget = 0) {
  auto where = [&](const std::string& key) {
    auto it = origins.find(key);
    if (it != origins.end()) return it->second;
    return Where{c.source.empty() ? "<config>" : c.source, 0, ""};
  };
  auto section = [&](const std::string& name, const std::function<void()>& validate,
                     const std::vector<std::pair<std::string, std::string>>& aliases = {}) {
    try {
      validate();
    } catch (const OptionError& e) {
      report(e, name, c, origins, where, aliases);
    }
  };
  section("model", [&] { c.model.validate(); });
  section("task", [&] { c.task.validate(); });
  section("optimizer", [&] { c.optimizer.validate(); });
  const auto& r = c.train;
  section("train", [&] {
    OptionChecker k("TrainConfig");
    k.positive(r.steps, "steps");
    k.positive(r.batch_size, "batch_size");
    k.positive(r.accumulate, "accumulate");
    k.require(r.batch_size % std::max<std::size_t>(r.accumulate, 1) == 0, {"accumulate", "batch_size"},
              "{batch_size} (" + std::to_string(r.batch_size) + ") must be divisible by {accumulate} (" +
                  std::to_string(r.accumulate) + ")");
    k.positive(r.eval_every, "eval_every");
    k.positive(r.checkpoint_every, "checkpoint_every");
    k.positive(r.log_every, "log_every");
    k.in_range(r.target_accuracy, "target_accuracy", 0, false, 1, false);
    k.in_range(r.label_smoothing, "label_smoothing", 0, false, 1, true);
    k.require(r.threads >= 0, {"threads"},
              "expected 0 (all cores) or a positive thread count, found " + std::to_string(r.threads));
    k.positive(r.snapshot_examples, "snapshot_examples");
    k.require(r.snapshot_every == 0 || r.snapshot_examples <= c.task.eval_size, {"snapshot_examples"},
              "the snapshots show the first {snapshot_examples} examples of the held-out set: expected at most "
              "task.eval_size (" + std::to_string(c.task.eval_size) + "), found " + std::to_string(r.snapshot_examples));
  });
  // The schedule runs over train.steps from optimizer.lr.
  section("schedule", [&] {
    optim::ScheduleOptions s = c.schedule;
    s.total_steps = std::int64_t(r.steps);
    s.validate(c.optimizer.lr);
  }, {{"base_lr", "optimizer.lr"}, {"total_steps", "train.steps"}});

  if (c.run.out.empty()) fail(where("run.out"), "run.out", "expected a directory path, found an empty string");
  if (memory_budget > 0) check_memory_impl(c, origins, where, memory_budget);
}

// The model's parameters (shapes from the model itself, built under MetaGuard) and the
// activations of one step for the task's own layout.
double estimate_bytes(const Config& c) {
  const std::unique_ptr<data::Task> task = data::make_task(c.task);
  // (A task that does not fit the arch is refused when the model is built; size it as it comes.)
  const bool s2s = c.model.arch == nn::Arch::EncoderDecoder && task->seq2seq();
  const double T = double(std::max(task->input_length(), task->target_length()));
  nn::TransformerOptions o = c.model;
  o.max_len = std::max<std::size_t>(o.max_len, std::size_t(T));
  double params = 0;
  for (auto& [name, shape] : nn::parameter_shapes(o, task->input_vocab(), s2s ? task->target_vocab() : task->num_classes()))
    params += double(numel(shape));
  const double C = double(c.model.d_model), H = double(c.model.attn.num_heads), F = double(c.model.ff.hidden);
  const double L = double(c.model.layers), B = double(c.train.batch_size);
  const double V = double(s2s ? task->target_vocab() : task->num_classes());
  // Activations the tape keeps per block: about a dozen B*T*C tensors, scores/probabilities/
  // dropout mask per head, and the feed-forward hidden twice; doubled for their gradients.
  const double block_act = 12 * B * T * C + 3 * B * H * T * T + 2 * B * T * F;
  const double acts = (s2s ? L * (2 * block_act + 3 * B * H * T * T + 4 * B * T * C) : L * block_act) + 3 * B * T * V;
  const double data = double(estimate_data_bytes(c));
  // float32: parameter + gradient + two Adam moments; activations and their gradients.
  return 4.0 * (4 * params + 2 * acts) + data;
}

// Shortest decimal text that reads back to the same double.
std::string exact(double x) {
  char buf[64];
  // Whole numbers as decimals ("100.0", not "1e+02", which YAML 1.1 readers such as PyYAML take
  // for a string); the others in the fewest significant digits that read back exactly.
  if (x == std::floor(x) && std::fabs(x) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.1f", x);
    return buf;
  }
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string yaml_quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch == '\n') {  // a program's text (task.program) is many lines
      out += "\\n";
    } else if (ch < 0x20) {
      // \u, which YAML and JSON both read (qkv.load parses the stored config as JSON scalars).
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// What a text that is not YAML at all is, when it can be told: a checkpoint given as a config.
std::string not_yaml(const std::string& text) {
  if (text.compare(0, std::strlen("qkv-checkpoint\n"), "qkv-checkpoint\n") == 0)
    return "is a qkv checkpoint, not a YAML config; to continue its run: qkv train CONFIG --resume FILE "
           "(the run directory's config.yaml is its config)";
  if (text.compare(0, 8, "\x89HDF\r\n\x1a\n") == 0) return "is an HDF5 file, not a YAML config";
  if (text.find('\0') != std::string::npos) return "is a binary file (it holds a NUL byte), not a YAML config";
  return "";
}

// yaml-cpp parses nested collections recursively; a config has two levels (sections, keys).
constexpr int kMaxNesting = 64;
void check_nesting(const std::string& text, const std::string& source) {
  int depth = 0, line = 1;
  char quote = 0;
  for (char ch : text) {
    if (ch == '\n') ++line;
    if (quote) {
      if (ch == quote) quote = 0;
      continue;
    }
    if (ch == '"' || ch == '\'') quote = ch;
    else if (ch == '[' || ch == '{') depth++;
    else if ((ch == ']' || ch == '}') && depth > 0) depth--;
    if (depth > kMaxNesting)
      fail({source, line}, "", "collections nested more than " + std::to_string(kMaxNesting) +
                                   " deep: a config holds sections of keys with scalar values");
  }
}

/// The YAML document in `text` (from `source`): text, not binary; nested at most kMaxNesting deep.
YAML::Node load_yaml(const std::string& text, const std::string& source) {
  if (const std::string what = not_yaml(text); !what.empty()) fail({source, 0}, "", what);
  check_nesting(text, source);
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail({source, e.mark.is_null() ? 0 : e.mark.line + 1}, "", "YAML syntax error: " + e.msg);
  }
}

/// The text of the `what` file at `path` ("config", "sweep file"), within io::kMaxTextFileBytes.
std::string read_text(const std::string& path, const std::string& what) {
  if (path.empty()) fail({"<" + what + ">", 0}, "", "cannot read the " + what + ": empty path");
  try {
    return io::read_file(path, io::kMaxTextFileBytes, what);
  } catch (const io::IoError& e) {
    const std::string message = e.what(), prefix = what + " " + path + ": ";
    fail({path, 0}, "", "cannot read the " + what + ": " +
                            (message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message));
  }
}

Config parse_with_origins(const std::string& yaml_text, const std::string& source_name,
                          const std::vector<std::string>& overrides, bool resources = true,
                          std::size_t memory_budget = 0) {
  Config c;
  c.source = source_name;
  Origins origins;
  parse_document(load_yaml(yaml_text, source_name), source_name, c, origins);
  for (auto& o : overrides) apply_override(o, c, origins);
  validate_impl(c, origins, resources ? memory_budget : 0);
  return c;
}

}  // namespace

ConfigError::ConfigError(std::string file_, int line_, std::string key_, std::string message_, std::string override_)
    : ValueError((override_.empty() ? file_ + (line_ > 0 ? ":" + std::to_string(line_) : "") : "--set " + override_) + ": " +
                 (key_.empty() ? "" : key_ + ": ") + message_),
      file(std::move(file_)),
      line(line_),
      key(std::move(key_)),
      message(std::move(message_)),
      override_text(std::move(override_)) {}

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides, std::size_t memory_budget) {
  return parse_with_origins(yaml_text, source_name, overrides, true, memory_budget);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, std::size_t memory_budget) {
  return parse_with_origins(read_text(path, "config"), path, overrides, true, memory_budget);
}

Config apply_overrides(Config config, const std::vector<std::string>& overrides) {
  Origins origins;
  for (auto& o : overrides) apply_override(o, config, origins);
  validate_impl(config, origins);
  return config;
}

void validate(const Config& config) { validate_impl(config, {}); }

Config parse_stored_config(const std::string& yaml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  return parse_with_origins(yaml_text, source_name, overrides, false);
}

std::size_t estimate_memory_bytes(const Config& config) {
  double b = estimate_bytes(config);
  if (!(b < static_cast<double>(std::numeric_limits<std::size_t>::max()))) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(b);
}

std::size_t estimate_data_bytes(const Config& c) {
  // The longest sequence any task makes from these options (recall: keys, values and queries).
  const double T = double(std::max(c.task.length, 2 * c.task.pairs + std::max(c.task.queries, c.task.pairs))) + 1;
  // Validation and test sets and a fixed training set: inputs and targets, 8 bytes a token.
  const double b = 16.0 * T * (2.0 * double(c.task.eval_size) + double(c.task.train_size)) +
                   4.0 * T * double(c.model.d_model);  // learned positions
  return b < 1.8e19 ? std::size_t(b) : std::numeric_limits<std::size_t>::max();
}

void check_memory(const Config& config, std::size_t budget) {
  auto where = [&](const std::string&) { return Where{config.source.empty() ? "<config>" : config.source, 0, ""}; };
  check_memory_impl(config, {}, where, budget);
}

std::string to_yaml(const Config& config) {
  Config& c = const_cast<Config&>(config);  // fields() hands out pointers; nothing is written
  std::string out = "# qkv resolved config\n";
  std::string section = "-";
  for (auto& f : fields(c)) {
    if (f.section != section) {
      section = f.section;
      if (!section.empty()) out += section + ":\n";
    }
    out += (section.empty() ? "" : "  ") + f.key + ": " + f.print() + "\n";
  }
  return out;
}

bool operator==(const Config& a, const Config& b) {
  auto fa = fields(const_cast<Config&>(a)), fb = fields(const_cast<Config&>(b));
  for (std::size_t i = 0; i < fa.size(); ++i)
    if (fa[i].print() != fb[i].print()) return false;
  return true;
}

std::vector<std::string> differences(const Config& a, const Config& b, const std::vector<std::string>& sections,
                                     const std::string& label_a, const std::string& label_b) {
  auto fa = fields(const_cast<Config&>(a)), fb = fields(const_cast<Config&>(b));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < fa.size(); ++i) {
    const std::string sec = fa[i].section.empty() ? fa[i].key : fa[i].section;
    if (std::find(sections.begin(), sections.end(), sec) == sections.end()) continue;
    const std::string va = fa[i].print(), vb = fb[i].print();
    if (va != vb) out.push_back(fa[i].path() + ": " + label_a + " " + va + ", " + label_b + " " + vb);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> reference() {
  Config c;
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& f : fields(c)) {
    std::string what = f.choices.empty() ? f.print() : join_names(f.choices);
    out.emplace_back(f.path(), what);
  }
  return out;
}

namespace {

// A scalar of the sweep file at `key`, or ConfigError saying what was found instead.
std::string sweep_scalar(const YAML::Node& node, const std::string& file, const std::string& key) {
  if (!node.IsScalar())
    fail({file, line_of(node)}, key, std::string("expected a single value, found ") +
                                         (node.IsSequence() ? "a list" : node.IsMap() ? "a mapping" : "nothing"));
  return node.as<std::string>();
}

}  // namespace

SweepFile load_sweep_file(const std::string& path) {
  const YAML::Node root = load_yaml(read_text(path, "sweep file"), path);
  if (!root.IsMap()) fail({path, 1}, "", "a sweep file is a mapping with the keys base, set, grid, seeds, out");
  SweepFile f;
  f.path = path;
  const std::vector<std::string> keys = {"base", "set", "grid", "seeds", "out"};
  for (auto kv : root) {
    const std::string key = sweep_scalar(kv.first, path, "");
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      fail({path, line_of(kv.first)}, key, "unknown key" + did_you_mean(key, keys) + " (a sweep file has " + join(keys) + ")");
  }
  if (!root["base"]) fail({path, 1}, "base", "missing: the config file every run starts from");
  namespace fs = std::filesystem;
  f.base = (fs::path(path).parent_path() / sweep_scalar(root["base"], path, "base")).lexically_normal().string();
  f.out = root["out"] ? sweep_scalar(root["out"], path, "out") : "sweeps/" + fs::path(path).stem().string();
  if (auto set = root["set"]) {
    if (!set.IsMap()) fail({path, line_of(set)}, "set", "expected a mapping of section.key: value");
    for (auto kv : set) {
      const std::string key = sweep_scalar(kv.first, path, "set");
      f.set.push_back(key + "=" + sweep_scalar(kv.second, path, "set." + key));
    }
  }
  if (auto grid = root["grid"]) {
    if (!grid.IsMap()) fail({path, line_of(grid)}, "grid", "expected a mapping of section.key: [values]");
    for (auto kv : grid) {
      const std::string key = sweep_scalar(kv.first, path, "grid");
      if (!kv.second.IsSequence() || kv.second.size() == 0)
        fail({path, line_of(kv.second)}, "grid." + key, "expected a non-empty list of values");
      std::vector<std::string> values;
      for (auto x : kv.second) values.push_back(sweep_scalar(x, path, "grid." + key));
      f.grid.emplace_back(key, values);
    }
  }
  if (auto seeds = root["seeds"]) {
    if (!seeds.IsSequence() || seeds.size() == 0) fail({path, line_of(seeds)}, "seeds", "expected a non-empty list of seeds");
    f.seeds.clear();
    for (auto x : seeds) {
      const std::string v = sweep_scalar(x, path, "seeds");
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 19)
        fail({path, line_of(x)}, "seeds", "expected non-negative integers (below 10^19), found '" + v + "'");
      f.seeds.push_back(std::stoull(v));
    }
  }
  return f;
}

}  // namespace qkv::config
