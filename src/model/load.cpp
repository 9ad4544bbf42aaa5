#include "qkv/model/load.hpp"

#include <sstream>

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

LoadedModel load_model(const io::Checkpoint& c, const std::string& path, const std::vector<std::string>& overrides,
                       bool with_data) {
  for (auto& o : overrides)
    if (o.rfind("task.", 0) != 0)
      throw config::ConfigError("--set", 0, o, "only task.* keys can be changed when evaluating a checkpoint");
  LoadedModel l;
  l.path = path;
  l.cfg = config::parse_stored_config(c.config_yaml, path + ":/config", overrides);
  const std::optional<data::Tokenizer> tokenizer = stored_tokenizer(c, path);
  if (!with_data && tokenizer) {
    l.task = data::make_vocabulary_task(l.cfg.task, *tokenizer);
  } else {
    l.task = data::make_task(l.cfg.task, tokenizer ? &*tokenizer : nullptr);
    if (with_data) l.data = std::make_unique<data::Dataset>(l.task, l.cfg.seed, l.cfg.task.eval_size, l.cfg.task.train_size);
  }
  Generator gen(0);
  l.model = make_model(l.cfg, *l.task, gen);
  io::check_compatible(l.model->module().state_dict(), c.model, path);
  l.model->module().load_state_dict(c.model);
  l.model->module().eval();
  return l;
}

LoadedModel load_model(const std::string& path, const std::vector<std::string>& overrides, bool with_data) {
  return load_model(io::load_checkpoint(path), path, overrides, with_data);
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
      throw ValueError(what + ": with --ids, expected token ids in [0, " + std::to_string(V) +
                       ") separated by spaces, found '" + word + "'");
    ids.push_back(Index(v));
  }
  return ids;
}

}  // namespace qkv::model
