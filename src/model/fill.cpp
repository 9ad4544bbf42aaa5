#include "qkv/model/fill.hpp"

#include "qkv/autograd/tape.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/answer.hpp"

namespace qkv::model {

std::vector<Fill> fill_masks(TaskModel& model, const data::Task& task, const data::Batch& row, std::size_t k) {
  const Index mask = task.mask_token();
  if (mask < 0) throw ValueError("fill: the model was trained on task " + task.name() + " without masks (task.objective: causal)");
  if (row.size() != 1) throw ShapeError("fill_masks: expected one row, found " + shape_str(row.inputs.shape()));
  std::vector<std::size_t> positions;
  for (std::size_t t = 0; t < row.inputs.shape()[1]; ++t)
    if (row.inputs(0, t) == mask) positions.push_back(t);
  if (positions.empty()) throw ValueError("fill: the text holds no mask to fill");
  NoGradGuard no_grad;
  const bool was_training = model.module().is_training();
  model.module().eval();
  const Array<float> logits = model.logits(row).value();  // (1, T, V)
  if (was_training) model.module().train();
  const std::size_t V = logits.shape()[2];
  std::vector<Fill> out;
  for (std::size_t t : positions) out.push_back({t, top_k(logits.data() + t * V, V, k)});
  return out;
}

FillResult fill(LoadedModel& l, const FillRequest& r) {
  const data::Task& task = *l.task;
  if (!task.masked())
    field_error("model", l.path + " is a " + task.name() + " model trained without masks (task.objective: " +
                             data::name(l.cfg.task.objective) + "): fill needs a masked language model (task.objective: masked)");
  if (r.top_k == 0) field_error("top_k", "expected at least 1 candidate per mask");
  if (r.input.text && !r.input.mask_text.empty() && r.input.text->find(r.input.mask_text) == std::string::npos)
    field_error("input.text", "no " + r.input.mask_text + " in '" + *r.input.text + "': write each position to fill as " +
                                  r.input.mask_text + " (or change {input.mask_text})");
  data::Batch row;
  with_prefix("input.", [&] { row = input_row(l, r.input).row; });
  FillResult out;
  as_field("input", [&] { out.fills = fill_masks(*l.model, task, row, r.top_k); });
  const bool words = task.tokenizer() && task.tokenizer()->kind() == data::TokenizerKind::Word;
  std::size_t next = 0;
  for (std::size_t t = 0; t < row.inputs.shape()[1]; ++t) {
    const Index id = row.inputs(0, t);
    if (id == task.pad_token()) continue;
    out.tokens.push_back(class_label(task, id));
    const bool filled = next < out.fills.size() && out.fills[next].position == t;
    out.most_likely += task.token_label(filled ? out.fills[next++].top.front().id : id) + (words ? " " : "");
  }
  return out;
}

std::string to_json(const FillResult& r, const data::Task& task) {
  json::Writer w;
  w.open('{').key("tokens").open('[');
  for (auto& t : r.tokens) w.value(t);
  w.close(']').key("fills").open('[');
  for (auto& f : r.fills) {
    w.open('{').member("position", f.position).key("top").open('[');
    for (auto& c : f.top) w.open('{').member("id", std::int64_t(c.id)).member("token", class_label(task, c.id)).member("p", c.p).close('}');
    w.close(']').close('}');
  }
  w.close(']').member("most_likely", r.most_likely).close('}');
  return w.take();
}

}  // namespace qkv::model
