#include "loaded.hpp"

#include "probe.hpp"
#include "runtime.hpp"

#include <cstdio>

namespace qkv::app {

Loaded load(const std::string& path, const std::vector<std::string>& overrides, bool with_data) {
  io::check_input_file(path, "checkpoint");
  probe_checkpoint(path);
  const io::Checkpoint c = io::load_checkpoint(path);
  if (with_data) {
    // The held-out sets a stored config (or a --set) asks for must fit in memory.
    const config::Config cfg = config::parse_stored_config(c.config_yaml, path + ":/config", overrides);
    const std::size_t need = config::estimate_data_bytes(cfg), have = physical_memory_bytes();
    if (have > 0 && need > have) {
      char msg[200];
      std::snprintf(msg, sizeof msg,
                    "its held-out sets would need about %.3g GB (task.eval_size %zu, task.length %zu), more than the "
                    "%.3g GB of memory available",
                    double(need) / 1e9, cfg.task.eval_size, cfg.task.length, double(have) / 1e9);
      throw config::ConfigError(path + ":/config", 0, "task.eval_size", msg);
    }
  }
  return model::load_model(c, path, overrides, with_data);
}

Loaded load_for(const std::string& path, const InputChoice& in) { return load(path, {}, !in.has_text); }

data::Batch input_batch(const Loaded& l, const InputChoice& in) {
  if (!in.has_text) {
    const data::Batch& eval = l.data->eval_set();
    if (in.example >= eval.size())
      throw ValueError("--example " + std::to_string(in.example) + ": the held-out set has " + std::to_string(eval.size()) +
                       " examples (0.." + std::to_string(eval.size() - 1) + ")");
    return data::rows(eval, in.example, in.example + 1);
  }
  if (in.ids) return data::ids_row(*l.task, model::parse_ids(in.text, l.task->input_vocab(), "--text"), "--text");
  return l.task->text_row(in.text, "--text", in.mask_text);
}

std::string percent(double x) {
  if (!(x >= 0)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f%%", 100 * x);
  return b;
}

std::string describe_input(const InputChoice& in) {
  if (!in.has_text) return "held-out example " + std::to_string(in.example);
  return std::string(in.ids ? "tokens '" : "text '") + in.text + "'";
}

}  // namespace qkv::app
