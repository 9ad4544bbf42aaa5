#include "qkv/interp/path_patching.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "qkv/autograd/tape.hpp"
#include "qkv/interp/patching.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/answer.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "residual.hpp"

namespace qkv::interp {

std::string receiver_name(const PathReceiver& r) {
  return r.input == "logits" ? "logits" : std::to_string(r.layer) + "." + std::to_string(r.head) + "<" + r.input + ">";
}

PathReceiver parse_receiver(const std::string& text, const std::string& field) {
  if (text == "logits") return {0, 0, "logits"};
  std::size_t layer = 0, head = 0;
  char input = 0, close = 0;
  int used = 0;
  const bool angle = std::sscanf(text.c_str(), "%zu.%zu<%c%c%n", &layer, &head, &input, &close, &used) == 4 && close == '>';
  const bool dotted = !angle && std::sscanf(text.c_str(), "%zu.%zu.%c%n", &layer, &head, &input, &used) == 3;
  if ((!angle && !dotted) || std::size_t(used) != text.size() || (input != 'q' && input != 'k' && input != 'v'))
    field_error(field, "expected a receiver LAYER.HEAD<q|k|v> (or LAYER.HEAD.q|k|v), or logits", text);
  return {layer, head, std::string(1, input)};
}

std::string format_path_patch(const PathPatchResult& r, const data::Task& task) {
  std::string out = format_metric(task, r.position, r.answer, r.wrong, false, r.clean_metric, r.corrupt_metric);
  out += "share of the difference head " + head_name(r.sender) +
         "'s clean output restores through each receiver alone, every other path at the corrupted run's values:\n";
  char b[160];
  for (std::size_t i = 0; i < r.receivers.size(); ++i) {
    std::snprintf(b, sizeof b, "  %-10s %8.3f\n", receiver_name(r.receivers[i]).c_str(), r.restored[i]);
    out += b;
  }
  std::snprintf(b, sizeof b, "  %-10s %8.3f   (every head receiver at once)\n", "together", r.restored_all);
  out += b;
  return out + "cost: " + std::to_string(r.forward_passes) + " forward passes\n";
}

namespace {

// `to` with slice h of axis 1 replaced by `from`'s ((1, H, ...) arrays of one shape).
Array<float> with_head(const Array<float>& to, const Array<float>& from, std::size_t h) {
  Array<float> out = to;
  const std::size_t block = to.size() / to.shape()[1];
  std::copy(from.data() + h * block, from.data() + (h + 1) * block, out.data() + h * block);
  return out;
}

std::string input_point(const PathReceiver& r, std::size_t last) {
  return r.input == "logits" ? ResidualStack::at(last, "hook_resid_post") : ResidualStack::at(r.layer, "hook_" + r.input + "_input");
}

}  // namespace

PathPatchResult path_patch(model::LoadedModel& l, const PathPatchRequest& r) {
  model::TaskModel& model = *l.model;
  const ResidualStack stack = residual_stack(model, "path patching");
  const std::size_t L = stack.layers();
  if (r.sender.layer >= L || r.sender.head >= stack.heads(r.sender.layer))
    field_error("sender", "the model has " + std::to_string(L) + " layers of " + std::to_string(stack.heads(0)) + " heads",
                head_name(r.sender));
  std::vector<PathReceiver> receivers = r.receivers;
  if (receivers.empty()) {
    for (std::size_t layer = r.sender.layer + 1; layer < L; ++layer)
      for (std::size_t h = 0; h < stack.heads(layer); ++h)
        for (const char* which : {"q", "k", "v"}) receivers.push_back({layer, h, which});
    receivers.push_back({0, 0, "logits"});
  }
  for (std::size_t i = 0; i < receivers.size(); ++i) {
    const PathReceiver& x = receivers[i];
    const std::string at = "receivers[" + std::to_string(i) + "]";
    if (x.input == "logits") continue;
    if (x.input != "q" && x.input != "k" && x.input != "v")
      field_error(at, "expected the input q, k, v or logits", x.input);
    if (x.layer >= L || x.head >= stack.heads(x.layer)) field_error(at, "no such head in the model", receiver_name(x));
    if (x.layer <= r.sender.layer)
      field_error(at, "a receiver reads the sender's output: it must be in a layer after the sender's (" +
                          std::to_string(r.sender.layer) + ")", receiver_name(x));
  }
  PatchInputs in = patch_inputs(l, r.clean, r.corrupt, r.position, r.answer, r.wrong, r.ids);
  const data::Batch& clean = in.clean.row;
  const data::Batch& corrupt = in.corrupt.row;

  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(model.module());
  std::vector<std::string> writes;
  for (std::size_t layer = 0; layer < L; ++layer) {
    writes.push_back(ResidualStack::at(layer, "attn.hook_head_result"));
    if (stack.mlp(layer)) writes.push_back(ResidualStack::at(layer, "hook_mlp_out"));
  }
  // 1. Both runs.
  Array<float> clean_logits, corrupt_logits;
  const nn::ActivationCache<float> c = nn::run_with_cache(model.module(), [&] { clean_logits = model.logits(clean).value(); }, writes);
  const nn::ActivationCache<float> x = nn::run_with_cache(model.module(), [&] { corrupt_logits = model.logits(corrupt).value(); }, writes);
  const MetricTarget t = metric_target(*l.task, clean, corrupt, clean_logits, corrupt_logits, in.options);
  auto metric = [&](const Array<float>& z) {
    const std::size_t C = z.shape()[2];
    return double(z.data()[t.position * C + std::size_t(t.answer)]) - double(z.data()[t.position * C + std::size_t(t.wrong)]);
  };
  PathPatchResult out;
  out.sender = r.sender, out.position = t.position, out.answer = t.answer, out.wrong = t.wrong;
  out.clean_metric = metric(clean_logits), out.corrupt_metric = metric(corrupt_logits);
  out.receivers = receivers;
  out.forward_passes = 2;
  const double span = out.clean_metric - out.corrupt_metric;
  auto restored = [&](double m) { return span != 0 ? (m - out.corrupt_metric) / span : std::numeric_limits<double>::quiet_NaN(); };

  // 2. The corrupted run with the sender's result from the clean run and every other write
  // frozen at the corrupted run's: what each receiver reads then.
  nn::ActivationCache<float> heard;
  {
    nn::HookScope<float> scope(model.module());
    for (auto& name : writes) {
      const bool sender_layer = name == ResidualStack::at(r.sender.layer, "attn.hook_head_result");
      Array<float> frozen = sender_layer ? with_head(x[name], c[name], r.sender.head) : x[name];
      scope.add(name, [frozen](const Variable<float>&) { return Variable<float>(frozen); });
    }
    std::vector<std::string> inputs;
    for (auto& rec : receivers) inputs.push_back(input_point(rec, L - 1));
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    heard = nn::run_with_cache(model.module(), [&] { model.logits(corrupt); }, inputs);
    ++out.forward_passes;
  }
  // 3. The corrupted run with the receivers' inputs (one, or all) replaced by what they heard.
  auto patched = [&](const std::vector<PathReceiver>& set) {
    nn::HookScope<float> scope(model.module());
    for (const PathReceiver& rec : set) {
      const std::string point = input_point(rec, L - 1);
      const Array<float>& value = heard[point];
      if (rec.input == "logits")
        scope.add(point, [&value](const Variable<float>&) { return Variable<float>(value); });
      else
        scope.add(point, [&value, h = rec.head](const Variable<float>& v) { return Variable<float>(with_head(v.value(), value, h)); });
    }
    ++out.forward_passes;
    return restored(metric(model.logits(corrupt).value()));
  };
  for (const PathReceiver& rec : receivers) out.restored.push_back(patched({rec}));
  // Together: the heads' inputs. The logits read the whole final stream, which patching would
  // set for every path at once (the heads' changes included): they count together only alone.
  std::vector<PathReceiver> heads;
  std::size_t first = 0;
  for (std::size_t i = 0; i < receivers.size(); ++i)
    if (receivers[i].input != "logits") heads.push_back(receivers[i]), first = heads.size() == 1 ? i : first;
  if (heads.empty()) heads = receivers;
  out.restored_all = heads.size() == 1 ? out.restored[first] : patched(heads);
  return out;
}

std::string to_json(const PathPatchResult& r, const data::Task& task) {
  json::Writer w;
  w.open('{').key("sender").open('[').value(r.sender.layer).value(r.sender.head).close(']');
  w.member("position", r.position).member("answer", std::int64_t(r.answer)).member("wrong", std::int64_t(r.wrong))
      .member("answer_token", model::class_label(task, r.answer)).member("wrong_token", model::class_label(task, r.wrong))
      .member("clean", r.clean_metric).member("corrupt", r.corrupt_metric).key("receivers").open('[');
  for (std::size_t i = 0; i < r.receivers.size(); ++i) {
    const PathReceiver& x = r.receivers[i];
    w.open('{').member("name", receiver_name(x)).member("input", x.input);
    if (x.input != "logits") w.member("layer", x.layer).member("head", x.head);
    w.member("restored", r.restored[i]).close('}');
  }
  w.close(']').member("restored_all", r.restored_all).member("forward_passes", r.forward_passes).close('}');
  return w.take();
}

}  // namespace qkv::interp
