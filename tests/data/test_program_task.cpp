// The task of a rasp program: rows of BOS, tokens and padding, labelled by the interpreter.
#include <doctest/doctest.h>

#include <fstream>

#include "qkv/data/program_task.hpp"
#include "test_util.hpp"

namespace qkv {
namespace {

const char* kFirst = "vocab x y z\nmax_len 4\n"
                     "first = aggregate(select(indices, indices, EQ), tokens)\n"
                     "out = map(first, {x: \"X\", _: \"other\"})\noutput out\n";

data::TaskOptions options() {
  data::TaskOptions o;
  o.name = "program";
  o.program = kFirst;
  return o;
}

}  // namespace

TEST_CASE("program task: BOS, then 1..max_len tokens, then PAD, and targets the program's classes after BOS") {
  const auto task = data::make_task(options());
  CHECK(task->name() == "program");
  CHECK(task->input_length() == 5);
  CHECK(task->input_vocab() == 5);  // x y z BOS PAD
  CHECK(task->num_classes() == 2);  // "X", "other"
  CHECK(task->pad_token() == 4);
  CHECK(task->token_label(3) == "BOS");
  CHECK(task->token_label(1) == "y");
  const data::Batch b = task->examples(7, 0, 200);
  bool short_row = false, full_row = false;
  for (std::size_t r = 0; r < b.size(); ++r) {
    CHECK(b.inputs(r, 0) == 3);
    CHECK(b.targets(r, 0) == data::kIgnore);
    std::size_t n = 0;
    while (n < 4 && b.inputs(r, 1 + n) != 4) ++n;
    CHECK(n >= 1);
    short_row |= n == 1, full_row |= n == 4;
    for (std::size_t i = 0; i < 4; ++i) {
      if (i >= n) {
        CHECK(b.inputs(r, 1 + i) == 4);
        CHECK(b.targets(r, 1 + i) == data::kIgnore);
      } else {
        CHECK(b.targets(r, 1 + i) == (b.inputs(r, 1 + i) == 0 ? 0 : 1));
      }
    }
  }
  CHECK(short_row);
  CHECK(full_row);
  // The same stream gives the same examples, another one others.
  CHECK(test::bitwise_equal(task->examples(7, 10, 5).inputs, data::rows(b, 10, 15).inputs));
  CHECK(!test::bitwise_equal(task->examples(8, 0, 200).inputs, b.inputs));
}

TEST_CASE("program task: text reads as words or characters of the vocabulary after BOS, and a program can be a file") {
  const auto task = data::make_task(options());
  data::Batch b = task->text_row("x z y", "--text");
  REQUIRE(b.inputs.shape()[1] == 4);
  CHECK(b.inputs(0, 0) == 3);
  CHECK(b.inputs(0, 2) == 2);
  CHECK(b.targets(0, 1) == 0);
  CHECK(b.targets(0, 2) == 1);
  CHECK(test::bitwise_equal(task->text_row("xzy", "--text").inputs, b.inputs));
  CHECK_THROWS_WITH_AS(task->text_row("x w", "--text"),
                       doctest::Contains("--text: 'w' is not a token of the program (its vocabulary: x, y, z)"), ValueError);
  CHECK_THROWS_WITH_AS(task->text_row("xxxxx", "--text"), doctest::Contains("more than the program's max_len 4"), ValueError);

  const std::string path = test::temp_dir("program_task") + "/first.rasp";
  std::ofstream(path) << kFirst;
  data::TaskOptions o = options();
  o.program.clear();
  o.path = path;
  CHECK(data::make_task(o)->num_classes() == 2);
  o.path.clear();
  CHECK_THROWS_WITH_AS(data::make_task(o), doctest::Contains("the program task needs a rasp program"), OptionError);
  o.program = "vocab x\nmax_len 2\noutput nothing\n";
  CHECK_THROWS_WITH_AS(data::make_task(o), doctest::Contains("task.program:3: nothing: unknown name 'nothing'"),
                       rasp::ProgramError);
}

TEST_CASE("program task: a causal program's inputs cover its classes, for a decoder's logits") {
  data::TaskOptions o = options();
  o.program = "vocab a b\nmax_len 3\ncausal\nn = selector_width(select(tokens, tokens, TRUE))\noutput n\n";
  const auto task = data::make_task(o);
  CHECK(task->num_classes() == 4);  // 0..3
  CHECK(task->input_vocab() == 4);  // max(2 + 2, 4)
}

}  // namespace qkv
