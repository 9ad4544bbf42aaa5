#include "qkv/interp/roles.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "qkv/autograd/tape.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::interp {
namespace {

// The word position S-op `sop` holds at (row b, position t) of the residual (B, T, C).
std::string read_sop(const Array<float>& resid, const std::vector<std::string>& labels, const std::string& sop,
                     std::size_t b, std::size_t t) {
  const std::size_t T = resid.shape()[1], C = resid.shape()[2];
  return model::sop_value(resid.data() + (b * T + t) * C, labels, sop);
}

}  // namespace

RoleScores score_roles(model::LoadedModel& model, const model::CompiledInfo& info, const data::Grammar& grammar,
                       std::size_t sentences, std::uint64_t seed, const std::vector<HeadRef>& removed) {
  for (const char* sop : {"who", "what"})
    if (std::none_of(info.residual.begin(), info.residual.end(),
                     [&](const std::string& l) { return l.rfind(std::string(sop) + ":", 0) == 0; }))
      throw ValueError(model.path + ": the compiled program writes no S-op '" + sop +
                       "' (score_roles reads the word positions its 'who' and 'what' heads write)");
  const data::Task& task = *model.task;
  const std::size_t T = task.input_length();  // BOS and max_len tokens
  const std::vector<std::string>& relations = grammar.relation_names();
  const auto subject = std::find(relations.begin(), relations.end(), "verb->subject") - relations.begin();
  const auto object = std::find(relations.begin(), relations.end(), "verb->object") - relations.begin();
  const auto result = std::find(relations.begin(), relations.end(), "verb->result") - relations.begin();
  if (std::size_t(subject) == relations.size() || std::size_t(object) == relations.size())
    throw ValueError("grammar " + grammar.name() + ": score_roles needs the relations verb->subject and verb->object");
  const bool has_result = std::any_of(info.residual.begin(), info.residual.end(),
                                      [](const std::string& l) { return l.rfind("result:", 0) == 0; }) &&
                          std::size_t(result) < relations.size();

  // Draw the sentences; those with at most max_len words become rows (BOS, the words, padding).
  Generator gen(seed);
  std::vector<data::GrammarSentence> kept;
  RoleScores scores;
  while (kept.size() < sentences) {
    data::GrammarSentence s = grammar.random_sentence(gen);
    if (s.words.size() + 1 > T) {
      if (++scores.too_long > 100 * (sentences + 10))  // a program too short for the grammar: no hang
        throw ValueError(model.path + ": " + std::to_string(scores.too_long) + " sentences drawn, " +
                         std::to_string(kept.size()) + " of at most the program's max_len " + std::to_string(T - 1) +
                         " words; expected " + std::to_string(sentences));
      continue;
    }
    kept.push_back(std::move(s));
  }
  data::Batch batch;
  batch.inputs = IndexArray::from_shape({kept.size(), T});
  std::fill(batch.inputs.begin(), batch.inputs.end(), task.pad_token());
  batch.targets = IndexArray::from_shape({kept.size(), T});
  batch.decoder_inputs = IndexArray::from_shape({0});
  for (std::size_t b = 0; b < kept.size(); ++b) {
    std::string text;
    for (auto& w : kept[b].words) text += (text.empty() ? "" : " ") + w;
    const data::Batch row = task.text_row(text, "sentence '" + kept[b].text + "'");
    std::copy(row.inputs.begin(), row.inputs.end(), batch.inputs.data() + b * T);
  }

  const std::string last = "blocks." + std::to_string(model.cfg.model.layers - 1) + ".hook_resid_post";
  Array<float> resid;
  {
    NoGradGuard no_grad;
    HeadAblation ablation(*model.model, removed, AblationMode::Zero);
    resid = nn::run_with_cache(model.model->module(), [&] { model.model->logits(batch); }, {last})[last];
  }
  std::map<std::string, RoleCounts> by;
  for (std::size_t b = 0; b < kept.size(); ++b) {
    const data::GrammarSentence& s = kept[b];
    RoleCounts& c = by[s.construction];
    for (std::size_t w = 0; w < s.words.size(); ++w) {
      if (const Index gold = s.partners[std::size_t(subject)][w]; gold >= 0) {
        ++c.who;
        c.who_right += read_sop(resid, info.residual, "who", b, 1 + w) == std::to_string(gold);
      }
      if (const Index gold = s.partners[std::size_t(object)][w]; gold >= 0) {
        ++c.what;
        c.what_right += read_sop(resid, info.residual, "what", b, 1 + w) == std::to_string(gold);
      }
      if (const Index gold = has_result ? s.partners[std::size_t(result)][w] : -1; gold >= 0) {
        ++c.result;
        c.result_right += read_sop(resid, info.residual, "result", b, 1 + w) == std::to_string(gold);
      }
    }
  }
  for (auto& [name, c] : by) {
    scores.constructions.emplace_back(name, c);
    scores.all.who += c.who, scores.all.who_right += c.who_right;
    scores.all.what += c.what, scores.all.what_right += c.what_right;
    scores.all.result += c.result, scores.all.result_right += c.result_right;
  }
  scores.sentences = kept.size();
  return scores;
}

std::string format_role_scores(const RoleScores& scores) {
  auto cell = [](std::size_t right, std::size_t n) {
    char buf[64];
    if (n == 0) return std::string("-");
    std::snprintf(buf, sizeof buf, "%zu / %zu (%.1f%%)", right, n, 100.0 * double(right) / double(n));
    return std::string(buf);
  };
  const bool result = scores.all.result > 0;
  std::string out = std::string("| construction | who (verb->subject) | what (verb->object) |") +
                    (result ? " result (verb->result) |\n|---|---:|---:|---:|\n" : "\n|---|---:|---:|\n");
  auto row = [&](const std::string& name, const RoleCounts& c) {
    out += "| " + name + " | " + cell(c.who_right, c.who) + " | " + cell(c.what_right, c.what) + " |" +
           (result ? " " + cell(c.result_right, c.result) + " |" : "") + "\n";
  };
  for (auto& [name, c] : scores.constructions) row(name, c);
  row("**all**", scores.all);
  return out;
}

}  // namespace qkv::interp
