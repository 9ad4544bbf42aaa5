// The who/what model (programs/who_what.rasp): its "who" head writes each verb's agent and its
// "what" head the patient, into their own subspaces of the residual stream; removing the "who"
// head takes away exactly the agents (every "who" reads None), the patients stay right, and the
// reverse for the "what" head.
#include <doctest/doctest.h>

#include "qkv/compile/compile.hpp"
#include "qkv/data/program_task.hpp"
#include "qkv/interp/ablation.hpp"
#include "qkv/model/load.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/rasp/evaluate.hpp"
#include "test_util.hpp"

namespace qkv {
namespace {

// Every input of the domain with 3 or 4 tokens, as token ids.
std::vector<std::vector<std::size_t>> sentences(const rasp::Program& p) {
  std::vector<std::vector<std::size_t>> out;
  for (std::size_t n = 3; n <= 4; ++n) {
    std::vector<std::size_t> t(n, 0);
    for (;;) {
      out.push_back(t);
      std::size_t i = 0;
      while (i < n && ++t[i] == p.vocab.size()) t[i++] = 0;
      if (i == n) break;
    }
  }
  return out;
}

// The value an S-op's one-hot holds at (row, position) of the final residual (B, T, C): its label,
// or "None" when every dimension is below 1/2.
std::string read_sop(const Array<float>& resid, const std::vector<std::string>& labels, const std::string& sop,
                     std::size_t b, std::size_t t) {
  const std::size_t T = resid.shape()[1], C = resid.shape()[2];
  std::string best = "None";
  float top = 0.5f;
  for (std::size_t c = 0; c < C; ++c)
    if (labels[c].rfind(sop + ":", 0) == 0 && resid.data()[(b * T + t) * C + c] > top)
      top = resid.data()[(b * T + t) * C + c], best = labels[c].substr(sop.size() + 1);
  return best;
}

}  // namespace

TEST_CASE("who_what: removing the who head breaks exactly the agents, the what head exactly the patients") {
  const rasp::Program p = rasp::load_program(std::string(QKV_SOURCE_DIR) + "/programs/who_what.rasp");
  const compile::CompiledModel c = compile::compile_program(p);
  model::LoadedModel l = model::load_model(c.checkpoint, "who_what", {}, false);
  interp::HeadRef who, what;
  for (auto& op : c.info.ops) {
    if (op.sop == "who") who = {op.layer, op.head};
    if (op.sop == "what") what = {op.layer, op.head};
  }
  CHECK(interp::head_name(who) == "3.0");
  CHECK(interp::head_name(what) == "3.1");

  // Every input of 3 or 4 tokens, a row each (BOS, the tokens, padding).
  const auto all = sentences(p);
  const data::ProgramLayout layout = data::program_layout(p);
  const std::size_t B = all.size(), T = layout.length;
  data::Batch batch;
  batch.inputs = IndexArray::from_shape({B, T});
  batch.targets = IndexArray::from_shape({B, T});
  batch.decoder_inputs = IndexArray::from_shape({0});
  for (std::size_t b = 0; b < B; ++b) data::program_row(p, all[b], batch.inputs.data() + b * T, batch.targets.data() + b * T);
  const std::string last = "blocks." + std::to_string(c.config.model.layers - 1) + ".hook_resid_post";
  auto resid_without = [&](const std::vector<interp::HeadRef>& removed) {
    NoGradGuard no_grad;
    interp::HeadAblation ablation(*l.model, removed, interp::AblationMode::Zero);
    return nn::run_with_cache(l.model->module(), [&] { l.model->logits(batch); }, {last})[last];
  };
  const Array<float> intact = resid_without({}), no_who = resid_without({who}), no_what = resid_without({what});

  std::size_t agents = 0, patients = 0, wrong = 0;
  const std::size_t who_node = p.find("who"), what_node = p.find("what");
  for (std::size_t b = 0; b < B; ++b) {
    const rasp::Evaluation e = rasp::evaluate(p, all[b]);
    for (std::size_t i = 0; i < all[b].size(); ++i) {
      const std::size_t t = 1 + i;
      const rasp::Cell& a = e[who_node][i];
      const rasp::Cell& o = e[what_node][i];
      const std::string agent = a.some() ? a.value.label() : "None", patient = o.some() ? o.value.label() : "None";
      agents += a.some(), patients += o.some();
      // Intact: both read right. Without "who": no agent anywhere, every patient right; and back.
      wrong += read_sop(intact, c.info.residual, "who", b, t) != agent;
      wrong += read_sop(intact, c.info.residual, "what", b, t) != patient;
      wrong += read_sop(no_who, c.info.residual, "who", b, t) != "None";
      wrong += read_sop(no_who, c.info.residual, "what", b, t) != patient;
      wrong += read_sop(no_what, c.info.residual, "who", b, t) != agent;
      wrong += read_sop(no_what, c.info.residual, "what", b, t) != "None";
    }
  }
  CHECK(agents > 500);
  CHECK(patients > 500);
  CHECK(wrong == 0);
}

}  // namespace qkv
