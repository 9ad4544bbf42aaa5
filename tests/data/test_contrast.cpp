// Contrast pairs of a program: some tokens apart, the output a different value at the position.
#include <doctest/doctest.h>

#include "qkv/data/contrast.hpp"
#include "qkv/rasp/evaluate.hpp"
#include "test_util.hpp"

namespace qkv {

TEST_CASE("contrast pairs differ in some tokens and in the output at their position") {
  const rasp::Program p = rasp::load_program(std::string(QKV_SOURCE_DIR) + "/programs/reverse.rasp");
  const auto pairs = data::program_contrast_pairs(p, 12, 3);
  REQUIRE(pairs.size() == 12);
  for (auto& c : pairs) {
    REQUIRE(c.clean.inputs.shape() == c.corrupt.inputs.shape());
    std::size_t differ = 0;
    for (std::size_t t = 0; t < c.clean.inputs.shape()[1]; ++t) differ += c.clean.inputs(0, t) != c.corrupt.inputs(0, t);
    CHECK(differ >= 1);
    CHECK(c.clean.targets(0, c.position) == c.answer);
    CHECK(c.corrupt.targets(0, c.position) == c.wrong);
    CHECK(c.answer != c.wrong);
  }
  const auto again = data::program_contrast_pairs(p, 12, 3);
  CHECK(again[5].position == pairs[5].position);
  CHECK(again[5].answer == pairs[5].answer);
  const rasp::Program constant = rasp::parse_program("vocab a b\nmax_len 3\nc = map(tokens, 1)\noutput c\n", "c.rasp");
  CHECK_THROWS_WITH_AS(data::program_contrast_pairs(constant, 1, 0), doctest::Contains("c.rasp: found 0 of 1"), ValueError);
}

}  // namespace qkv
