#include "qkv/config/config.hpp"
#include "qkv/tensor/names.hpp"

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
#include <limits>
#include <map>
#include <sstream>

namespace qkv::config {

namespace {

// One table describes every key: parsing, validation locations, to_yaml and equality all walk
// it, so a new key is added in exactly one place (plus its check in validate_impl).
enum class Kind { Unsigned, Int, Double, Bool, String };

struct Field {
  std::string section, key;
  Kind kind;
  void* ptr;
  std::string path() const { return section.empty() ? key : section + "." + key; }
};

Field field(const char* s, const char* k, std::size_t& v) { return {s, k, Kind::Unsigned, &v}; }
Field field(const char* s, const char* k, int& v) { return {s, k, Kind::Int, &v}; }
Field field(const char* s, const char* k, double& v) { return {s, k, Kind::Double, &v}; }
Field field(const char* s, const char* k, bool& v) { return {s, k, Kind::Bool, &v}; }
Field field(const char* s, const char* k, std::string& v) { return {s, k, Kind::String, &v}; }
static_assert(std::is_same_v<std::uint64_t, std::size_t>, "seed is stored as an unsigned field");

const std::vector<std::string> kSections = {"model", "task", "optimizer", "schedule", "train", "run"};

std::vector<Field> fields(Config& c) {
  auto& m = c.model;
  auto& t = c.task;
  auto& o = c.optimizer;
  auto& s = c.schedule;
  auto& r = c.train;
  return {field("", "seed", c.seed),
          field("model", "arch", m.arch), field("model", "d_model", m.d_model),
          field("model", "heads", m.heads), field("model", "head_dim", m.head_dim),
          field("model", "layers", m.layers), field("model", "d_ff", m.d_ff),
          field("model", "dropout", m.dropout), field("model", "attn_dropout", m.attn_dropout),
          field("model", "activation", m.activation), field("model", "norm_first", m.norm_first),
          field("model", "positional", m.positional), field("model", "attention", m.attention),
          field("model", "scale", m.scale),
          field("task", "name", t.name), field("task", "vocab", t.vocab), field("task", "length", t.length),
          field("task", "pairs", t.pairs), field("task", "queries", t.queries),
          field("task", "eval_size", t.eval_size), field("task", "train_size", t.train_size),
          field("optimizer", "name", o.name), field("optimizer", "lr", o.lr),
          field("optimizer", "weight_decay", o.weight_decay), field("optimizer", "beta1", o.beta1),
          field("optimizer", "beta2", o.beta2), field("optimizer", "eps", o.eps),
          field("optimizer", "momentum", o.momentum), field("optimizer", "dampening", o.dampening),
          field("optimizer", "nesterov", o.nesterov),
          field("optimizer", "decay_bias_and_norm", o.decay_bias_and_norm),
          field("optimizer", "clip_grad_norm", o.clip_grad_norm),
          field("schedule", "name", s.name), field("schedule", "warmup_steps", s.warmup_steps),
          field("schedule", "step_size", s.step_size), field("schedule", "min_lr", s.min_lr),
          field("schedule", "gamma", s.gamma),
          field("train", "steps", r.steps), field("train", "batch_size", r.batch_size),
          field("train", "eval_every", r.eval_every), field("train", "checkpoint_every", r.checkpoint_every),
          field("train", "log_every", r.log_every), field("train", "target_accuracy", r.target_accuracy),
          field("train", "label_smoothing", r.label_smoothing), field("train", "threads", r.threads),
          field("train", "diagnostics", r.diagnostics),
          field("run", "out", c.run.out)};
}

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


std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// "; did you mean 'heads'?" or "" when nothing is close.
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  if (!best.empty() && best_d <= limit) return "; did you mean '" + best + "'?";
  for (auto& c : candidates)
    if (word.size() >= 3 && c.find(word) != std::string::npos) return "; did you mean '" + c + "'?";
  return "";
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

void assign(const Field& f, const YAML::Node& v, const Where& at) {
  const std::string key = f.path();
  const bool plain = v.IsScalar() && v.Tag() != "!";
  const std::string text = v.IsScalar() ? v.Scalar() : "";
  switch (f.kind) {
    case Kind::Unsigned: {
      if (plain && all_digits(text)) {
        errno = 0;
        unsigned long long x = std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE) fail(at, key, "expected a non-negative integer, found " + text + " (too large)");
        *static_cast<std::size_t*>(f.ptr) = static_cast<std::size_t>(x);
        return;
      }
      double d;
      if (plain && parse_double(text, d)) {
        if (d < 0) fail(at, key, "expected a non-negative integer, found " + text + " (negative)");
        fail(at, key, "expected a non-negative integer, found " + text + " (not an integer)");
      }
      fail(at, key, "expected a non-negative integer, found " + describe(v));
    }
    case Kind::Int: {
      if (plain && (all_digits(text) || (text[0] == '-' && all_digits(text, 1)))) {
        errno = 0;
        long long x = std::strtoll(text.c_str(), nullptr, 10);
        if (errno == ERANGE || x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
          fail(at, key, "expected an integer, found " + text + " (out of range)");
        *static_cast<int*>(f.ptr) = static_cast<int>(x);
        return;
      }
      double d;
      if (plain && parse_double(text, d)) fail(at, key, "expected an integer, found " + text + " (not an integer)");
      fail(at, key, "expected an integer, found " + describe(v));
    }
    case Kind::Double: {
      double d;
      if (plain && parse_double(text, d)) {
        *static_cast<double*>(f.ptr) = d;
        return;
      }
      fail(at, key, "expected a number, found " + describe(v));
    }
    case Kind::Bool: {
      std::string low = text;
      std::transform(low.begin(), low.end(), low.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (plain && (low == "true" || low == "yes" || low == "on")) {
        *static_cast<bool*>(f.ptr) = true;
        return;
      }
      if (plain && (low == "false" || low == "no" || low == "off")) {
        *static_cast<bool*>(f.ptr) = false;
        return;
      }
      fail(at, key, "expected true or false, found " + describe(v));
    }
    case Kind::String: {
      if (!v.IsScalar()) fail(at, key, "expected a string, found " + describe(v));
      *static_cast<std::string*>(f.ptr) = text;
      return;
    }
  }
}

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

// ---- validation ----

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// run.out must be creatable later: its nearest existing ancestor must be a writable directory.
// Nothing is created here.
std::string out_dir_problem(const std::string& out) {
  namespace fs = std::filesystem;
  if (out.empty()) return "expected a directory path, found an empty string";
  fs::path p(out);
  std::error_code ec;
  while (!p.empty() && !fs::exists(fs::symlink_status(p, ec)) ) p = p.parent_path();
  if (p.empty()) p = ".";
  if (!fs::is_directory(p, ec))
    return "cannot create output directory '" + out + "': '" + p.string() + "' exists and is not a directory";
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    return "cannot create output directory '" + out + "': directory '" + p.string() + "' is not writable";
  return "";
}

double seq_len(const Config& c) {
  // The longest sequence a task builds: recall lays out its pairs and queries; the others use
  // `length` tokens plus a few markers.
  double t = static_cast<double>(c.task.length);
  if (c.task.name == "recall")
    t = std::max(t, 2.0 * static_cast<double>(c.task.pairs) + 2.0 * static_cast<double>(std::max<std::size_t>(1, c.task.queries)));
  return t + 2;
}

double estimate_bytes(const Config& c) {
  const auto& m = c.model;
  const double C = static_cast<double>(m.d_model), H = static_cast<double>(m.heads);
  const double D = m.head_dim ? static_cast<double>(m.head_dim) : (H > 0 ? C / H : C);
  const double F = static_cast<double>(m.d_ff), L = static_cast<double>(m.layers);
  const double V = static_cast<double>(c.task.vocab), B = static_cast<double>(c.train.batch_size);
  const double T = seq_len(c);
  const bool ed = m.arch == "encoder_decoder";
  const double attn_params = 4 * C * H * D + 3 * H * D + C;
  const double block_params = attn_params + 2 * C * F + F + C + 4 * C;
  const double blocks = ed ? L * (2 * block_params + attn_params + 2 * C) : L * block_params;
  const double params = V * C * (ed ? 2 : 1) + C * V + V + (m.positional == "learned" ? T * C : 0) + blocks;
  // Activations the tape keeps per block: about a dozen B*T*C tensors, scores/probabilities/
  // dropout mask per head, and the feed-forward hidden twice; doubled for their gradients.
  const double block_act = 12 * B * T * C + 3 * B * H * T * T + 2 * B * T * F;
  const double acts = (ed ? L * (2 * block_act + 3 * B * H * T * T + 4 * B * T * C) : L * block_act) + 3 * B * T * V;
  // float32: parameter + gradient + two Adam moments; activations and their gradients.
  return 4.0 * (4 * params + 2 * acts);
}

void validate_impl(const Config& c, const Origins& origins) {
  auto where = [&](const std::string& key) {
    auto it = origins.find(key);
    if (it != origins.end()) return it->second;
    return Where{c.source.empty() ? "<config>" : c.source, 0, ""};
  };
  auto check = [&](bool ok, const std::string& key, const std::string& message) {
    if (!ok) fail(where(key), key, message);
  };
  // For a rule that involves several keys, blame the first one the user actually set.
  auto blame = [&](std::initializer_list<const char*> keys) {
    for (auto k : keys)
      if (origins.count(k)) return std::string(k);
    return std::string(*keys.begin());
  };
  auto positive = [&](std::size_t v, const char* key) {
    check(v > 0, key, "expected a positive integer, found 0");
  };
  auto choice = [&](const std::string& v, const char* key, const std::vector<std::string>& allowed) {
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
      fail(where(key), key, "expected one of " + join(allowed) + ", found '" + v + "'" + suggestion(v, allowed));
  };
  auto in_range = [&](double v, const char* key, double lo, bool lo_open, double hi, bool hi_open) {
    bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    check(ok, key, std::string("expected a number in ") + (lo_open ? "(" : "[") + num(lo) + ", " +
                       (std::isinf(hi) ? std::string("inf)") : num(hi) + (hi_open ? ")" : "]")) + ", found " + num(v));
  };
  const double inf = std::numeric_limits<double>::infinity();

  const auto& m = c.model;
  choice(m.arch, "model.arch", {"encoder", "encoder_decoder"});
  positive(m.d_model, "model.d_model");
  positive(m.heads, "model.heads");
  positive(m.layers, "model.layers");
  positive(m.d_ff, "model.d_ff");
  if (m.head_dim == 0 && m.d_model % m.heads != 0) {
    std::string k = blame({"model.heads", "model.d_model"});
    fail(where(k), k, "model.d_model (" + std::to_string(m.d_model) + ") must be divisible by model.heads (" +
                          std::to_string(m.heads) + ") when model.head_dim is 0; set head_dim or change heads");
  }
  in_range(m.dropout, "model.dropout", 0, false, 1, true);
  in_range(m.attn_dropout, "model.attn_dropout", 0, false, 1, true);
  choice(m.activation, "model.activation", {"gelu", "relu"});
  choice(m.positional, "model.positional", {"sinusoidal", "learned"});
  choice(m.attention, "model.attention", {"fused", "composite"});
  check(m.scale >= 0, "model.scale", "expected 0 (meaning 1/sqrt(head_dim)) or a positive number, found " + num(m.scale));

  const auto& t = c.task;
  choice(t.name, "task.name", {"copy", "reverse", "sort", "recall", "seq2seq_reverse", "seq2seq_sort"});
  positive(t.vocab, "task.vocab");
  positive(t.length, "task.length");
  positive(t.pairs, "task.pairs");
  positive(t.eval_size, "task.eval_size");
  if (t.name == "recall" && t.pairs > t.vocab) {
    std::string k = blame({"task.pairs", "task.vocab"});
    fail(where(k), k, "recall needs distinct keys: task.pairs (" + std::to_string(t.pairs) +
                          ") must not exceed task.vocab (" + std::to_string(t.vocab) + ")");
  }

  const auto& o = c.optimizer;
  choice(o.name, "optimizer.name", {"sgd", "adam", "adamw"});
  in_range(o.lr, "optimizer.lr", 0, true, inf, false);
  in_range(o.weight_decay, "optimizer.weight_decay", 0, false, inf, false);
  in_range(o.beta1, "optimizer.beta1", 0, false, 1, true);
  in_range(o.beta2, "optimizer.beta2", 0, false, 1, true);
  in_range(o.eps, "optimizer.eps", 0, true, inf, false);
  in_range(o.momentum, "optimizer.momentum", 0, false, 1, true);
  in_range(o.dampening, "optimizer.dampening", 0, false, 1, false);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    std::string k = blame({"optimizer.nesterov", "optimizer.momentum", "optimizer.dampening"});
    fail(where(k), k, "nesterov needs momentum > 0 and dampening 0, found momentum " + num(o.momentum) +
                          " and dampening " + num(o.dampening));
  }
  in_range(o.clip_grad_norm, "optimizer.clip_grad_norm", 0, false, inf, false);

  const auto& s = c.schedule;
  choice(s.name, "schedule.name", {"constant", "cosine", "step"});
  positive(s.step_size, "schedule.step_size");
  in_range(s.min_lr, "schedule.min_lr", 0, false, inf, false);
  if (s.min_lr > o.lr) {
    std::string k = blame({"schedule.min_lr", "optimizer.lr"});
    fail(where(k), k, "schedule.min_lr (" + num(s.min_lr) + ") must not exceed optimizer.lr (" + num(o.lr) + ")");
  }
  in_range(s.gamma, "schedule.gamma", 0, true, 1, false);

  const auto& r = c.train;
  positive(r.steps, "train.steps");
  positive(r.batch_size, "train.batch_size");
  positive(r.eval_every, "train.eval_every");
  positive(r.checkpoint_every, "train.checkpoint_every");
  positive(r.log_every, "train.log_every");
  if (s.warmup_steps > r.steps) {
    std::string k = blame({"schedule.warmup_steps", "train.steps"});
    fail(where(k), k, "schedule.warmup_steps (" + std::to_string(s.warmup_steps) + ") must not exceed train.steps (" +
                          std::to_string(r.steps) + ")");
  }
  in_range(r.target_accuracy, "train.target_accuracy", 0, false, 1, false);
  in_range(r.label_smoothing, "train.label_smoothing", 0, false, 1, true);
  check(r.threads >= 0, "train.threads", "expected 0 (all cores) or a positive thread count, found " + std::to_string(r.threads));

  const double need = estimate_bytes(c);
  const std::size_t have = physical_memory_bytes();
  if (have > 0 && need > static_cast<double>(have)) {
    // Blame the size the user set furthest above its default: that is usually the typo.
    Config defaults;
    Config& cc = const_cast<Config&>(c);
    auto table = fields(cc), base = fields(defaults);
    std::string k = "train.batch_size";
    double worst = 0;
    for (std::size_t i = 0; i < table.size(); ++i) {
      if (table[i].kind != Kind::Unsigned || !origins.count(table[i].path()) || table[i].key == "seed") continue;
      double v = static_cast<double>(*static_cast<std::size_t*>(table[i].ptr));
      double d = std::max(1.0, static_cast<double>(*static_cast<std::size_t*>(base[i].ptr)));
      if (v / d > worst) worst = v / d, k = table[i].path();
    }
    fail(where(k), k, "a training step would need about " + human_bytes(need) + ", more than this machine's " +
                          human_bytes(static_cast<double>(have)) + " of memory (V=" + std::to_string(t.vocab) +
                          ", T=" + num(seq_len(c)) + ", C=" + std::to_string(m.d_model) + ", layers=" +
                          std::to_string(m.layers) + ", B=" + std::to_string(r.batch_size) + ")");
  }

  std::string problem = out_dir_problem(c.run.out);
  check(problem.empty(), "run.out", problem);
}

// Shortest decimal text that reads back to the same double.
std::string exact(double x) {
  char buf[64];
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
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

Config parse_with_origins(const std::string& yaml_text, const std::string& source_name,
                          const std::vector<std::string>& overrides) {
  Config c;
  c.source = source_name;
  Origins origins;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail({source_name, e.mark.is_null() ? 0 : e.mark.line + 1}, "", "YAML syntax error: " + e.msg);
  }
  parse_document(root, source_name, c, origins);
  for (auto& o : overrides) apply_override(o, c, origins);
  validate_impl(c, origins);
  return c;
}

}  // namespace

ConfigError::ConfigError(std::string file_, int line_, std::string key_, std::string message_, std::string override_)
    : ValueError((override_.empty() ? file_ + ":" + std::to_string(line_) : "--set " + override_) + ": " +
                 (key_.empty() ? "" : key_ + ": ") + message_),
      file(std::move(file_)),
      line(line_),
      key(std::move(key_)),
      message(std::move(message_)),
      override_text(std::move(override_)) {}

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  return parse_with_origins(yaml_text, source_name, overrides);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail({path, 0}, "", std::string("cannot read the config file: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_with_origins(text.str(), path, overrides);
}

Config apply_overrides(Config config, const std::vector<std::string>& overrides) {
  Origins origins;
  for (auto& o : overrides) apply_override(o, config, origins);
  validate_impl(config, origins);
  return config;
}

void validate(const Config& config) { validate_impl(config, {}); }

std::size_t estimate_memory_bytes(const Config& config) {
  double b = estimate_bytes(config);
  if (!(b < static_cast<double>(std::numeric_limits<std::size_t>::max()))) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(b);
}

std::size_t physical_memory_bytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
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
    out += (section.empty() ? "" : "  ") + f.key + ": ";
    switch (f.kind) {
      case Kind::Unsigned: out += std::to_string(*static_cast<std::size_t*>(f.ptr)); break;
      case Kind::Int: out += std::to_string(*static_cast<int*>(f.ptr)); break;
      case Kind::Double: out += exact(*static_cast<double*>(f.ptr)); break;
      case Kind::Bool: out += *static_cast<bool*>(f.ptr) ? "true" : "false"; break;
      case Kind::String: out += yaml_quoted(*static_cast<std::string*>(f.ptr)); break;
    }
    out += "\n";
  }
  return out;
}

bool operator==(const Config& a, const Config& b) {
  auto fa = fields(const_cast<Config&>(a)), fb = fields(const_cast<Config&>(b));
  for (std::size_t i = 0; i < fa.size(); ++i) {
    bool same = true;
    switch (fa[i].kind) {
      case Kind::Unsigned: same = *static_cast<std::size_t*>(fa[i].ptr) == *static_cast<std::size_t*>(fb[i].ptr); break;
      case Kind::Int: same = *static_cast<int*>(fa[i].ptr) == *static_cast<int*>(fb[i].ptr); break;
      case Kind::Double: same = *static_cast<double*>(fa[i].ptr) == *static_cast<double*>(fb[i].ptr); break;
      case Kind::Bool: same = *static_cast<bool*>(fa[i].ptr) == *static_cast<bool*>(fb[i].ptr); break;
      case Kind::String: same = *static_cast<std::string*>(fa[i].ptr) == *static_cast<std::string*>(fb[i].ptr); break;
    }
    if (!same) return false;
  }
  return true;
}

}  // namespace qkv::config
