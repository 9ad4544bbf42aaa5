#include "qkv/interp/patching.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "json.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/model/answer.hpp"
#include "qkv/nn/activation_cache.hpp"

namespace qkv::interp {
namespace {

std::string tokens(std::size_t n) { return std::to_string(n) + (n == 1 ? " token" : " tokens"); }

// Rows must line up position by position: patching puts the clean run's activation at query i
// into the corrupted run's query i.
void check_rows(const data::Batch& clean, const data::Batch& corrupt) {
  if (clean.size() != 1 || corrupt.size() != 1)
    field_error("corrupt", "expected one row each, found " + std::to_string(clean.size()) + " clean and " +
                               std::to_string(corrupt.size()) + " corrupted rows");
  const std::size_t a = clean.inputs.shape()[1], b = corrupt.inputs.shape()[1];
  if (a != b)
    field_error("corrupt", "patching needs a clean and a corrupted input of the same length (each head is patched position "
                           "by position): the clean input has " + tokens(a) + ", the corrupted " + tokens(b));
  const bool dec_a = clean.decoder_inputs.dimension() == 2, dec_b = corrupt.decoder_inputs.dimension() == 2;
  if (dec_a != dec_b || (dec_a && clean.decoder_inputs.shape()[1] != corrupt.decoder_inputs.shape()[1]))
    field_error("corrupt", "patching needs decoder inputs of the same length in both runs: found " +
                               shape_str(clean.decoder_inputs.shape()) + " (clean) and " +
                               shape_str(corrupt.decoder_inputs.shape()) + " (corrupted)");
}

// The metric of a run, and the softmax probabilities of both classes at p (NaN with a custom metric).
struct Measure {
  double diff = 0, p_answer = NAN, p_wrong = NAN;
};

std::string label(const data::Task& task, Index id) { return model::class_label(task, id); }

const std::vector<std::string>& patch_points() {
  static const std::vector<std::string> points = {"hook_z", "hook_q", "hook_k", "hook_v", "hook_pattern"};
  return points;
}

// The position the metric reads (PatchingOptions::position's rule).
std::size_t default_position(const data::Task& task, const data::Batch& clean, const data::Batch& corrupt, std::size_t T) {
  const Index mask = task.mask_token();
  for (const data::Batch* row : {&clean, &corrupt})
    for (std::size_t t = 0; mask >= 0 && t < row->inputs.shape()[1]; ++t)
      if (row->inputs(0, t) == mask) return t;
  return T - 1;
}

}  // namespace

PatchingResult patch_heads(model::TaskModel& model, const data::Task& task, const data::Batch& clean,
                           const data::Batch& corrupt, const PatchingOptions& options) {
  check_rows(clean, corrupt);
  const auto& points = patch_points();
  if (std::find(points.begin(), points.end(), options.point) == points.end())
    field_error("point", "'" + options.point + "' is not a per-head hook point" + did_you_mean(options.point, points) +
                             " (expected one of " + join_names(points) + ")");
  const auto layers = model::attention_layers(model);
  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(model.module());

  Array<float> clean_logits;
  nn::ActivationCache<float> cache =
      nn::run_with_cache(model.module(), [&] { clean_logits = model.logits(clean).value(); }, {"*." + options.point});
  const Array<float> corrupt_logits = model.logits(corrupt).value();

  PatchingResult r;
  r.clean_tokens = token_labels(task, clean.inputs, 0);
  r.corrupt_tokens = token_labels(task, corrupt.inputs, 0);
  r.point = options.point;
  r.custom_metric = bool(options.metric);
  const MetricTarget target = metric_target(task, clean, corrupt, clean_logits, corrupt_logits, options);
  r.position = target.position, r.answer = target.answer, r.wrong = target.wrong;
  const std::size_t C = clean_logits.shape()[2];
  auto measure = [&](const Array<float>& logits) {
    Measure m;
    if (options.metric) {
      m.diff = options.metric(logits);
      return m;
    }
    const float* z = logits.data() + r.position * C;
    const double lse = model::log_sum_exp(z, C);
    m.diff = double(z[r.answer]) - double(z[r.wrong]);
    m.p_answer = model::probability(z, r.answer, lse);
    m.p_wrong = model::probability(z, r.wrong, lse);
    return m;
  };
  const Measure mc = measure(clean_logits), mx = measure(corrupt_logits);
  r.clean_diff = mc.diff, r.corrupt_diff = mx.diff;
  r.clean_p_answer = mc.p_answer, r.corrupt_p_answer = mx.p_answer;
  const double span = r.clean_diff - r.corrupt_diff;

  for (const auto& [name, layer] : layers) {
    r.layers.push_back(name);
    const std::string at = name + "." + options.point;
    const Array<float>& clean_act = cache[at];  // (1, H, ...)
    const std::size_t H = clean_act.shape()[1], block = clean_act.size() / H;
    std::vector<HeadPatch> row;
    for (std::size_t h = 0; h < H; ++h) {
      nn::HookScope<float> scope(model.module());
      scope.add(at, [&clean_act, &at, h, block](const Variable<float>& x) {
        if (x.value().shape() != clean_act.shape())
          throw ShapeError("patching: " + at + " is " + shape_str(x.value().shape()) + " in the corrupted run, " +
                           shape_str(clean_act.shape()) + " in the clean one");
        Array<float> patched = x.value();
        std::copy(clean_act.data() + h * block, clean_act.data() + (h + 1) * block, patched.data() + h * block);
        return Variable<float>(std::move(patched));
      });
      const Measure m = measure(model.logits(corrupt).value());
      HeadPatch p;
      p.logit_diff = m.diff;
      p.restored = span != 0 ? (m.diff - r.corrupt_diff) / span : std::numeric_limits<double>::quiet_NaN();
      p.p_answer = m.p_answer, p.p_wrong = m.p_wrong;
      row.push_back(p);
    }
    r.heads.push_back(std::move(row));
  }
  return r;
}

MetricTarget metric_target(const data::Task& task, const data::Batch& clean, const data::Batch& corrupt,
                           const Array<float>& clean_logits, const Array<float>& corrupt_logits,
                           const PatchingOptions& options) {
  const std::size_t T = clean_logits.shape()[1], C = clean_logits.shape()[2];
  MetricTarget r;
  r.position = options.position ? *options.position : default_position(task, clean, corrupt, T);
  if (r.position >= T)
    field_error("position", "the model's output has " + std::to_string(T) + " positions (0.." + std::to_string(T - 1) + ")",
                std::to_string(r.position));
  auto check_class = [&](Index c, const char* what) {
    if (c < 0 || std::size_t(c) >= C)
      field_error(what, "the model's output has " + std::to_string(C) + " classes (0.." + std::to_string(C - 1) + ")",
                  std::to_string(c));
  };
  r.answer = options.answer ? *options.answer : model::argmax(clean_logits.data() + r.position * C, C);
  r.wrong = options.wrong ? *options.wrong : model::argmax(corrupt_logits.data() + r.position * C, C);
  check_class(r.answer, "answer");
  check_class(r.wrong, "wrong");
  if (!options.metric && r.answer == r.wrong)
    field_error(options.answer && options.wrong ? "wrong" : options.answer ? "answer" : "wrong",
                std::string(options.answer && options.wrong ? "{answer} and {wrong} are"
                            : options.answer || options.wrong ? "the given token and the other run's most likely one are"
                                                              : "the clean and the corrupted input's most likely tokens are") +
                    " the same, '" + label(task, r.answer) + "' at position " + std::to_string(r.position) +
                    ": the logit difference would be 0 in every run; name two different tokens as the {answer} and the "
                    "{wrong} one");
  return r;
}

PatchInputs patch_inputs(const model::LoadedModel& l, const model::InputRequest& clean, const model::InputRequest& corrupt,
                         const std::optional<std::size_t>& position, const std::optional<std::string>& answer,
                         const std::optional<std::string>& wrong, bool ids) {
  PatchInputs in;
  with_prefix("clean.", [&] { in.clean = model::input_row(l, clean); });
  with_prefix("corrupt.", [&] { in.corrupt = model::input_row(l, corrupt); });
  check_rows(in.clean.row, in.corrupt.row);
  in.options.position = position;
  if (answer) in.options.answer = model::token_class(*l.task, *answer, ids, "answer");
  if (wrong) in.options.wrong = model::token_class(*l.task, *wrong, ids, "wrong");
  return in;
}

PatchingResult patch(model::LoadedModel& l, const PatchRequest& q) {
  PatchInputs in = patch_inputs(l, q.clean, q.corrupt, q.position, q.answer, q.wrong, q.ids);
  in.options.point = q.point;
  in.options.metric = q.metric;
  PatchingResult r = patch_heads(*l.model, *l.task, in.clean.row, in.corrupt.row, in.options);
  r.clean_note = in.clean.note, r.corrupt_note = in.corrupt.note;
  return r;
}

std::string format_metric(const data::Task& task, std::size_t position, Index answer, Index wrong, bool custom,
                          double clean, double corrupt) {
  char b[320];
  if (custom)
    std::snprintf(b, sizeof b, "metric: a custom metric of the logits\n");
  else
    std::snprintf(b, sizeof b, "metric: logit('%s') - logit('%s') at position %zu\n", label(task, answer).c_str(),
                  label(task, wrong).c_str(), position);
  std::string out = b;
  std::snprintf(b, sizeof b, "  clean run      %+9.4f\n  corrupted run  %+9.4f\n", clean, corrupt);
  return out + b;
}

std::string format_patching(const PatchingResult& r, const data::Task& task) {
  std::ostringstream out;
  char b[256];
  std::snprintf(b, sizeof b, "metric: logit('%s') - logit('%s') at position %zu\n", label(task, r.answer).c_str(),
                label(task, r.wrong).c_str(), r.position);
  out << b;
  std::snprintf(b, sizeof b, "  clean run      %+9.4f   (p('%s') = %.4f)\n  corrupted run  %+9.4f   (p('%s') = %.4f)\n",
                r.clean_diff, label(task, r.answer).c_str(), r.clean_p_answer, r.corrupt_diff,
                label(task, r.answer).c_str(), r.corrupt_p_answer);
  out << b;
  if (r.clean_diff == r.corrupt_diff) {
    out << "the two runs give the same logit difference: there is nothing to restore (every share is '-')\n";
  }
  out << "share of the difference restored by patching each head's " +
             (r.point == "hook_z" ? std::string("output (hook_z") : std::string("slice of ") + r.point) +
             ", every position) from the clean\nrun into the corrupted run: (patched - corrupted) / (clean - corrupted); "
             "1 = all of it, 0 = none\n";
  std::size_t H = 0;
  for (auto& row : r.heads) H = std::max(H, row.size());
  std::snprintf(b, sizeof b, "%-18s", "layer");
  out << b;
  for (std::size_t h = 0; h < H; ++h) {
    std::snprintf(b, sizeof b, " %8s", ("head " + std::to_string(h)).c_str());
    out << b;
  }
  out << "\n";
  for (std::size_t l = 0; l < r.heads.size(); ++l) {
    std::snprintf(b, sizeof b, "%-18s", (std::to_string(l) + " " + r.layers[l]).c_str());
    out << b;
    for (const HeadPatch& p : r.heads[l]) {
      if (std::isnan(p.restored))
        std::snprintf(b, sizeof b, " %8s", "-");
      else
        std::snprintf(b, sizeof b, " %8.3f", p.restored);
      out << b;
    }
    out << "\n";
  }
  return out.str();
}

std::string patching_json(const PatchingResult& r, const data::Task& task) {
  std::ostringstream out;
  out << "{\"clean_tokens\":" << json_array(r.clean_tokens) << ",\"corrupt_tokens\":" << json_array(r.corrupt_tokens)
      << ",\"clean_note\":" << json_string(r.clean_note) << ",\"corrupt_note\":" << json_string(r.corrupt_note)
      << ",\"point\":" << json_string(r.point) << ",\"metric\":" << json_string(r.custom_metric ? "custom" : "logit_diff")
      << ",\"position\":" << r.position << ",\"answer\":" << r.answer << ",\"wrong\":" << r.wrong
      << ",\"answer_token\":" << json_string(label(task, r.answer)) << ",\"wrong_token\":" << json_string(label(task, r.wrong))
      << ",\"clean\":" << json_number(r.clean_diff) << ",\"corrupt\":" << json_number(r.corrupt_diff)
      << ",\"clean_p_answer\":" << json_number(r.clean_p_answer) << ",\"corrupt_p_answer\":" << json_number(r.corrupt_p_answer)
      << ",\"layers\":[";
  for (std::size_t l = 0; l < r.heads.size(); ++l) {
    out << (l ? "," : "") << "{\"name\":" << json_string(r.layers[l]) << ",\"heads\":[";
    for (std::size_t h = 0; h < r.heads[l].size(); ++h) {
      const HeadPatch& p = r.heads[l][h];
      out << (h ? "," : "") << "{\"logit_diff\":" << json_number(p.logit_diff) << ",\"restored\":" << json_number(p.restored)
          << ",\"p_answer\":" << json_number(p.p_answer) << ",\"p_wrong\":" << json_number(p.p_wrong) << "}";
    }
    out << "]}";
  }
  out << "]}\n";
  return out.str();
}

}  // namespace qkv::interp
