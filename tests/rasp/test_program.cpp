// The rasp language: parsing, inferred value sets, and one clear error per kind of bad program.
#include <doctest/doctest.h>

#include "qkv/rasp/program.hpp"

namespace qkv {
namespace {

const char* kReverse = R"(# reverse
vocab a b c
max_len 4
length  = selector_width(select(tokens, tokens, TRUE))
opp     = sequence_map(indices, length, y - x - 1)
reverse = aggregate(select(indices, opp, EQ), tokens)
output reverse
)";

// The message of the ProgramError `text` raises ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    rasp::parse_program(text, "p.rasp");
  } catch (const rasp::ProgramError& e) {
    return e.what();
  }
  return "";
}

std::string with_header(const std::string& body) { return "vocab a b c\nmax_len 4\n" + body; }

}  // namespace

TEST_CASE("rasp: a program parses into nodes in dependency order, with every S-op's values inferred") {
  const rasp::Program p = rasp::parse_program(kReverse, "reverse.rasp");
  CHECK(p.vocab.size() == 3);
  CHECK(p.max_len == 4);
  CHECK(!p.causal);
  CHECK(p.nodes[p.output].name == "reverse");
  for (std::size_t k = 0; k < p.nodes.size(); ++k)
    for (std::size_t i : p.nodes[k].inputs) CHECK(i < k);
  const rasp::Node& length = p.nodes[p.find("length")];
  CHECK(length.op == rasp::Op::SelectorWidth);
  CHECK(length.values.size() == 5);  // 0..4
  CHECK(length.uniform);             // TRUE over tokens: the same at every position
  const rasp::Node& opp = p.nodes[p.find("opp")];
  CHECK(opp.values.front() == rasp::Value::of_number(-4));  // 0 - 3 - 1
  CHECK(opp.values.back() == rasp::Value::of_number(3));    // 4 - 0 - 1
  CHECK(opp.table.size() == 4 * 5);
  CHECK(opp.line == 5);
  CHECK(opp.text == "sequence_map(indices, length, y - x - 1)");
  const rasp::Node& reverse = p.nodes[p.output];
  CHECK(reverse.values.size() == 3);
  CHECK(reverse.can_be_none);  // an EQ selection may be empty
  // The nested select is named after its statement.
  CHECK(p.nodes[reverse.inputs[0]].name == "reverse.select1");
}

TEST_CASE("rasp: vocabularies of words, quoted symbols, numbers and ranges, and names used before they are defined") {
  const rasp::Program p = rasp::parse_program("vocab 猫 \"a b\" 3 0..2 true\nmax_len 2\ncausal\noutput y\n"
                                              "y = map(x, {3: \"three\", _: \"other\"})\nx = map(tokens, x)\n");
  REQUIRE(p.vocab.size() == 7);
  CHECK(p.vocab[0] == rasp::Value::of_symbol("猫"));
  CHECK(p.vocab[1] == rasp::Value::of_symbol("a b"));
  CHECK(p.vocab[2] == rasp::Value::of_number(3));
  CHECK(p.vocab[5] == rasp::Value::of_number(2));
  CHECK(p.vocab[6] == rasp::Value::of_bool(true));
  CHECK(p.causal);
  const rasp::Node& y = p.nodes[p.output];
  CHECK(y.values.size() == 2);
  CHECK(y.values[0].label() == "other");
}

TEST_CASE("rasp: expressions follow the usual precedence, with Python's // and %, and tables their default") {
  const rasp::Program p = rasp::parse_program(
      "vocab 0..6\nmax_len 1\n"
      "a = map(tokens, 1 + x * 2 - 7 // 2 % 3)\n"
      "b = map(tokens, if x > 2 and not x == 5 or x == 0 then \"big\" else \"small\")\n"
      "c = map(tokens, min(x, 3) - abs(-x) / 2)\n"
      "d = sequence_map(tokens, a, x + y)\n"
      "output d\n");
  const rasp::Node& a = p.nodes[p.find("a")];
  // 1 + x*2 - ((7 // 2) % 3) = 1 + 2x - 0
  for (std::size_t i = 0; i < 7; ++i) CHECK(a.table[i] == rasp::Value::of_number(1 + 2.0 * double(i)));
  const rasp::Node& b = p.nodes[p.find("b")];
  CHECK(b.table[0].label() == "big");
  CHECK(b.table[2].label() == "small");
  CHECK(b.table[3].label() == "big");
  CHECK(b.table[5].label() == "small");
  const rasp::Node& c = p.nodes[p.find("c")];
  CHECK(c.table[6] == rasp::Value::of_number(0));  // 3 - 3
  CHECK(c.table[1] == rasp::Value::of_number(0.5));
  CHECK(rasp::parse_program("vocab 0..3\nmax_len 1\nm = map(tokens, -7 % 3 + x * 0)\noutput m\n").nodes.back().table[0] ==
        rasp::Value::of_number(2));
  // + joins a symbol and a number as text; - does not, nor does + with a boolean.
  CHECK(rasp::parse_program("vocab 0..3\nmax_len 1\nm = map(tokens, \"@\" + x + \"!\")\noutput m\n").nodes.back().table[2]
            .label() == "@2!");
  CHECK_THROWS_WITH_AS(rasp::parse_program("vocab 0..3\nmax_len 1\nm = map(tokens, \"@\" - x)\noutput m\n"),
                       doctest::Contains("'-' needs numbers"), rasp::ProgramError);
  CHECK_THROWS_WITH_AS(rasp::parse_program("vocab 0..3\nmax_len 1\nm = map(tokens, \"@\" + (x > 1))\noutput m\n"),
                       doctest::Contains("'+' needs numbers"), rasp::ProgramError);
}

TEST_CASE("rasp: numerical aggregates list their possible means, and maps of them discretise") {
  const rasp::Program p = rasp::parse_program(
      "vocab a b\nmax_len 3\n"
      "one = numerical map(tokens, if x == \"a\" then 1 else 0)\n"
      "frac = numerical aggregate(select(indices, indices, LEQ), one)\n"
      "share = categorical map(frac, x)\noutput share\n");
  const rasp::Node& frac = p.nodes[p.find("frac")];
  CHECK(frac.encoding == rasp::Encoding::Numerical);
  CHECK(frac.bounded);
  // 0, 1/3, 1/2, 2/3, 1
  REQUIRE(frac.values.size() == 5);
  CHECK(frac.values[1].number == doctest::Approx(1.0 / 3));
  CHECK(p.nodes[p.output].values.size() == 5);
}

TEST_CASE("rasp: every kind of bad program is an error naming the file, the line and the construct") {
  struct Case {
    const char* what;
    std::string text;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"unknown name", with_header("r = aggregate(select(indices, indices, EQ), tokenz)\noutput r\n"),
       {"p.rasp:3: tokenz: unknown name 'tokenz'", "did you mean 'tokens'?"}},
      {"redefinition", with_header("r = map(tokens, x)\nr = map(tokens, x)\noutput r\n"),
       {"p.rasp:4: r: 'r' is already defined at line 3"}},
      {"cycle", with_header("a = map(b, x)\nb = map(a, x)\noutput a\n"), {"cycle: ", "a -> ", "cannot depend on itself"}},
      {"alias cycle", with_header("a = b\nb = a\noutput a\n"), {"cycle: "}},
      {"categorical values to a numerical aggregate",
       with_header("r = numerical aggregate(select(indices, indices, LEQ), tokens)\noutput r\n"),
       {"p.rasp:3: r: a numerical aggregate needs numerical values; 'tokens' is categorical"}},
      {"numerical keys", with_header("n = numerical map(tokens, 1)\nr = aggregate(select(n, indices, EQ), tokens)\noutput r\n"),
       {"p.rasp:4: r.select1: select needs categorical keys, found 'n', which is numerical"}},
      {"a selector where an S-op goes", with_header("s = select(tokens, tokens, EQ)\nr = map(s, x)\noutput r\n"),
       {"p.rasp:4: r: map expects an S-op as its input, found the selector 's'"}},
      {"an S-op where a selector goes", with_header("r = aggregate(tokens, tokens)\noutput r\n"),
       {"p.rasp:3: r: aggregate expects a selector (select(...)) as its first argument, found the S-op 'tokens'"}},
      {"a mixture: categorical aggregate of a non-unique selector",
       with_header("r = aggregate(select(indices, indices, LT), tokens)\noutput r\n"),
       {"p.rasp:3: r: a categorical aggregate moves one value", "LT", "'tokens' can differ"}},
      {"unknown predicate", with_header("r = aggregate(select(indices, indices, EQUAL), tokens)\noutput r\n"),
       {"p.rasp:3: select: expected a predicate", "found 'EQUAL'"}},
      {"ordering a symbol and a number", with_header("r = aggregate(select(tokens, indices, LT), tokens)\noutput r\n"),
       {"p.rasp:3: r.select1: LT orders values of one kind"}},
      {"a function that fails", with_header("r = map(indices, 1 / x)\noutput r\n"),
       {"p.rasp:3: r: the function fails at x = 0: division by zero"}},
      {"an unknown variable", with_header("r = map(tokens, y)\noutput r\n"), {"p.rasp:3: map: the function of a map has one variable, x"}},
      {"a bare word in an expression", with_header("r = map(tokens, x == a)\noutput r\n"),
       {"unknown name 'a' in the function", "write a symbol in quotes: \"a\""}},
      {"a table without the value", with_header("r = map(tokens, {a: 1})\noutput r\n"), {"the table has no entry for \"b\""}},
      {"a numerical output", with_header("r = numerical map(tokens, 1)\noutput r\n"), {"output: 'r' is numerical"}},
      {"a sequence_map of a numerical S-op",
       with_header("n = numerical map(tokens, 1)\nr = sequence_map(n, tokens, x)\noutput r\n"), {"sequence_map needs categorical inputs"}},
      {"no output", "vocab a\nmax_len 2\n", {"p.rasp: output: the program names no output"}},
      {"no vocabulary", "max_len 2\noutput tokens\n", {"p.rasp: vocab: the program declares no vocabulary"}},
      {"a bad max_len", "vocab a\nmax_len 0\n", {"p.rasp:2: max_len: expected a whole number in [1, 256]"}},
      {"a repeated token", "vocab a b a\n", {"p.rasp:1: vocab: the token \"a\" is listed twice"}},
      {"a word of the language as a name", with_header("select = map(tokens, x)\n"), {"'select' is a word of the language"}},
      {"a stray character", with_header("r = map(tokens, x) ;\n"), {"p.rasp:3: unexpected character ';'"}},
      {"an unclosed call", with_header("r = map(tokens, x\noutput r\n"), {"expected ')' to close map("}},
      {"a statement without =", with_header("r map(tokens, x)\n"), {"p.rasp:3: expected '=' after 'r'"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const std::string e = error_of(c.text);
    CHECK(!e.empty());
    for (const std::string& part : c.expected) {
      CAPTURE(e);
      CHECK(e.find(part) != std::string::npos);
    }
  }
}

}  // namespace qkv
