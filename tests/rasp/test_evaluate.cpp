// The reference interpreter: what programs mean, None and Undefined included.
#include <doctest/doctest.h>

#include "qkv/rasp/evaluate.hpp"

namespace qkv {
namespace {

// The output as labels: "-" for None, "?" for Undefined.
std::vector<std::string> labels(const std::vector<rasp::Cell>& cells) {
  std::vector<std::string> out;
  for (auto& c : cells)
    out.push_back(c.state == rasp::Cell::State::None ? "-" : c.state == rasp::Cell::State::Undefined ? "?" : c.value.label());
  return out;
}

std::vector<std::string> run(const std::string& program, const std::vector<std::size_t>& tokens) {
  return labels(rasp::run(rasp::parse_program(program), tokens));
}

}  // namespace

TEST_CASE("rasp evaluate: reverse, sort and histogram give what their names say") {
  const std::string reverse = "vocab a b c\nmax_len 5\nlength = selector_width(select(tokens, tokens, TRUE))\n"
                              "opp = sequence_map(indices, length, y - x - 1)\n"
                              "reverse = aggregate(select(indices, opp, EQ), tokens)\noutput reverse\n";
  CHECK(run(reverse, {0, 0, 1, 2}) == std::vector<std::string>{"c", "b", "a", "a"});
  const std::string sort = "vocab 0..3\nmax_len 5\nkey = sequence_map(tokens, indices, x * 8 + y)\n"
                           "position = selector_width(select(key, key, LT))\n"
                           "sort = aggregate(select(position, indices, EQ), tokens)\noutput sort\n";
  CHECK(run(sort, {3, 1, 2, 1, 0}) == std::vector<std::string>{"0", "1", "1", "2", "3"});
  const std::string hist = "vocab a b\nmax_len 5\nh = selector_width(select(tokens, tokens, EQ))\noutput h\n";
  CHECK(run(hist, {0, 1, 0, 0}) == std::vector<std::string>{"3", "1", "3", "3"});
}

TEST_CASE("rasp evaluate: a causal program selects keys at or before the query only") {
  const std::string count = "vocab a b\nmax_len 5\ncausal\nn = selector_width(select(tokens, tokens, TRUE))\noutput n\n";
  CHECK(run(count, {0, 1, 1}) == std::vector<std::string>{"1", "2", "3"});
  const std::string frac = "vocab a b\nmax_len 4\none = numerical map(tokens, if x == \"a\" then 1 else 0)\n"
                           "f = numerical aggregate(select(indices, indices, LEQ), one)\nout = map(f, x * 4)\noutput out\n";
  CHECK(run(frac, {0, 1, 0, 0}) == std::vector<std::string>{"4", "2", "2.6666666666666665", "3"});
}

TEST_CASE("rasp evaluate: an empty selection is None, a mixture Undefined, and both propagate as documented") {
  const std::string induction = "vocab a b c\nmax_len 6\ncausal\nprev = map(indices, x - 1)\n"
                                "pt = aggregate(select(indices, prev, EQ), tokens)\n"
                                "ind = aggregate(select(pt, tokens, EQ), tokens)\nnext = map(ind, x)\noutput next\n";
  // a b a c a b: position 2 (a) follows a at 0 -> b; position 4 (a): a at 0 and 2 followed by b and c -> Undefined;
  // position 5 (b): b at 1 followed by a; positions 0, 1, 3 saw their token first -> None.
  CHECK(run(induction, {0, 1, 0, 2, 0, 1}) == std::vector<std::string>{"-", "-", "b", "-", "?", "a"});
  // A numerical map of None is 0 (its MLP's units are all off).
  const std::string num = "vocab a b\nmax_len 3\nfirst = aggregate(select(indices, indices, EQ), tokens)\n"
                          "none = aggregate(select(indices, indices, FALSE), tokens)\n"
                          "n = numerical map(none, 1)\nout = map(n, x + 1)\noutput out\n";
  CHECK(run(num, {0, 1}) == std::vector<std::string>{"1", "1"});
  CHECK_THROWS_AS(rasp::run(rasp::parse_program(num), {}), ValueError);
  CHECK_THROWS_AS(rasp::run(rasp::parse_program(num), {0, 1, 0, 1}), ValueError);
  CHECK_THROWS_AS(rasp::run(rasp::parse_program(num), {2}), ValueError);
}

}  // namespace qkv
