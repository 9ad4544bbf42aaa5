// Grading the instruments: the AUROC and top-k precision arithmetic, the circuit file read as the
// ground truth, and the small version of `qkv grade` on the induction circuit of the shelf.
#include <doctest/doctest.h>

#include <cmath>

#include "qkv/compile/shelf.hpp"
#include "qkv/data/contrast.hpp"
#include "qkv/interp/grade.hpp"
#include "qkv/model/load.hpp"
#include "test_util.hpp"

namespace qkv {

TEST_CASE("grade: AUROC and top-k precision by hand, ties counted half") {
  CHECK(interp::auroc({3, 2, 1}, {true, false, false}) == 1.0);
  CHECK(interp::auroc({1, 2, 3}, {true, false, false}) == 0.0);
  CHECK(interp::auroc({1, 1}, {true, false}) == 0.5);
  // positives 0.1, 0.5; negatives 0.9, 0.5: one tie out of four pairs.
  CHECK(interp::auroc({0.1, 0.9, 0.5, 0.5}, {true, false, true, false}) == 0.125);
  CHECK(std::isnan(interp::auroc({1, 2}, {true, true})));
  CHECK_THROWS_AS(interp::auroc({1, 2}, {true}), ValueError);
  // k = 2: 3 is a positive, then one of the two 2s (one positive of two): 1.5 / 2.
  CHECK(interp::precision_at_k({3, 2, 2, 1}, {true, true, false, false}, 2) == 0.75);
  CHECK(interp::precision_at_k({3, 2, 2, 1}, {true, false, false, true}, 1) == 1.0);
  CHECK(std::isnan(interp::precision_at_k({1}, {true}, 0)));
}

TEST_CASE("grade: a circuit file's heads and edges under EAP-IG's names") {
  const std::string text = R"({"components": [{"id": "0.0", "kind": "head"}, {"id": "mlp0", "kind": "mlp"},
      {"id": "1.2", "kind": "head"}],
    "edges": [{"from": "embed", "to": "0.0", "port": "q", "sop": "indices"},
      {"from": "0.0", "to": "mlp0", "port": "in", "sop": "x"}, {"from": "mlp0", "to": "1.2", "port": "k", "sop": "y"},
      {"from": "1.2", "to": "output", "port": "out", "sop": "z"}]})";
  const interp::Circuit c = interp::read_circuit(text);
  REQUIRE(c.heads.size() == 2);
  CHECK(interp::head_name(c.heads[1]) == "1.2");
  REQUIRE(c.edges.size() == 4);
  CHECK(c.edges[0] == std::make_pair(std::string("input"), std::string("a0.h0<q>")));
  CHECK(c.edges[1] == std::make_pair(std::string("a0.h0"), std::string("m0")));
  CHECK(c.edges[2] == std::make_pair(std::string("m0"), std::string("a1.h2<k>")));
  CHECK(c.edges[3] == std::make_pair(std::string("a1.h2"), std::string("logits")));
  CHECK_THROWS_WITH_AS(interp::read_circuit(R"({"components": []})", "x.json"), doctest::Contains("x.json: expected a circuit"),
                       ValueError);
  CHECK_THROWS_WITH_AS(interp::read_circuit(R"({"components": [], "edges": [{"from": "attn", "to": "0.0", "port": "q"}]})", "x"),
                       doctest::Contains("x.edges[0].from: unknown component 'attn'"), ValueError);
}

TEST_CASE("grade: on the induction circuit activation patching finds both heads and direct attribution misses the first") {
  const compile::ShelfModel s =
      compile::build_shelf_model(compile::shelf_entry("induction"), std::string(QKV_SOURCE_DIR) + "/programs");
  model::LoadedModel l = model::load_model(s.compiled.checkpoint, "induction", {}, true);
  interp::GradeRequest r;
  r.truth = interp::read_circuit(s.compiled.circuit_json);
  r.pairs = data::program_contrast_pairs(s.program, 4, 0);
  r.instruments = {interp::Instrument::Patching, interp::Instrument::Dla, interp::Instrument::Labels,
                   interp::Instrument::ZeroAblation};
  r.examples = 64;
  const interp::GradeResult g = interp::grade(l, r, "induction");
  REQUIRE(g.heads.size() == 6);  // 2 layers x (the circuit head, a mimic, one other distractor)
  CHECK(g.in_circuit[0]);        // 0.0
  CHECK(g.in_circuit[3]);        // 1.0
  const interp::InstrumentGrade& patching = g.grades[0];
  CHECK(patching.head_auroc == 1.0);
  CHECK(patching.head_precision == 1.0);
  const interp::InstrumentGrade& dla = g.grades[1];
  CHECK(dla.head_scores[0] == 0.0);  // the previous-token head writes nothing the output layer reads
  CHECK(dla.head_scores[3] > 1.0);   // the induction head writes the answer
  CHECK(dla.head_auroc < 1.0);
  const interp::InstrumentGrade& labels = g.grades[2];
  CHECK(labels.head_scores[1] == doctest::Approx(labels.head_scores[0]));  // the mimic attends as 0.0 does
  CHECK(labels.head_auroc < 1.0);
  CHECK(g.grades[3].head_auroc == 1.0);  // zeroing a distractor changes no loss
  CHECK(interp::format_grades({g}).find("induction       patching") != std::string::npos);
  CHECK_THROWS_WITH_AS(interp::grade(l, interp::GradeRequest{}, "x"), doctest::Contains("pairs"), OptionError);
}

}  // namespace qkv
