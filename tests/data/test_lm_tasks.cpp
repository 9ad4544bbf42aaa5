// The next-token and one-label tasks: windows of a text corpus (train / validation / test
// disjoint, targets shifted by one), induction sequences scored only where predictable,
// mod_add's partition of the pairs, and mqar in Zoology's format.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>

#include "qkv/data/tasks.hpp"
#include "test_util.hpp"

namespace qkv::data {
namespace {

TaskOptions options(const std::string& name) {
  TaskOptions o;
  o.name = name;
  return o;
}

// A small corpus of n lines, "line 0: 我爱吃苹果 ..." (multi-byte characters included).
std::string write_corpus(const std::string& dir, std::size_t n) {
  const std::string path = dir + "/corpus.txt";
  std::ofstream f(path);
  for (std::size_t i = 0; i < n; ++i) f << "line " << i << ": 我爱吃苹果, the cat chases the mouse " << i * 7 % 13 << "\n";
  return path;
}

}  // namespace

TEST_CASE("text task: windows of T + 1 tokens, targets shifted by one, validation and test tiled and disjoint") {
  const std::string dir = test::temp_dir("lm_text");
  TaskOptions o = options("text");
  o.path = write_corpus(dir, 400);
  o.length = 16;
  o.val_fraction = 0.1, o.test_fraction = 0.1;
  auto task = make_task(o);
  REQUIRE(task->tokenizer() != nullptr);
  CHECK(task->next_token());
  CHECK(task->input_vocab() == task->tokenizer()->size());
  // One token per character: '我' is a token of its own.
  CHECK(task->tokenizer()->encode(std::string("我"), false, "t").size() == 1);
  Batch train = task->examples(Split::Train, 5, 0, 64);
  CHECK(train.inputs.shape() == Shape{64, 16});
  for (std::size_t r = 0; r < 64; ++r)
    for (std::size_t t = 0; t + 1 < 16; ++t) CHECK(train.targets(r, t) == train.inputs(r, t + 1));
  const std::size_t n_val = task->split_size(Split::Val);
  REQUIRE(n_val > 2);
  Batch val = task->examples(Split::Val, 1, 0, n_val);
  // Tiled: window k+1 starts where window k ends, so its first input is window k's last target.
  for (std::size_t k = 0; k + 1 < n_val; ++k) CHECK(val.inputs(k + 1, 0) == val.targets(k, 15));
  // Disjoint splits: no validation window's text appears among the training windows, whose
  // starts are random (the corpus lines repeat, so compare starting positions through decode).
  const std::string val_text = task->tokenizer()->decode(val.inputs.data(), val.inputs.size());
  Dataset d(std::shared_ptr<Task>(std::move(task)), 3, 8);
  CHECK(d.eval_set().size() == 8);
  CHECK(d.test_set().size() == 8);
  CHECK_FALSE(d.test_set().inputs == d.eval_set().inputs);
  CHECK(!val_text.empty());
}

TEST_CASE("text task: bad corpora are clear errors naming the file") {
  const std::string dir = test::temp_dir("lm_text_bad");
  TaskOptions o = options("text");
  o.length = 16;
  o.path = dir + "/missing.txt";
  CHECK_THROWS_WITH_AS(make_task(o), doctest::Contains("no such file or directory"), ValueError);
  std::ofstream(dir + "/empty.txt");
  o.path = dir + "/empty.txt";
  CHECK_THROWS_WITH_AS(make_task(o), doctest::Contains("empty"), ValueError);
  std::ofstream(dir + "/latin1.txt") << "caf\xe9 au lait\n";
  o.path = dir + "/latin1.txt";
  CHECK_THROWS_WITH_AS(make_task(o), doctest::Contains("latin1.txt: not valid UTF-8 at byte 3"), ValueError);
  o.tokenizer = TokenizerKind::Byte;
  o.length = 2;
  o.val_fraction = o.test_fraction = 0;
  CHECK_NOTHROW(make_task(o));  // bytes need no UTF-8
  o.tokenizer = TokenizerKind::Char;
  o.path = write_corpus(dir, 3);
  o.length = 64;
  o.val_fraction = o.test_fraction = 0.05;
  CHECK_THROWS_WITH_AS(make_task(o), doctest::Contains("fewer than one window of task.length + 1 = 65"), ValueError);
  o.path = "";
  CHECK_THROWS_WITH_AS(make_task(o), doctest::Contains("path: the text task needs a corpus"), OptionError);
}

TEST_CASE("induction task: the repeat is scored and predictable from the first occurrence, nothing else is scored") {
  for (std::size_t segment : {0, 5}) {
    CAPTURE(segment);
    TaskOptions o = options("induction");
    o.vocab = 50, o.length = 24, o.segment = segment;
    auto task = make_task(o);
    CHECK(task->next_token());
    Batch b = task->examples(Split::Train, 1, 0, 200);
    std::size_t scored = 0;
    for (std::size_t r = 0; r < 200; ++r)
      for (std::size_t t = 0; t < 24; ++t) {
        const Index y = b.targets(r, t);
        if (y == kIgnore) continue;
        ++scored;
        // The input token occurred earlier, and the token after that occurrence is the target.
        bool found = false;
        for (std::size_t j = 0; j < t && !found; ++j) found = b.inputs(r, j) == b.inputs(r, t) && b.inputs(r, j + 1) == y;
        CHECK(found);
        if (t + 1 < 24) CHECK(b.inputs(r, t + 1) == y);  // next-token targets
      }
    CHECK(scored == (segment == 0 ? 200 * 11 : 200 * 4));
  }
  TaskOptions bad = options("induction");
  bad.length = 8, bad.segment = 6;
  CHECK_THROWS_WITH_AS(make_task(bad), doctest::Contains("segment"), OptionError);
}

TEST_CASE("mod_add task: every pair once, in train, validation or test - labels (a + b) mod p") {
  TaskOptions o = options("mod_add");
  o.vocab = 13, o.train_fraction = 0.4;
  auto task = make_task(o);
  CHECK(task->input_vocab() == 14);
  CHECK(task->num_classes() == 13);
  const std::size_t nt = task->split_size(Split::Train), nv = task->split_size(Split::Val), ns = task->split_size(Split::Test);
  CHECK(nt == 68);  // round(0.4 * 169)
  CHECK(nt + nv + ns == 169);
  std::set<std::pair<Index, Index>> seen;
  for (auto [split, n] : {std::pair{Split::Train, nt}, {Split::Val, nv}, {Split::Test, ns}}) {
    Batch b = task->examples(split, 99, 0, n);
    for (std::size_t r = 0; r < n; ++r) {
      CHECK(b.inputs(r, 2) == 13);
      CHECK(b.targets(r, 0) == kIgnore);
      CHECK(b.targets(r, 2) == (b.inputs(r, 0) + b.inputs(r, 1)) % 13);
      CHECK(seen.insert({b.inputs(r, 0), b.inputs(r, 1)}).second);
    }
  }
  CHECK(seen.size() == 169);
  // Training cycles through its pairs: a full batch is every training pair.
  Batch again = task->examples(Split::Train, 1, nt, nt);
  CHECK(again.inputs == task->examples(Split::Train, 2, 0, nt).inputs);
  CHECK(task->token_label(13) == "=");
}

TEST_CASE("mqar task: Zoology's layout, keys and values from disjoint halves, each query labelled with its value") {
  TaskOptions o = options("mqar");
  o.vocab = 64, o.length = 64, o.pairs = 8;
  auto task = make_task(o);
  Batch b = task->examples(Split::Train, 3, 0, 100);
  for (std::size_t r = 0; r < 100; ++r) {
    std::map<Index, Index> kv;
    for (std::size_t i = 0; i < 8; ++i) {
      const Index k = b.inputs(r, 2 * i), v = b.inputs(r, 2 * i + 1);
      CHECK((k >= 1 && k < 32));
      CHECK((v >= 32 && v < 64));
      CHECK(kv.emplace(k, v).second);  // distinct keys
      CHECK(b.targets(r, 2 * i) == kIgnore);
    }
    std::size_t queries = 0;
    for (std::size_t t = 16; t < 64; ++t)
      if (b.targets(r, t) != kIgnore) {
        ++queries;
        CHECK((t - 16) % 2 == 0);
        REQUIRE(kv.count(b.inputs(r, t)) == 1);
        CHECK(b.targets(r, t) == kv[b.inputs(r, t)]);
      }
    CHECK(queries == 8);  // every key queried once
  }
  TaskOptions bad = o;
  bad.length = 30;
  CHECK_THROWS_WITH_AS(make_task(bad), doctest::Contains("length"), OptionError);
}

}  // namespace qkv::data
