#include "qkv/interp/patching.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "json.hpp"
#include "qkv/autograd/tape.hpp"
#include "qkv/nn/activation_cache.hpp"

namespace qkv::interp {
namespace {

std::string tokens(std::size_t n) { return std::to_string(n) + (n == 1 ? " token" : " tokens"); }

// Rows must line up position by position: patching puts the clean run's z at query i into the
// corrupted run's query i.
void check_rows(const data::Batch& clean, const data::Batch& corrupt) {
  if (clean.size() != 1 || corrupt.size() != 1)
    throw ValueError("patching: expected one row each, found " + std::to_string(clean.size()) + " clean and " +
                     std::to_string(corrupt.size()) + " corrupted rows");
  const std::size_t a = clean.inputs.shape()[1], b = corrupt.inputs.shape()[1];
  if (a != b)
    throw ValueError("patching needs a clean and a corrupted input of the same length (each head's output is "
                     "patched position by position): the clean input has " + tokens(a) + ", the corrupted " + tokens(b));
  const bool dec_a = clean.decoder_inputs.dimension() == 2, dec_b = corrupt.decoder_inputs.dimension() == 2;
  if (dec_a != dec_b || (dec_a && clean.decoder_inputs.shape()[1] != corrupt.decoder_inputs.shape()[1]))
    throw ValueError("patching needs decoder inputs of the same length in both runs: found " +
                     shape_str(clean.decoder_inputs.shape()) + " (clean) and " + shape_str(corrupt.decoder_inputs.shape()) +
                     " (corrupted)");
}

// logits[p, answer] - logits[p, wrong] of a (1, T, classes) array, and the softmax probabilities
// of both classes at p.
struct Measure {
  double diff = 0, p_answer = 0, p_wrong = 0;
};
Measure measure(const Array<float>& logits, std::size_t p, Index answer, Index wrong) {
  const std::size_t C = logits.shape()[2];
  const float* z = logits.data() + p * C;
  const double top = *std::max_element(z, z + C);
  double sum = 0;
  for (std::size_t c = 0; c < C; ++c) sum += std::exp(double(z[c]) - top);
  Measure m;
  m.diff = double(z[answer]) - double(z[wrong]);
  m.p_answer = std::exp(double(z[answer]) - top) / sum;
  m.p_wrong = std::exp(double(z[wrong]) - top) / sum;
  return m;
}

Index argmax_at(const Array<float>& logits, std::size_t p) {
  const std::size_t C = logits.shape()[2];
  const float* z = logits.data() + p * C;
  return Index(std::max_element(z, z + C) - z);  // the first maximum
}

std::string label(const data::Task& task, Index id) {
  if (id == task.mask_token()) return data::kMaskText;
  return task.token_label(id);
}

}  // namespace

PatchingResult patch_heads(model::TaskModel& model, const data::Task& task, const data::Batch& clean,
                           const data::Batch& corrupt, const PatchingOptions& options) {
  check_rows(clean, corrupt);
  const auto layers = model::attention_layers(model);
  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(model.module());

  Array<float> clean_logits;
  nn::ActivationCache<float> cache =
      nn::run_with_cache(model.module(), [&] { clean_logits = model.logits(clean).value(); }, {"*.hook_z"});
  const Array<float> corrupt_logits = model.logits(corrupt).value();
  const std::size_t T = clean_logits.shape()[1], C = clean_logits.shape()[2];

  PatchingResult r;
  if (options.position) {
    r.position = *options.position;
  } else {
    r.position = T - 1;
    const Index mask = task.mask_token();
    for (std::size_t t = 0; mask >= 0 && t < clean.inputs.shape()[1]; ++t)
      if (clean.inputs(0, t) == mask) {
        r.position = t;
        break;
      }
  }
  if (r.position >= T)
    throw ValueError("--position " + std::to_string(r.position) + ": the model's output has " + std::to_string(T) +
                     " positions (0.." + std::to_string(T - 1) + ")");
  auto check_class = [&](Index c, const char* what) {
    if (c < 0 || std::size_t(c) >= C)
      throw ValueError(std::string(what) + " " + std::to_string(c) + ": the model's output has " + std::to_string(C) +
                       " classes (0.." + std::to_string(C - 1) + ")");
  };
  r.answer = options.answer ? *options.answer : argmax_at(clean_logits, r.position);
  r.wrong = options.wrong ? *options.wrong : argmax_at(corrupt_logits, r.position);
  check_class(r.answer, "--answer");
  check_class(r.wrong, "--wrong");
  if (r.answer == r.wrong)
    throw ValueError(std::string(options.answer && options.wrong ? "--answer and --wrong are"
                                 : options.answer || options.wrong ? "the given token and the other run's most likely one are"
                                                                   : "the clean and the corrupted input's most likely tokens are") +
                     " the same, '" + label(task, r.answer) + "' at position " + std::to_string(r.position) +
                     ": the logit difference would be 0 in every run; name two different tokens as the answer and the wrong one "
                     "(--answer, --wrong)");

  const Measure mc = measure(clean_logits, r.position, r.answer, r.wrong);
  const Measure mx = measure(corrupt_logits, r.position, r.answer, r.wrong);
  r.clean_diff = mc.diff, r.corrupt_diff = mx.diff;
  r.clean_p_answer = mc.p_answer, r.corrupt_p_answer = mx.p_answer;
  const double span = r.clean_diff - r.corrupt_diff;

  for (const auto& [name, layer] : layers) {
    r.layers.push_back(name);
    const Array<float>& z_clean = cache[name + ".hook_z"];  // (1, H, Tq, Dv)
    const std::size_t H = z_clean.shape()[1], block = z_clean.size() / H;
    std::vector<HeadPatch> row;
    for (std::size_t h = 0; h < H; ++h) {
      nn::HookScope<float> scope(model.module());
      scope.add(name + ".hook_z", [&z_clean, h, block](const Variable<float>& z) {
        if (z.value().shape() != z_clean.shape())
          throw ShapeError("patching: hook_z is " + shape_str(z.value().shape()) + " in the corrupted run, " +
                           shape_str(z_clean.shape()) + " in the clean one");
        Array<float> patched = z.value();
        std::copy(z_clean.data() + h * block, z_clean.data() + (h + 1) * block, patched.data() + h * block);
        return Variable<float>(std::move(patched));
      });
      const Measure m = measure(model.logits(corrupt).value(), r.position, r.answer, r.wrong);
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
  out << "share of the difference restored by patching each head's output (hook_z, every position) from the clean\n"
         "run into the corrupted run: (patched - corrupted) / (clean - corrupted); 1 = all of it, 0 = none\n";
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
  out << "{\"position\":" << r.position << ",\"answer\":" << r.answer << ",\"wrong\":" << r.wrong
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
