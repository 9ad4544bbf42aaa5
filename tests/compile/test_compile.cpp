// Compiled programs: every shipped program's model gives the reference interpreter's output on
// every input of its domain, the weights are what docs/compile.md derives, and the circuit and
// the stored labels describe them.
#include <doctest/doctest.h>

#include <cmath>

#include "qkv/compile/compile.hpp"
#include "qkv/data/program_task.hpp"
#include "qkv/model/load.hpp"
#include "test_util.hpp"

namespace qkv {
namespace {

rasp::Program shipped(const std::string& name) {
  return rasp::load_program(std::string(QKV_SOURCE_DIR) + "/programs/" + name + ".rasp");
}

// The model as `qkv eval` rebuilds it: config, task and weights back from the checkpoint.
model::LoadedModel reload(const compile::CompiledModel& c) { return model::load_model(c.checkpoint, "compiled", {}, false); }

// Inputs checked per program: every input of each shipped program's domain; a sample of them under
// the sanitizers, where a forward pass is some 30 times slower.
#ifdef QKV_SANITIZE
constexpr std::size_t kLimit = 3000;
#else
constexpr std::size_t kLimit = 100000;
#endif

// The sizes and counts docs/compile.md's table of shipped programs states.
struct Expected {
  const char* program;
  std::size_t layers, heads, d_model, d_ff;  // d_ff 0: attention only
  std::size_t inputs, positions;
};

}  // namespace

TEST_CASE("compile: every shipped program's model gives its program's output on every input of the domain") {
  const std::vector<Expected> programs = {
      {"reverse", 3, 1, 36, 42, 5460, 30948},         {"sort", 3, 1, 49, 25, 3905, 18555},
      {"histogram", 1, 1, 24, 17, 87380, 669924},     {"induction", 2, 1, 22, 0, 87380, 244288},
      {"frac_prevs", 2, 1, 26, 25, 1092, 6015},       {"who_what", 5, 2, 153, 343, 19607, 65646},
  };
  for (const Expected& e : programs) {
    CAPTURE(e.program);
    const rasp::Program p = shipped(e.program);
    const compile::CompiledModel c = compile::compile_program(p);
    CHECK(c.config.model.layers == e.layers);
    CHECK(c.config.model.attn.num_heads == e.heads);
    CHECK(c.config.model.d_model == e.d_model);
    CHECK(c.config.model.d_model == c.info.residual.size());
    CHECK(c.config.model.attn_only == (e.d_ff == 0));
    if (e.d_ff) CHECK(c.config.model.ff.hidden == e.d_ff);
    model::LoadedModel l = reload(c);
    const compile::CheckResult r = compile::check_model(*l.model, p, kLimit);
    CHECK(r.domain == e.inputs);
    if (kLimit >= e.inputs) {
      CHECK(r.exhaustive);
      CHECK(r.inputs == e.inputs);
      CHECK(r.positions == e.positions);
    }
    CHECK(r.positions > 0);
    INFO(r.first_error);
    CHECK(r.correct == r.positions);
  }
}

TEST_CASE("compile: who_what_zh, over grammar v2's 191 words, gives its program's output on random inputs") {
  const rasp::Program p = shipped("who_what_zh");
  const compile::CompiledModel c = compile::compile_program(p);
  CHECK(c.config.model.layers == 10);
  CHECK(c.config.model.attn.num_heads == 4);
  CHECK(c.config.model.d_model == 1014);
  CHECK(c.config.model.ff.hidden == 1581);
  CHECK(p.vocab.size() == 191);
  model::LoadedModel l = reload(c);
  const compile::CheckResult r = compile::check_model(*l.model, p, kLimit / 50);
  CHECK_FALSE(r.exhaustive);
  CHECK(r.inputs == kLimit / 50);
  CHECK(r.positions > 0);
  INFO(r.first_error);
  CHECK(r.correct == r.positions);
}

TEST_CASE("compile: induction is a previous-token head then an induction head, in an attention-only decoder") {
  const compile::CompiledModel c = compile::compile_program(shipped("induction"));
  CHECK(c.config.model.arch == nn::Arch::Decoder);
  CHECK(c.config.model.attn_only);
  CHECK(c.config.model.norm == nn::Norm::None);
  REQUIRE(c.info.ops.size() == 2);
  CHECK(c.info.ops[0].component == "0.0");
  CHECK(c.info.ops[0].sop == "prev_token");
  CHECK(c.info.ops[1].component == "1.0");
  CHECK(c.info.ops[1].sop == "induction");
  auto has = [&](const char* from, const char* to, const char* port, const char* sop) {
    for (auto& e : c.info.edges)
      if (e.from == from && e.to == to && e.port == port && e.sop == sop) return true;
    return false;
  };
  CHECK(has("embed", "0.0", "q", "indices"));  // prev_index = indices - 1, folded into W_Q
  CHECK(has("embed", "0.0", "k", "indices"));
  CHECK(has("embed", "0.0", "v", "tokens"));
  CHECK(has("0.0", "1.0", "k", "prev_token"));  // K-composition
  CHECK(has("embed", "1.0", "q", "tokens"));
  CHECK(has("embed", "1.0", "v", "tokens"));
  CHECK(has("1.0", "output", "out", "induction"));
  CHECK(c.info.edges.size() == 7);
  CHECK(c.circuit_json.find("\"format\": \"qkv-circuit\"") != std::string::npos);
  CHECK(c.circuit_json.find("{\"from\": \"0.0\", \"to\": \"1.0\", \"port\": \"k\", \"sop\": \"prev_token\"}") != std::string::npos);
}

TEST_CASE("compile: a head's weights are the one-hot bilinear form of its predicate plus half a BOS term") {
  // histogram: one head, keys tokens one-hot, queries the same value (EQ), BOS always selected (selector_width).
  const rasp::Program p = shipped("histogram");
  const compile::CompiledModel c = compile::compile_program(p);
  const auto& res = c.info.residual;
  auto dim = [&](const std::string& label) {
    const auto it = std::find(res.begin(), res.end(), label);
    REQUIRE(it != res.end());
    return std::size_t(it - res.begin());
  };
  auto weight = [&](const std::string& name) -> const Array<float>& {
    for (auto& [n, a] : c.checkpoint.model)
      if (n == name) return a;
    FAIL("no " << name);
    throw;
  };
  const Array<float>& wq = weight("blocks.0.attn.w_q.weight");
  const Array<float>& wk = weight("blocks.0.attn.w_k.weight");
  // q . k of residual vectors (a position holds its one-hots and one; BOS holds bos and one):
  // a query of token a against a key of token a, of token b, and BOS: 1, 0 and 1.
  auto score = [&](const std::string& query, const std::string& key) {
    double s = 0;
    for (std::size_t d = 0; d < wq.shape()[0]; ++d)
      s += (wq(d, dim(query)) + wq(d, dim("one"))) * (wk(d, dim(key)) + wk(d, dim("one")));
    return s;
  };
  CHECK(score("tokens:a", "tokens:a") == doctest::Approx(1));
  CHECK(score("tokens:a", "tokens:b") == doctest::Approx(0));
  CHECK(score("tokens:a", "bos") == doctest::Approx(1));
  CHECK(c.config.model.attn.scale.value_or(0) == 100);
  CHECK(dim("histogram.bos_weight") < dim("histogram:0"));
}

TEST_CASE("compile: the histogram compiled by hand in docs/compile.md has the weights the page derives") {
  const rasp::Program p =
      rasp::parse_program("vocab a b\nmax_len 2\nhist = selector_width(select(tokens, tokens, EQ))\noutput hist\n");
  const compile::CompiledModel c = compile::compile_program(p);
  CHECK(c.info.residual == std::vector<std::string>{"one", "bos", "tokens:a", "tokens:b", "indices:0", "indices:1",
                                                    "hist.bos_weight", "hist:0", "hist:1", "hist:2"});
  CHECK(c.config.model.ff.hidden == 5);
  CHECK(c.config.model.attn.head_dim == 3);
  auto weight = [&](const std::string& name) -> const Array<float>& {
    for (auto& [n, a] : c.checkpoint.model)
      if (n == name) return a;
    FAIL("no " << name);
    throw;
  };
  const Array<float>& emb = weight("tok_emb.weight");
  CHECK((emb(0, 0) == 1 && emb(0, 2) == 1 && emb(2, 0) == 1 && emb(2, 1) == 1));  // a, and BOS
  const Array<float>& fc1 = weight("blocks.0.ff.fc1.weight");  // (5, 10): columns one 0, bos 1, x 6
  const Array<float>& fc2 = weight("blocks.0.ff.fc2.weight");  // (10, 5): hist:0 7, hist:1 8, hist:2 9
  CHECK((fc1(0, 0) == 1 && fc1(0, 1) == -37 && fc2(9, 0) == 1));  // start unit: w = 2 at x = 1/3
  CHECK(fc1(1, 6) == 24);                                          // t = 5/12, L = 24
  CHECK(fc1(1, 0) == doctest::Approx(-24.0 * 5 / 12 + 0.5));
  CHECK(fc1(2, 0) == doctest::Approx(-24.0 * 5 / 12 - 0.5));
  CHECK((fc2(8, 1) == 1 && fc2(9, 1) == -1 && fc2(8, 2) == -1 && fc2(9, 2) == 1));
  CHECK(fc1(3, 6) == 8);  // t = 3/4, L = 8: w from 1 to 0
  CHECK((fc2(7, 3) == 1 && fc2(8, 3) == -1));
  CHECK(weight("head.weight")(2, 9) == 20);
}

TEST_CASE("compile: the stored labels come back from a saved checkpoint, and checkpoints of other models have none") {
  const compile::CompiledModel c = compile::compile_program(shipped("reverse"));
  const std::string path = test::temp_dir("compile_stored") + "/reverse.h5";
  io::save_checkpoint(path, c.checkpoint);
  const io::Checkpoint back = io::load_checkpoint(path);
  const std::optional<model::CompiledInfo> info = model::compiled_info(back, path);
  REQUIRE(info.has_value());
  CHECK(info->residual == c.info.residual);
  CHECK(info->output == "reverse");
  CHECK(info->program == c.info.program);
  REQUIRE(info->ops.size() == c.info.ops.size());
  for (std::size_t i = 0; i < info->ops.size(); ++i) {
    CHECK(info->ops[i].component == c.info.ops[i].component);
    CHECK(info->ops[i].expr == c.info.ops[i].expr);
    CHECK(info->ops[i].qk_dims == c.info.ops[i].qk_dims);
    CHECK(info->ops[i].v_dims == c.info.ops[i].v_dims);
  }
  CHECK(info->edges.size() == c.info.edges.size());
  CHECK(info->components() == std::vector<std::string>{"0.0", "mlp0", "mlp1", "2.0"});
  io::Checkpoint plain = back;
  plain.compiled.clear();
  CHECK(!model::compiled_info(plain).has_value());
  CHECK(compile::circuit_path("runs/x/reverse.h5") == "runs/x/reverse.circuit.json");
  CHECK(compile::circuit_path("reverse") == "reverse.circuit.json");
}

TEST_CASE("compile: a smaller softmax scale leaks attention to unselected keys until the model is wrong") {
  // With lambda = 2 an aggregate's selected key gets e^2 against BOS's e^1 and the others' 1: the
  // copied one-hot is far from hard, and sort (which copies a one-hot two heads deep) fails.
  const rasp::Program p = shipped("sort");
  compile::CompileOptions o;
  o.attention_scale = 2;
  const compile::CompiledModel c = compile::compile_program(p, o);
  model::LoadedModel l = reload(c);
  const compile::CheckResult r = compile::check_model(*l.model, p, 2000);
  CHECK(r.correct < r.positions);
  CHECK(!r.first_error.empty());
  o.attention_scale = 0;
  CHECK_THROWS_AS(compile::compile_program(p, o), OptionError);
}

}  // namespace qkv

namespace qkv {

TEST_CASE("compile: keep compiles S-ops the output does not read: keep names S-ops, and says what is wrong") {
  const std::string body =
      "vocab a b\nmax_len 3\nflip = map(tokens, {a: b, b: a})\n"
      "next = aggregate(select(indices, map(indices, x + 1), EQ), tokens)\nsel = select(tokens, tokens, EQ)\noutput flip\n";
  auto has = [](const compile::CompiledModel& c, const std::string& prefix) {
    return std::any_of(c.info.residual.begin(), c.info.residual.end(),
                       [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
  };
  const compile::CompiledModel without = compile::compile_program(rasp::parse_program(body));
  CHECK_FALSE(has(without, "next:"));
  const rasp::Program kept = rasp::parse_program(body + "keep next\n");
  REQUIRE(kept.kept.size() == 1);
  CHECK(kept.nodes[kept.kept[0]].name == "next");
  const compile::CompiledModel with = compile::compile_program(kept);
  CHECK(has(with, "next:a"));
  CHECK(std::any_of(with.info.ops.begin(), with.info.ops.end(), [](auto& op) { return op.sop == "next"; }));
  CHECK_THROWS_WITH_AS(rasp::parse_program(body + "keep\n"), doctest::Contains("keep: expected the names of S-ops"),
                       rasp::ProgramError);
  CHECK_THROWS_WITH_AS(rasp::parse_program(body + "keep nxt\n"), doctest::Contains("unknown name 'nxt'; did you mean 'next'"),
                       rasp::ProgramError);
  CHECK_THROWS_WITH_AS(rasp::parse_program(body + "keep sel\n"), doctest::Contains("'sel' is a selector; keep names S-ops"),
                       rasp::ProgramError);
}

}  // namespace qkv
