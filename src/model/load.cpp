#include "qkv/model/load.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "qkv/io/files.hpp"

namespace qkv::model {

void save_vocabulary(const data::Task& task, io::Checkpoint& c) {
  if (const data::Tokenizer* t = task.tokenizer()) {
    c.tokenizer = data::name(t->kind());
    c.vocab = t->to_vocab();
  }
}

std::optional<data::Tokenizer> stored_tokenizer(const io::Checkpoint& c, const std::string& path) {
  if (c.tokenizer.empty()) return std::nullopt;
  try {
    return data::Tokenizer::from_vocab(data::parse_tokenizer(c.tokenizer), c.vocab);
  } catch (const ValueError& e) {
    throw io::IoError(path + ": /data: " + e.what());
  }
}

void check_vocabulary(const data::Task& task, const io::Checkpoint& c, const std::string& path) {
  const data::Tokenizer* t = task.tokenizer();
  if (t && (c.tokenizer != data::name(t->kind()) || c.vocab != t->to_vocab()))
    throw ValueError("--resume " + path + ": the corpus gives another vocabulary than the checkpoint's (" +
                     std::to_string(t->to_vocab().size()) + " vs " + std::to_string(c.vocab.size()) +
                     " characters): task.path must name the same text");
}

namespace {

// A parameter's shape alone, as state_dict_diff reads entries.
struct ShapeOf {
  Shape s;
  const Shape& shape() const { return s; }
};

}  // namespace

std::size_t model_bytes(const config::Config& cfg, const data::Task& task) {
  std::size_t n = 0;
  {
    nn::MetaGuard meta;
    Generator gen(0);
    for (auto& [name, shape] : make_model(cfg, task, gen)->module().named_parameter_shapes()) n += numel(shape);
  }
  if (cfg.model.positional == nn::Positional::Sinusoidal) {
    const std::size_t T = std::max({cfg.model.max_len, task.input_length(), task.seq2seq() ? task.target_length() : 0});
    n += T * cfg.model.d_model * (task.seq2seq() ? 2 : 1);
  }
  return n * sizeof(float);
}

namespace {
void check_budget(const std::string& path, const config::Config& cfg, std::size_t need, std::size_t budget, bool data) {
  if (!budget || need <= budget) return;
  char msg[240];
  std::snprintf(msg, sizeof msg,
                "the model%s would need about %.3g GB (task.length %zu, task.eval_size %zu), more than the %.3g GB of "
                "memory available",
                data ? " and its held-out sets" : "", double(need) / 1e9, cfg.task.length, cfg.task.eval_size,
                double(budget) / 1e9);
  throw config::ConfigError(path + ":/config", 0, data ? "task.eval_size" : "task.length", msg);
}
}  // namespace

LoadedModel with_data(const LoadedModel& l, std::size_t memory_budget) {
  check_budget(l.path, l.cfg, config::estimate_data_bytes(l.cfg), memory_budget, true);
  LoadedModel d;
  d.path = l.path, d.cfg = l.cfg, d.model = l.model, d.compiled = l.compiled;
  d.task = data::make_task(l.cfg.task, l.task->tokenizer());
  d.data = std::make_shared<data::Dataset>(d.task, d.cfg.seed, d.cfg.task.eval_size, d.cfg.task.train_size);
  return d;
}

LoadedModel load_model(const io::Checkpoint& c, const std::string& path, const LoadOptions& options) {
  for (auto& o : options.task_overrides)
    if (o.rfind("task.", 0) != 0)
      throw config::ConfigError("--set", 0, o, "only task.* keys can be changed when evaluating a checkpoint");
  LoadedModel l;
  l.path = path;
  l.cfg = config::parse_stored_config(c.config_yaml, path + ":/config", options.task_overrides);
  const std::optional<data::Tokenizer> tokenizer = stored_tokenizer(c, path);
  l.task = !options.with_data && tokenizer ? data::make_vocabulary_task(l.cfg.task, *tokenizer)
                                           : data::make_task(l.cfg.task, tokenizer ? &*tokenizer : nullptr);
  // Shapes first, from a model that allocates nothing: a stored config that does not describe
  // the stored weights is refused before its (perhaps huge) tables exist.
  {
    nn::MetaGuard meta;
    Generator gen(0);
    std::vector<std::pair<std::string, ShapeOf>> expected;
    for (auto& [name, shape] : make_model(l.cfg, *l.task, gen)->module().named_parameter_shapes())
      expected.emplace_back(name, ShapeOf{shape});
    const std::string problems = state_dict_diff(expected, c.model, "the model has", "the checkpoint");
    if (!problems.empty())
      throw ValueError(path + ": the checkpoint's model does not fit this model (was it written with another config?):" +
                       problems);
  }
  check_budget(path, l.cfg, model_bytes(l.cfg, *l.task) + (options.with_data ? config::estimate_data_bytes(l.cfg) : 0),
               options.memory_budget, options.with_data);
  if (options.with_data) l.data = std::make_unique<data::Dataset>(l.task, l.cfg.seed, l.cfg.task.eval_size, l.cfg.task.train_size);
  Generator gen(0);
  l.model = make_model(l.cfg, *l.task, gen);
  l.model->module().load_state_dict(c.model);
  l.model->module().eval();
  if (auto info = compiled_info(c, path)) l.compiled = std::make_shared<const CompiledInfo>(std::move(*info));
  return l;
}

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  io::check_input_file(path, "checkpoint");
  return load_model(io::load_checkpoint(path), path, options);
}

LoadedModel load_model(const io::Checkpoint& c, const std::string& path, const std::vector<std::string>& overrides,
                       bool with_data) {
  return load_model(c, path, LoadOptions{overrides, with_data, 0});
}

LoadedModel load_model(const std::string& path, const std::vector<std::string>& overrides, bool with_data) {
  return load_model(path, LoadOptions{overrides, with_data, 0});
}

std::vector<Index> parse_ids(const std::string& text, std::size_t V, const std::string& what) {
  std::vector<Index> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || std::size_t(v) >= V)
      throw ValueError(what + ": expected token ids in [0, " + std::to_string(V) +
                       ") separated by spaces, found '" + word + "'");
    ids.push_back(Index(v));
  }
  return ids;
}

}  // namespace qkv::model
