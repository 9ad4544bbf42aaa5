// The shelf of known circuits: distractor heads change no output of a compiled model, write only
// their own dimension, and are listed in the circuit file outside the circuit; the circuit files
// shipped in programs/shelf/ are what the shelf builds.
#include <doctest/doctest.h>

#include "qkv/compile/shelf.hpp"
#include "qkv/interp/grade.hpp"
#include "qkv/io/files.hpp"
#include "qkv/io/json.hpp"
#include "qkv/model/load.hpp"
#include "test_util.hpp"

namespace qkv {

TEST_CASE("shelf: every model with its distractors still computes its program") {
  for (const compile::ShelfEntry& e : compile::shelf()) {
    CAPTURE(e.name);
    const compile::ShelfModel s = compile::build_shelf_model(e, std::string(QKV_SOURCE_DIR) + "/programs");
    const auto& m = s.compiled.config.model;
    // A mimic per layer with a circuit head, one other pattern per layer, a dead dimension each.
    const interp::Circuit truth = interp::read_circuit(s.compiled.circuit_json);
    CHECK(m.d_model == s.compiled.info.residual.size());
    CHECK(s.compiled.info.residual.back().rfind("dead:", 0) == 0);
    const json::Value circuit = json::parse(s.compiled.circuit_json);
    const json::Value* distractors = circuit.find("distractors");
    REQUIRE(distractors);
    CHECK(distractors->items.size() == m.d_model - compile::compile_program(s.program).config.model.d_model);
    for (auto& d : distractors->items)
      for (auto& h : truth.heads) CHECK(d.find("id")->text != interp::head_name(h));
    // The ground truth shipped in programs/shelf/ is this one (program paths relative to the source).
    std::string text = s.compiled.circuit_json;
    const std::string prefix = std::string(QKV_SOURCE_DIR) + "/";
    for (std::size_t at; (at = text.find(prefix)) != std::string::npos;) text.erase(at, prefix.size());
    CHECK(text == io::read_file(prefix + "programs/shelf/" + e.name + ".circuit.json", 1 << 20, "circuit"));
    model::LoadedModel l = model::load_model(s.compiled.checkpoint, e.name, {}, false);
    const compile::CheckResult r = compile::check_model(*l.model, s.program, 300);
    CHECK(r.positions > 0);
    CHECK(r.correct == r.positions);
  }
}

TEST_CASE("shelf: a distractor's output goes only to its dead dimension") {
  const rasp::Program p = rasp::load_program(std::string(QKV_SOURCE_DIR) + "/programs/induction.rasp");
  const compile::CompiledModel c = compile::compile_program(p);
  const compile::CompiledModel w =
      compile::add_distractors(c, p, {{1, compile::DistractorPattern::Mimic}, {0, compile::DistractorPattern::FirstToken}});
  CHECK(w.config.model.attn.num_heads == 2);
  CHECK(w.config.model.d_model == c.config.model.d_model + 2);
  CHECK(w.info.residual[c.config.model.d_model] == "dead:1.1");
  const std::size_t C = w.config.model.d_model, Dv = w.config.model.attn.value_dim;
  for (auto& [name, a] : w.checkpoint.model) {
    if (name != "blocks.1.attn.w_o.weight") continue;
    for (std::size_t r = 0; r < C; ++r)
      for (std::size_t k = Dv; k < 2 * Dv; ++k)  // head 1's columns
        if (a(r, k) != 0) CHECK(r == c.config.model.d_model);
  }
  // The mimic's query and key rows are head 0's.
  const std::size_t D = w.config.model.attn.head_dim;
  for (auto& [name, a] : w.checkpoint.model)
    if (name == "blocks.1.attn.w_k.weight")
      for (std::size_t r = 0; r < D; ++r)
        for (std::size_t k = 0; k < C; ++k) CHECK(a(D + r, k) == a(r, k));
  CHECK_THROWS_WITH_AS(compile::add_distractors(c, p, {{2, compile::DistractorPattern::SameToken}}),
                       doctest::Contains("distractors[0]: layer 2 out of range"), ValueError);
  CHECK_THROWS_WITH_AS(compile::shelf_entry("nope"), doctest::Contains("the shelf holds induction"), ValueError);
}

TEST_CASE("shelf: a model without labelled dimensions gets mimics only and computes what it did") {
  const rasp::Program p = rasp::load_program(std::string(QKV_SOURCE_DIR) + "/programs/induction.rasp");
  compile::CompiledModel c = compile::compile_program(p);
  c.checkpoint.compiled.clear();  // as a trained model: no /compiled, no residual labels
  c.info = {};
  const std::vector<compile::Distractor> mimics = compile::shelf_distractors(c, true);
  REQUIRE(mimics.size() == 2);
  CHECK(mimics[1].layer == 1);
  CHECK(mimics[1].pattern == compile::DistractorPattern::Mimic);
  const compile::CompiledModel w = compile::add_distractors(c, p, mimics);
  CHECK(w.checkpoint.compiled.empty());
  model::LoadedModel l = model::load_model(w.checkpoint, "trained", {}, false);
  const compile::CheckResult r = compile::check_model(*l.model, p, 300);
  CHECK(r.correct == r.positions);
  CHECK_THROWS_WITH_AS(compile::add_distractors(c, p, {{0, compile::DistractorPattern::PreviousToken}}),
                       doctest::Contains("does not label"), ValueError);
}

}  // namespace qkv
