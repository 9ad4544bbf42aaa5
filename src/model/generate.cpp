#include "qkv/model/generate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "qkv/autograd/tape.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/answer.hpp"

namespace qkv::model {

void SamplingOptions::validate() const {
  OptionChecker c("SamplingOptions");
  c.require(temperature >= 0 && std::isfinite(temperature), {"temperature"},
            "expected 0 (greedy) or a positive temperature, found " + number_text(temperature));
  c.in_range(top_p, "top_p", 0, true, 1, false);
}

void GenerateOptions::validate() const {
  OptionChecker c("GenerateOptions");
  c.require(max_tokens <= 1000000, {"max_tokens"}, "expected at most 1000000 new tokens, found " + std::to_string(max_tokens));
  c.nested("sampling.", [&] { sampling.validate(); });
}

Index sample_token(const float* logits, std::size_t V, const SamplingOptions& o, Generator& gen) {
  if (o.temperature == 0) return argmax(logits, V);
  const double top = *std::max_element(logits, logits + V);
  std::vector<double> p(V);
  for (std::size_t i = 0; i < V; ++i) p[i] = std::exp((double(logits[i]) - top) / o.temperature);
  // Most likely first (ties: lower id first), keeping only what top-k and top-p allow.
  const std::vector<Index> order = ranked_classes(logits, V, o.top_k ? o.top_k : V);
  const std::size_t k = order.size();
  double total = 0;
  for (std::size_t i = 0; i < k; ++i) total += p[order[i]];
  std::size_t keep = 0;
  double mass = 0;
  while (keep < k && (keep == 0 || mass < o.top_p * total)) mass += p[order[keep++]];
  double u = gen.uniform() * mass;
  for (std::size_t i = 0; i < keep; ++i) {
    u -= p[order[i]];
    if (u < 0) return Index(order[i]);
  }
  return Index(order[keep - 1]);
}

namespace {

// The logits after tokens[0, n) for one prompt, the window and (optionally) the cache kept
// across calls as generate() moves along.
class Stepper {
 public:
  Stepper(const nn::DecoderModel<float>& model, bool use_cache)
      : model_(model), context_(model.options().max_len), use_cache_(use_cache), cache_(model.make_cache()) {}

  std::vector<float> next(const std::vector<Index>& tokens) {
    const std::size_t n = tokens.size();
    if (n - start_ > context_) {  // the window jumps: keep its last half
      start_ = n - (context_ + 1) / 2;
      fed_ = start_;
      cache_.clear();
    }
    const std::size_t from = use_cache_ ? fed_ : start_;
    IndexArray ids = IndexArray::from_shape({1, n - from});
    std::copy(tokens.begin() + long(from), tokens.end(), ids.data());
    const Array<float> y = use_cache_ ? model_.forward(ids, cache_).value() : model_.forward(ids).value();
    fed_ = n;
    const std::size_t V = y.shape()[2];
    const float* last = y.data() + (n - from - 1) * V;
    return std::vector<float>(last, last + V);
  }

 private:
  const nn::DecoderModel<float>& model_;
  std::size_t context_, start_ = 0, fed_ = 0;
  bool use_cache_;
  nn::DecoderCache<float> cache_;
};

}  // namespace

std::vector<Index> generate(const nn::DecoderModel<float>& model, const std::vector<Index>& prompt,
                            const GenerateOptions& o, const std::function<void(Index)>& on_token) {
  o.validate();
  if (prompt.empty()) throw ValueError("generate: the prompt is empty (give at least one token)");
  NoGradGuard no_grad;
  auto& m = const_cast<nn::DecoderModel<float>&>(model);
  const bool was_training = m.is_training();
  m.eval();
  Generator gen(o.seed);
  Stepper step(model, o.cache);
  std::vector<Index> tokens = prompt, out;
  for (std::size_t i = 0; i < o.max_tokens; ++i) {
    const std::vector<float> logits = step.next(tokens);
    const Index t = sample_token(logits.data(), logits.size(), o.sampling, gen);
    tokens.push_back(t);
    out.push_back(t);
    if (on_token) on_token(t);
  }
  if (was_training) m.train();
  return out;
}

std::vector<std::vector<float>> next_token_logits(const nn::DecoderModel<float>& model, const std::vector<Index>& tokens,
                                                  std::size_t from, bool cache) {
  NoGradGuard no_grad;
  Stepper step(model, cache);
  std::vector<std::vector<float>> rows;
  for (std::size_t n = std::max<std::size_t>(from, 1); n <= tokens.size(); ++n)
    rows.push_back(step.next(std::vector<Index>(tokens.begin(), tokens.begin() + long(n))));
  return rows;
}

GenerateResult generate(LoadedModel& l, const GenerateRequest& r, const std::function<void(Index)>& on_token) {
  const nn::DecoderModel<float>* decoder = l.model->decoder();
  if (!decoder)
    field_error("model", l.path + " is an " + nn::arch_names().name(l.cfg.model.arch) +
                             " model: generate continues text with a decoder-only language model (model.arch: decoder)");
  try {
    r.options.validate();
  } catch (const OptionError& e) {
    throw OptionError("request", {"options." + e.fields.front()},
                      e.render([](const std::string& f) { return "{options." + f + "}"; }));
  }
  if (r.text.has_value() == r.ids.has_value()) field_error(r.text ? "ids" : "text", "give exactly one of {text} and {ids}");
  const data::Task& task = *l.task;
  GenerateResult out;
  if (r.ids) {
    for (Index id : *r.ids)
      if (id < 0 || std::size_t(id) >= task.input_vocab())
        field_error("ids", "token id " + std::to_string(id) + " outside the vocabulary [0, " +
                               std::to_string(task.input_vocab()) + ")");
    out.prompt = *r.ids;
  } else {
    if (!task.tokenizer())
      field_error("text", l.path + " was trained on the " + task.name() +
                              " task and has no vocabulary (not a text model): give the prompt as token ids");
    as_field("text", [&] { out.prompt = task.tokenizer()->encode(*r.text, false, "text"); });
  }
  if (out.prompt.empty()) field_error(r.text ? "text" : "ids", "empty; give at least one character (or token id)");
  out.tokens = generate(*decoder, out.prompt, r.options, on_token);
  if (task.tokenizer()) out.text = task.tokenizer()->decode(out.tokens.data(), out.tokens.size());
  return out;
}

std::string to_json(const GenerateResult& r) {
  json::Writer w;
  w.open('{').key("prompt").open('[');
  for (Index id : r.prompt) w.value(std::int64_t(id));
  w.close(']').key("tokens").open('[');
  for (Index id : r.tokens) w.value(std::int64_t(id));
  w.close(']').member("text", r.text).close('}');
  return w.take();
}

}  // namespace qkv::model
