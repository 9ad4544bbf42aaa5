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

TEST_CASE("text task, objective masked: windows of T tokens, round(rate T) positions chosen, 80/10/10") {
  const std::string dir = test::temp_dir("lm_text_masked");
  TaskOptions o = options("text");
  o.path = write_corpus(dir, 400);
  o.length = 16;
  auto causal = make_task(o);
  o.objective = Objective::Masked;
  auto masked = make_task(o);
  const std::size_t V = causal->tokenizer()->size();
  CHECK(masked->masked());
  CHECK_FALSE(masked->next_token());
  CHECK(masked->input_vocab() == V + 1);
  CHECK(masked->num_classes() == V);
  CHECK(masked->mask_token() == Index(V));
  CHECK(masked->token_label(Index(V)) == "[MASK]");
  CHECK(causal->mask_token() == -1);
  // Windows of T tile the held-out splits: one more window than those of T + 1 at most.
  const std::size_t n_val = masked->split_size(Split::Val);
  CHECK((n_val == causal->split_size(Split::Val) || n_val == causal->split_size(Split::Val) + 1));
  // Held-out window k starts at k T for both objectives: the causal inputs are the originals.
  const std::size_t N = 4000;  // cycles through the windows, each example with its own masks
  const Batch c = causal->examples(Split::Val, 3, 0, N), m = masked->examples(Split::Val, 3, 0, N);
  CHECK(m.inputs.shape() == Shape{N, 16});
  std::size_t chosen = 0, as_mask = 0, kept = 0, other = 0;
  for (std::size_t r = 0; r < N; ++r) {
    std::size_t here = 0;
    for (std::size_t t = 0; t < 16; ++t) {
      const Index original = c.inputs(r, t), in = m.inputs(r, t), y = m.targets(r, t);
      if (y == kIgnore) {
        CHECK(in == original);
        continue;
      }
      ++here;
      CHECK(y == original);
      if (in == Index(V)) {
        ++as_mask;
      } else if (in == original) {
        ++kept;
      } else {
        ++other;
        CHECK((in >= 0 && in < Index(V) - 1));  // a character of the vocabulary, not <unk>
      }
    }
    CHECK(here == 2);  // round(0.15 * 16)
    chosen += here;
  }
  CHECK(double(as_mask) / double(chosen) == doctest::Approx(0.8).epsilon(0.03));
  CHECK(double(kept) / double(chosen) == doctest::Approx(0.1 + 0.1 / double(V - 1)).epsilon(0.2));
  CHECK(double(other) / double(chosen) == doctest::Approx(0.1).epsilon(0.2));
  // Deterministic (the held-out masks are fixed), and the same slice from any start.
  const Batch again = masked->examples(Split::Val, 3, 5, 3);
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t t = 0; t < 16; ++t) {
      CHECK(again.inputs(r, t) == m.inputs(5 + r, t));
      CHECK(again.targets(r, t) == m.targets(5 + r, t));
    }
  // Training windows: T tokens from anywhere in the training split, masked the same way.
  const Batch train = masked->examples(Split::Train, 1, 0, 64);
  for (std::size_t r = 0; r < 64; ++r) {
    std::size_t here = 0;
    for (std::size_t t = 0; t < 16; ++t) here += train.targets(r, t) != kIgnore;
    CHECK(here == 2);
  }
  // A checkpoint's vocabulary carries the objective.
  auto vocabulary = make_vocabulary_task(o, *masked->tokenizer());
  CHECK(vocabulary->masked());
  CHECK(vocabulary->input_vocab() == V + 1);
  CHECK(vocabulary->mask_token() == Index(V));
  o.objective = Objective::Causal;
  CHECK(make_vocabulary_task(o, *masked->tokenizer())->input_vocab() == V);
}

TEST_CASE("text task, objective masked: a corpus holding the text [MASK] is refused, naming the file and offset") {
  const std::string dir = test::temp_dir("lm_text_mask_literal");
  TaskOptions o = options("text");
  o.length = 4;
  o.val_fraction = o.test_fraction = 0;
  o.path = dir + "/notes.txt";
  std::ofstream(o.path) << "first line\nthe [MASK] token is a placeholder\n";
  CHECK_NOTHROW(make_task(o));  // causal: just text
  o.objective = Objective::Masked;
  const std::string expected = "task.path: " + o.path +
                               " holds the text [MASK] at byte 15, line 2: with task.objective masked, [MASK] is how "
                               "a prompt spells the mask token, so the corpus must not contain it";
  CHECK_THROWS_WITH_AS(make_task(o), expected.c_str(), ValueError);
  o.path = write_corpus(dir, 3);
  o.length = 64;
  o.val_fraction = 0.05;
  CHECK_THROWS_WITH_AS(make_task(o), doctest::Contains("fewer than one window of task.length = 64"), ValueError);
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
