#include "qkv/interp/lens.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "qkv/autograd/tape.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/answer.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/ops/matmul.hpp"
#include "residual.hpp"

namespace qkv::interp {
namespace {

constexpr std::size_t kMaxTopK = 50;

// Row p of a (1, T, C) or (1, H, T, C) array's head h, in double.
std::vector<double> row(const Array<float>& a, std::size_t p, std::size_t h = 0) {
  const std::size_t C = a.shape().back(), T = a.shape()[a.dimension() - 2];
  const float* x = a.data() + (h * T + p) * C;
  return std::vector<double>(x, x + C);
}

}  // namespace

LensResult logit_lens(model::LoadedModel& l, const LensRequest& r) {
  if (r.top_k < 1 || r.top_k > kMaxTopK)
    field_error("top_k", "expected a whole number in [1, " + std::to_string(kMaxTopK) + "]", std::to_string(r.top_k));
  model::TaskModel& model = *l.model;
  const data::Task& task = *l.task;
  const ResidualStack stack = residual_stack(model, "the logit lens");
  model::InputRow in;
  with_prefix("input.", [&] { in = model::input_row(l, r.input); });
  const std::size_t L = stack.layers();
  std::vector<std::string> points = {ResidualStack::at(0, "hook_resid_pre")};
  for (std::size_t b = 0; b < L; ++b) {
    points.push_back(ResidualStack::at(b, "hook_resid_post"));
    points.push_back(ResidualStack::at(b, "attn.hook_head_result"));
    if (stack.mlp(b)) points.push_back(ResidualStack::at(b, "hook_mlp_out"));
  }
  NoGradGuard no_grad;
  nn::EvalGuard<float> eval(model.module());
  Array<float> logits;
  const nn::ActivationCache<float> c = nn::run_with_cache(model.module(), [&] { logits = model.logits(in.row).value(); }, points);
  const std::size_t T = logits.shape()[1], C = logits.shape()[2];
  LensResult out;
  out.tokens = token_labels(task, in.row.inputs, 0);
  // The position and the two tokens: the first mask, else the last position; the model's two
  // most likely classes there.
  out.position = T - 1;
  for (std::size_t t = 0; task.mask_token() >= 0 && t < T; ++t)
    if (in.row.inputs(0, t) == task.mask_token()) {
      out.position = t;
      break;
    }
  if (r.position) {
    if (*r.position >= T)
      field_error("position", "the model's output has " + std::to_string(T) + " positions (0.." + std::to_string(T - 1) + ")",
                  std::to_string(*r.position));
    out.position = *r.position;
  }
  const std::vector<Index> ranked = model::ranked_classes(logits.data() + out.position * C, C, 2);
  out.answer = r.answer ? model::token_class(task, *r.answer, r.ids, "answer") : ranked[0];
  out.wrong = r.wrong ? model::token_class(task, *r.wrong, r.ids, "wrong") : ranked.size() > 1 ? ranked[1] : ranked[0];

  // The lens: the output layer (after the final norm, where there is one) on every stage.
  auto read = [&](const Array<float>& resid) {
    Variable<float> h(resid);
    if (stack.norm) h = stack.norm->forward(h);
    return (stack.head ? stack.head->forward(h) : linear(h, stack.tied->weight, Variable<float>())).value();
  };
  for (std::size_t s = 0; s <= L; ++s) {
    const Array<float> z = read(c[s == 0 ? points[0] : ResidualStack::at(s - 1, "hook_resid_post")]);
    out.stages.push_back(s == 0 ? "embed" : "blocks." + std::to_string(s - 1));
    std::vector<std::vector<model::ClassProbability>> per_t;
    for (std::size_t t = 0; t < T; ++t) per_t.push_back(model::top_k(z.data() + t * C, C, r.top_k));
    out.top.push_back(std::move(per_t));
    const float* zp = z.data() + out.position * C;
    out.stage_diff.push_back(double(zp[out.answer]) - double(zp[out.wrong]));
    out.stage_p_answer.push_back(model::probability(zp, out.answer, model::log_sum_exp(zp, C)));
  }
  out.logit_diff = double(logits.data()[out.position * C + std::size_t(out.answer)]) -
                   double(logits.data()[out.position * C + std::size_t(out.wrong)]);

  // Direct logit attribution: every write through the final norm frozen at the final stream's scale.
  out.dla = stack.norm_first || (!stack.norm && !(*stack.blocks)[0].norm1);
  if (!out.dla) return out;
  const Variable<float>& W = stack.head ? stack.head->weight : stack.tied->weight;  // (classes, C)
  const std::size_t D = W.dim(1);
  std::vector<double> direction(D), gamma(D, 1.0), beta(D, 0.0);
  for (std::size_t d = 0; d < D; ++d)
    direction[d] = double(W.data()[std::size_t(out.answer) * D + d]) - double(W.data()[std::size_t(out.wrong) * D + d]);
  double sigma = 1;
  if (stack.norm) {
    const std::vector<double> final = row(c[ResidualStack::at(L - 1, "hook_resid_post")], out.position);
    double mean = 0, var = 0;
    for (double x : final) mean += x / double(D);
    for (double x : final) var += (x - mean) * (x - mean) / double(D);
    sigma = std::sqrt(var + stack.norm->options().eps);
    for (std::size_t d = 0; d < D; ++d) gamma[d] = stack.norm->weight.data()[d], beta[d] = stack.norm->bias.data()[d];
  }
  auto contribution = [&](const std::vector<double>& x) {
    double mean = 0, s = 0;
    if (stack.norm)
      for (double v : x) mean += v / double(D);
    for (std::size_t d = 0; d < D; ++d) s += gamma[d] * (x[d] - mean) / sigma * direction[d];
    return s;
  };
  out.contributions.emplace_back("embed", contribution(row(c[points[0]], out.position)));
  for (std::size_t b = 0; b < L; ++b) {
    const Array<float>& res = c[ResidualStack::at(b, "attn.hook_head_result")];
    std::vector<double> heads;
    for (std::size_t h = 0; h < stack.heads(b); ++h) {
      heads.push_back(contribution(row(res, out.position, h)));
      out.contributions.emplace_back("a" + std::to_string(b) + ".h" + std::to_string(h), heads.back());
    }
    out.heads.push_back(heads);
    const Variable<float>& bo = (*stack.blocks)[b].attn->w_o->bias;
    if (bo.defined()) out.contributions.emplace_back("a" + std::to_string(b) + ".b", contribution(std::vector<double>(bo.data(), bo.data() + D)));
    if (stack.mlp(b)) out.contributions.emplace_back("m" + std::to_string(b), contribution(row(c[ResidualStack::at(b, "hook_mlp_out")], out.position)));
  }
  if (stack.norm) {
    double s = 0;
    for (std::size_t d = 0; d < D; ++d) s += beta[d] * direction[d];
    out.contributions.emplace_back("norm.b", s);
  }
  if (stack.head && stack.head->bias.defined())
    out.contributions.emplace_back("head.b", double(stack.head->bias.data()[out.answer]) - double(stack.head->bias.data()[out.wrong]));
  return out;
}

std::string format_lens(const LensResult& r, const data::Task& task, std::size_t contributions) {
  std::ostringstream out;
  const std::string answer = model::class_label(task, r.answer), wrong = model::class_label(task, r.wrong);
  out << "logit lens: each stage's residual stream read by the final norm and the output layer; the most likely "
         "token per position (p = " << r.position << " in brackets), and logit('" << answer << "') - logit('" << wrong
      << "') at p\n";
  char b[256];
  std::snprintf(b, sizeof b, "%-10s", "stage");
  out << b;
  for (std::size_t t = 0; t < r.tokens.size(); ++t) {
    std::snprintf(b, sizeof b, t == r.position ? " [%s]" : " %s", r.tokens[t].c_str());
    out << b;
  }
  out << "   diff at p\n";
  for (std::size_t s = 0; s < r.stages.size(); ++s) {
    std::snprintf(b, sizeof b, "%-10s", r.stages[s].c_str());
    out << b;
    for (std::size_t t = 0; t < r.top[s].size(); ++t) {
      const auto& best = r.top[s][t].front();
      std::snprintf(b, sizeof b, t == r.position ? " [%s %.2f]" : " %s %.2f", model::class_label(task, best.id).c_str(), best.p);
      out << b;
    }
    std::snprintf(b, sizeof b, "   %+.3f\n", r.stage_diff[s]);
    out << b;
  }
  if (!r.dla) {
    out << "direct logit attribution: none (a post-LN model has no linear path from a write to the logits)\n";
    return out.str();
  }
  std::vector<const std::pair<std::string, double>*> order;
  for (auto& c : r.contributions) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return std::abs(a->second) > std::abs(b->second); });
  const std::size_t n = std::min(contributions, order.size());
  out << "direct logit attribution at p: the " << n << " of " << r.contributions.size()
      << " writes with the largest share of logit('" << answer << "') - logit('" << wrong << "') = ";
  std::snprintf(b, sizeof b, "%+.4f\n", r.logit_diff);
  out << b;
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "  %-8s %+9.4f\n", order[i]->first.c_str(), order[i]->second);
    out << b;
  }
  return out.str();
}

std::string to_json(const LensResult& r, const data::Task& task) {
  json::Writer w;
  w.open('{').key("tokens").open('[');
  for (auto& t : r.tokens) w.value(t);
  w.close(']').key("stages").open('[');
  for (auto& s : r.stages) w.value(s);
  w.close(']').key("top").open('[');
  for (auto& stage : r.top) {
    w.open('[');
    for (auto& at : stage) {
      w.open('[');
      for (auto& c : at) w.open('{').member("id", std::int64_t(c.id)).member("token", model::class_label(task, c.id)).member("p", c.p).close('}');
      w.close(']');
    }
    w.close(']');
  }
  w.close(']').member("position", r.position).member("answer", std::int64_t(r.answer)).member("wrong", std::int64_t(r.wrong))
      .member("answer_token", model::class_label(task, r.answer)).member("wrong_token", model::class_label(task, r.wrong));
  w.key("stage_diff").open('[');
  for (double x : r.stage_diff) w.value(x);
  w.close(']').key("stage_p_answer").open('[');
  for (double x : r.stage_p_answer) w.value(x);
  w.close(']').member("dla", r.dla).key("contributions").open('[');
  for (auto& [name, v] : r.contributions) w.open('{').member("name", name).member("value", v).close('}');
  w.close(']').key("heads").open('[');
  for (auto& layer : r.heads) {
    w.open('[');
    for (double x : layer) w.value(x);
    w.close(']');
  }
  w.close(']').member("logit_diff", r.logit_diff).close('}');
  return w.take();
}

}  // namespace qkv::interp
