#include "constructed.hpp"

#include <doctest/doctest.h>

#include <algorithm>

namespace qkv::test {
namespace {

Array<float>& parameter(StateDict<float>& sd, const std::string& name) {
  for (auto& [n, a] : sd)
    if (n == name) return a;
  throw ValueError("constructed model: no parameter " + name);
}

}  // namespace

Constructed constructed_decoder(double c, double b) {
  constexpr std::size_t T = Constructed::T, V = Constructed::V, C = Constructed::C, D = C / 2;
  Constructed m;
  m.cfg = config::parse_config("{}", "constructed.yaml",
                               {"model.arch=decoder", "model.d_model=40", "model.heads=2", "model.layers=1",
                                "model.attn_only=true", "model.positional=learned", "model.dropout=0",
                                "task.name=induction", "task.vocab=8", "task.length=16", "task.eval_size=32"});
  m.task = data::make_task(m.cfg.task);
  Generator gen(0);
  m.model = model::make_model(m.cfg, *m.task, gen);
  StateDict<float> sd = m.model->module().state_dict();
  auto param = [&](const std::string& name) -> Array<float>& { return parameter(sd, name); };
  for (auto& [n, a] : sd)
    if (n.find("norm") == std::string::npos) std::fill(a.begin(), a.end(), 0.0f);  // LayerNorms stay (1, 0)
  Array<float>& tok = param("tok_emb.weight");  // (V, C)
  for (std::size_t v = 0; v < V; ++v) tok(v, 2 * T + v) = 1;
  Array<float>& pos = param("pos.weight");  // (T, C)
  for (std::size_t i = 0; i < T; ++i) pos(i, i) = 1, pos(i, T + i) = -1;
  Array<float>& wq = param("blocks.0.attn.w_q.weight");  // (2D, C): rows [0, D) head 0, [D, 2D) head 1
  Array<float>& wk = param("blocks.0.attn.w_k.weight");
  Array<float>& wv = param("blocks.0.attn.w_v.weight");
  Array<float>& wo = param("blocks.0.attn.w_o.weight");  // (C, 2D)
  for (std::size_t m2 = 0; m2 < T; ++m2) {
    wq(m2, m2) = float(c);                // head 0: q = c n[0:T)
    if (m2 >= 1) wk(m2, m2 - 1) = 1;      // head 0: k[m] = n[m-1]
    wq(D, m2) = float(c);                 // head 1: q[0] = c sum n[0:T)
    wk(D + m2, m2) = 1;                   // head 1: k = n[0:T)
  }
  for (std::size_t t = 0; t < V; ++t) {
    wv(t, 2 * T + t) = 1;                 // head 0: v = token part
    wv(D + t, 2 * T + t) = 1;             // head 1 too (but w_o drops it)
    wo(2 * T + t, t) = float(b);          // head 0's value onto the token dimensions
  }
  Array<float>& head = param("head.weight");  // (V, C)
  for (std::size_t t = 0; t < V; ++t) head(t, 2 * T + t) = 1;
  m.model->module().load_state_dict(sd);
  m.model->module().eval();
  return m;
}

Constructed constructed_role_encoder(double c) {
  Constructed m;
  m.cfg = config::parse_config("{}", "constructed.yaml",
                               {"model.arch=encoder", "model.d_model=256", "model.heads=2", "model.layers=1",
                                "model.attn_only=true", "model.positional=learned", "model.dropout=0", "task.name=grammar",
                                "task.language=zh", "task.objective=masked", "task.length=32", "task.eval_size=32"});
  m.task = data::make_task(m.cfg.task);
  Generator gen(0);
  m.model = model::make_model(m.cfg, *m.task, gen);
  StateDict<float> sd = m.model->module().state_dict();
  auto param = [&](const std::string& name) -> Array<float>& { return parameter(sd, name); };
  for (auto& [n, a] : sd)
    if (n.find("norm") == std::string::npos) std::fill(a.begin(), a.end(), 0.0f);
  Array<float>& tok = param("tok_emb.weight");  // (V + 2, 256): one-hot
  const data::Tokenizer& t = *m.task->tokenizer();
  auto id = [&](const char* ch) { return std::size_t(t.encode(ch, false, "constructed").front()); };
  REQUIRE(t.size() + 2 <= 256);
  for (std::size_t v = 0; v < tok.shape()[0]; ++v) tok(v, v) = 1;
  auto dims_of = [&](std::initializer_list<const char*> chars) {
    std::vector<std::size_t> d;
    for (const char* ch : chars) d.push_back(id(ch));
    return d;
  };
  const auto verbs = dims_of({"打", "吃", "追", "逐", "爱", "喜", "欢"}), objects = dims_of({"花", "瓶", "苹", "果", "老", "鼠", "鱼"}),
             subjects = dims_of({"他", "我", "猫"});
  Array<float>& wq = param("blocks.0.attn.w_q.weight");  // (256, 256): rows [0, 128) head 0, [128, 256) head 1
  Array<float>& wk = param("blocks.0.attn.w_k.weight");
  for (std::size_t v : verbs) wq(0, v) = float(c), wq(128, v) = float(c);
  for (std::size_t o : objects) wk(0, o) = 1;
  for (std::size_t s : subjects) wk(128, s) = 1;
  m.model->module().load_state_dict(sd);
  m.model->module().eval();
  return m;
}

data::Batch previous_token_batch(std::size_t B, std::size_t T, std::size_t V, std::uint64_t seed) {
  data::Batch b;
  b.inputs = IndexArray::from_shape({B, T});
  b.targets = IndexArray::from_shape({B, T});
  b.decoder_inputs = IndexArray::from_shape({0});
  Generator gen(seed);
  for (std::size_t r = 0; r < B; ++r)
    for (std::size_t t = 0; t < T; ++t) {
      b.inputs(r, t) = Index(gen.randint(V));
      b.targets(r, t) = t ? b.inputs(r, t - 1) : data::kIgnore;
    }
  return b;
}

}  // namespace qkv::test
