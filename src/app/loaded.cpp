#include "loaded.hpp"

#include <sstream>

#include "probe.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/train/evaluate.hpp"
#include "qkv/train/train_state.hpp"

namespace qkv::app {

Loaded load(const std::string& path, const std::vector<std::string>& overrides, bool with_data) {
  for (auto& o : overrides)
    if (o.rfind("task.", 0) != 0)
      throw config::ConfigError("--set", 0, o, "only task.* keys can be changed when evaluating a checkpoint");
  probe_checkpoint(path);
  io::Checkpoint c = io::load_checkpoint(path);
  Loaded l;
  l.cfg = config::parse_stored_config(c.config_yaml, path + ":/config", overrides);
  const std::optional<data::Tokenizer> tokenizer = train::stored_tokenizer(c, path);
  if (!with_data && tokenizer) {
    l.task = data::make_vocabulary_task(l.cfg.task, *tokenizer);
  } else {
    l.task = data::make_task(l.cfg.task, tokenizer ? &*tokenizer : nullptr);
    if (with_data) l.data = std::make_unique<data::Dataset>(l.task, l.cfg.seed, l.cfg.task.eval_size, l.cfg.task.train_size);
  }
  Generator gen(0);
  l.model = train::make_model(l.cfg, *l.task, gen);
  io::check_compatible(l.model->module().state_dict(), c.model, path);
  l.model->module().load_state_dict(c.model);
  l.model->module().eval();
  return l;
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

Loaded load_for(const std::string& path, const InputChoice& in) { return load(path, {}, !in.has_text); }

data::Batch input_batch(const Loaded& l, const InputChoice& in) {
  const data::Task& task = *l.task;
  if (!in.has_text) {
    const data::Batch& eval = l.data->eval_set();
    if (in.example >= eval.size())
      throw ValueError("--example " + std::to_string(in.example) + ": the held-out set has " + std::to_string(eval.size()) +
                       " examples (0.." + std::to_string(eval.size() - 1) + ")");
    return train::rows(eval, in.example, in.example + 1);
  }
  if (task.seq2seq())
    throw ValueError("--text: task " + task.name() +
                     " is sequence-to-sequence (a source and a target): choose a held-out example with --example N");
  std::vector<Index> ids;
  if (in.ids) {
    ids = parse_ids(in.text, task.input_vocab(), "--text");
  } else {
    const data::Tokenizer* t = task.tokenizer();
    if (!t)
      throw ValueError("--text: the model was trained on task " + task.name() +
                       ", which has token ids, not characters: give ids with --ids (e.g. --text '3 1 2' --ids) or use --example N");
    ids = t->encode(in.text, false, "--text");
  }
  const std::size_t T = task.input_length();
  if (ids.empty()) throw ValueError("--text: empty; give at least one token");
  if (ids.size() > T)
    throw ValueError("--text: " + std::to_string(ids.size()) + " tokens, more than the model's context of " +
                     std::to_string(T) + " (task.length)");
  data::Batch b;
  b.inputs = IndexArray::from_shape({1, ids.size()});
  b.targets = IndexArray::from_shape({1, ids.size()});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    b.inputs(0, i) = ids[i];
    b.targets(0, i) = task.next_token() && i + 1 < ids.size() ? ids[i + 1] : data::kIgnore;
  }
  b.decoder_inputs = IndexArray::from_shape({0});
  return b;
}

std::string describe_input(const InputChoice& in) {
  if (!in.has_text) return "held-out example " + std::to_string(in.example);
  return std::string(in.ids ? "tokens '" : "text '") + in.text + "'";
}

}  // namespace qkv::app
