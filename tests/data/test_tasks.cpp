#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "qkv/data/tasks.hpp"
#include "qkv/tensor/parallel.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::data;

namespace {

std::unique_ptr<Task> task(const std::string& name, std::size_t vocab = 10, std::size_t length = 12,
                           std::size_t pairs = 5, std::size_t queries = 0) {
  TaskOptions o;
  o.name = name, o.vocab = vocab, o.length = length, o.pairs = pairs, o.queries = queries;
  return make_task(o);
}

std::vector<Index> row_of(const IndexArray& a, std::size_t r) {
  const std::size_t w = a.shape()[1];
  return std::vector<Index>(a.data() + r * w, a.data() + (r + 1) * w);
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.inputs == b.inputs && a.targets == b.targets && a.decoder_inputs == b.decoder_inputs;
}

}  // namespace

TEST_CASE("tasks: copy, reverse and sort label every position correctly") {
  for (const char* name : {"copy", "reverse", "sort"}) {
    CAPTURE(name);
    auto t = task(name);
    CHECK(t->name() == name);
    CHECK(t->input_vocab() == 10);
    CHECK(t->num_classes() == 10);
    CHECK_FALSE(t->seq2seq());
    Batch b = t->examples(7, 0, 20);
    REQUIRE(b.inputs.shape() == std::vector<std::size_t>{20, 12});
    REQUIRE(b.targets.shape() == std::vector<std::size_t>{20, 12});
    CHECK(b.decoder_inputs.size() == 0);
    for (std::size_t r = 0; r < 20; ++r) {
      std::vector<Index> in = row_of(b.inputs, r), tg = row_of(b.targets, r);
      for (Index v : in) CHECK((v >= 0 && v < 10));
      if (std::string(name) == "copy") CHECK(tg == in);
      if (std::string(name) == "reverse")
        for (std::size_t i = 0; i < 12; ++i) CHECK(tg[i] == in[11 - i]);
      if (std::string(name) == "sort") {
        CHECK(std::is_sorted(tg.begin(), tg.end()));
        CHECK(std::is_permutation(tg.begin(), tg.end(), in.begin()));
      }
    }
  }
}

TEST_CASE("tasks: inputs are not degenerate (tokens vary within and across examples)") {
  Batch b = task("copy", 16, 32)->examples(1, 0, 64);
  std::set<Index> seen(b.inputs.begin(), b.inputs.end());
  CHECK(seen.size() == 16);
  CHECK(row_of(b.inputs, 0) != row_of(b.inputs, 1));
}

TEST_CASE("tasks: recall targets are the values paired with the queried keys") {
  auto t = task("recall", 10, 999, 6, 4);
  CHECK(t->input_vocab() == 20);
  CHECK(t->num_classes() == 10);
  CHECK(t->input_length() == 16);
  Batch b = t->examples(3, 0, 50);
  REQUIRE(b.inputs.shape() == std::vector<std::size_t>{50, 16});
  std::size_t distinct_queries = 0;
  for (std::size_t r = 0; r < 50; ++r) {
    std::vector<Index> in = row_of(b.inputs, r), tg = row_of(b.targets, r);
    std::map<Index, Index> dict;
    for (std::size_t i = 0; i < 6; ++i) {
      const Index k = in[2 * i], v = in[2 * i + 1];
      CHECK((k >= 0 && k < 10));
      CHECK((v >= 10 && v < 20));
      CHECK(dict.emplace(k, v).second);  // keys are distinct
      CHECK(tg[2 * i] == kIgnore);
      CHECK(tg[2 * i + 1] == kIgnore);
    }
    std::set<Index> queried;
    for (std::size_t q = 12; q < 16; ++q) {
      REQUIRE(dict.count(in[q]));
      CHECK(tg[q] == dict[in[q]] - 10);
      queried.insert(in[q]);
    }
    distinct_queries += queried.size();
  }
  CHECK(distinct_queries > 50);  // queries are spread over the keys, not always the same one
}

TEST_CASE("tasks: recall defaults to one query per pair, and allows pairs == vocab") {
  auto t = task("recall", 8, 32, 8);
  CHECK(t->input_length() == 24);
  Batch b = t->examples(0, 0, 4);
  for (std::size_t r = 0; r < 4; ++r) {
    std::vector<Index> in = row_of(b.inputs, r);
    std::set<Index> keys;
    for (std::size_t i = 0; i < 8; ++i) keys.insert(in[2 * i]);
    CHECK(keys.size() == 8);
  }
}

TEST_CASE("tasks: seq2seq reverse and sort, with teacher-forcing decoder inputs") {
  for (const char* name : {"seq2seq_reverse", "seq2seq_sort"}) {
    CAPTURE(name);
    auto t = task(name, 10, 9);
    CHECK(t->seq2seq());
    CHECK(t->target_vocab() == 11);
    CHECK(t->bos() == 10);
    CHECK(t->input_vocab() == 10);
    CHECK(t->num_classes() == 10);
    Batch b = t->examples(5, 0, 10);
    REQUIRE(b.decoder_inputs.shape() == std::vector<std::size_t>{10, 9});
    for (std::size_t r = 0; r < 10; ++r) {
      std::vector<Index> in = row_of(b.inputs, r), tg = row_of(b.targets, r), dec = row_of(b.decoder_inputs, r);
      if (std::string(name) == "seq2seq_reverse")
        CHECK(std::equal(tg.begin(), tg.end(), in.rbegin()));
      else {
        CHECK(std::is_sorted(tg.begin(), tg.end()));
        CHECK(std::is_permutation(tg.begin(), tg.end(), in.begin()));
      }
      CHECK(dec[0] == 10);
      for (std::size_t i = 1; i < 9; ++i) CHECK(dec[i] == tg[i - 1]);
    }
  }
}

TEST_CASE("tasks: seq2seq_recall holds recall's examples, pairs in the source and queries in the decoder") {
  auto s2s = task("seq2seq_recall", 10, 0, 6, 4);
  auto one = task("recall", 10, 0, 6, 4);
  CHECK(s2s->seq2seq());
  CHECK(s2s->bos() == -1);  // the decoder's inputs are given, not generated
  CHECK(s2s->input_vocab() == 20);
  CHECK(s2s->target_vocab() == 10);
  CHECK(s2s->num_classes() == 10);
  CHECK(s2s->input_length() == 12);
  CHECK(s2s->target_length() == 4);
  const Batch a = s2s->examples(7, 3, 20), b = one->examples(7, 3, 20);
  REQUIRE(a.decoder_inputs.shape() == std::vector<std::size_t>{20, 4});
  REQUIRE(a.targets.shape() == std::vector<std::size_t>{20, 4});
  for (std::size_t r = 0; r < 20; ++r) {
    const std::vector<Index> src = row_of(a.inputs, r), q = row_of(a.decoder_inputs, r), ans = row_of(a.targets, r);
    const std::vector<Index> in = row_of(b.inputs, r), tg = row_of(b.targets, r);
    CHECK(std::equal(src.begin(), src.end(), in.begin()));        // the same pairs
    CHECK(std::equal(q.begin(), q.end(), in.begin() + 12));       // the same queries
    CHECK(std::equal(ans.begin(), ans.end(), tg.begin() + 12));   // the same answers
    for (std::size_t j = 0; j < 4; ++j) {  // each answer is the value listed after its key
      const auto key = std::find(src.begin(), src.end(), q[j]);
      REQUIRE(key != src.end());
      REQUIRE((key - src.begin()) % 2 == 0);
      CHECK(ans[j] == *(key + 1) - 10);
    }
  }
  CHECK_THROWS_WITH_AS(task("seq2seq_recall", 4, 0, 5), doctest::Contains("pairs"), OptionError);
}

TEST_CASE("tasks: examples are a pure function of (seed, index)") {
  for (const char* name : {"sort", "recall", "seq2seq_sort", "seq2seq_recall"}) {
    CAPTURE(name);
    auto t = task(name);
    Batch all = t->examples(11, 0, 8), part = t->examples(11, 5, 3);
    CHECK(same_batch(t->examples(11, 0, 8), all));
    for (std::size_t r = 0; r < 3; ++r) {
      CHECK(row_of(part.inputs, r) == row_of(all.inputs, 5 + r));
      CHECK(row_of(part.targets, r) == row_of(all.targets, 5 + r));
      if (t->seq2seq()) CHECK(row_of(part.decoder_inputs, r) == row_of(all.decoder_inputs, 5 + r));
    }
    CHECK_FALSE(t->examples(12, 0, 8).inputs == all.inputs);
  }
}

TEST_CASE("tasks: a large batch is the same with 1 and 2 threads") {
  auto t = task("recall", 16, 0, 8);
  const int saved = num_threads();
  set_num_threads(1);
  Batch one = t->examples(2, 100, 300);
  set_num_threads(2);
  Batch two = t->examples(2, 100, 300);
  set_num_threads(saved);
  CHECK(same_batch(one, two));
}

TEST_CASE("make_task: bad options throw OptionError naming the option") {
  CHECK_THROWS_WITH_AS(task("sorting"), doctest::Contains("TaskOptions: name: expected one of copy, reverse, sort"), OptionError);
  CHECK_THROWS_WITH_AS(task("sortt"), doctest::Contains("did you mean 'sort'?"), OptionError);
  CHECK_THROWS_WITH_AS(task("sort", 1), doctest::Contains("vocab: expected at least 2 tokens, found 1"), OptionError);
  CHECK_THROWS_WITH_AS(task("copy", 10, 0), doctest::Contains("length: expected a positive integer"), OptionError);
  CHECK_THROWS_WITH_AS(task("seq2seq_sort", 10, 0), doctest::Contains("length:"), OptionError);
  CHECK_THROWS_WITH_AS(task("recall", 4, 12, 5), doctest::Contains("pairs: recall needs distinct keys: pairs (5) must not exceed vocab (4)"), OptionError);
  CHECK_THROWS_WITH_AS(task("recall", 4, 12, 0), doctest::Contains("pairs: expected a positive integer"), OptionError);
  CHECK_NOTHROW(task("recall", 4, 0, 4));  // length is ignored by recall
}

TEST_CASE("Dataset: eval set is fixed and comes from a different stream than training") {
  std::shared_ptr<const Task> t = task("sort", 16, 10);
  Dataset a(t, 42, 32), b(t, 42, 32);
  CHECK(same_batch(a.eval_set(), b.eval_set()));
  CHECK(a.eval_set().size() == 32);
  CHECK(a.eval_stream() != a.train_stream());
  Batch train = a.next_train(32);
  CHECK_FALSE(train.inputs == a.eval_set().inputs);
  // No eval example shows up among the first training examples (16^10 possible inputs).
  Batch more = a.train_examples(0, 256);
  for (std::size_t e = 0; e < 32; ++e)
    for (std::size_t r = 0; r < 256; ++r) CHECK(row_of(a.eval_set().inputs, e) != row_of(more.inputs, r));
  CHECK_FALSE(Dataset(t, 43, 32).eval_set().inputs == a.eval_set().inputs);
  CHECK(same_batch(a.eval_set(), b.eval_set()));  // training does not touch the eval set
}

TEST_CASE("Dataset: the training stream is deterministic and advances by the batch") {
  std::shared_ptr<const Task> t = task("seq2seq_reverse", 8, 6);
  Dataset a(t, 1, 4), b(t, 1, 4);
  Batch a1 = a.next_train(5), a2 = a.next_train(3);
  CHECK(a.position() == 8);
  CHECK(same_batch(b.next_train(8), concat(a1, a2)));
  CHECK(same_batch(a1, t->examples(a.train_stream(), 0, 5)));
  CHECK_FALSE(a2.inputs == a1.inputs);
}

TEST_CASE("Dataset: position save/restore replays the same batches") {
  std::shared_ptr<const Task> t = task("recall");
  Dataset a(t, 9, 8);
  a.next_train(7);
  const std::uint64_t saved = a.position();
  Batch expected = a.next_train(4);
  Dataset b(t, 9, 8);
  b.set_position(saved);
  CHECK(same_batch(b.next_train(4), expected));
  CHECK(b.position() == a.position());
}

TEST_CASE("Dataset: shards concatenate to the global batch and advance every rank alike") {
  std::shared_ptr<const Task> t = task("seq2seq_sort");
  for (std::size_t train_size : {std::size_t(0), std::size_t(5)}) {
    CAPTURE(train_size);
    Dataset whole(t, 3, 4, train_size);
    whole.next_train(2);
    Batch global = whole.next_train(6);
    Batch joined;
    for (std::size_t rank = 0; rank < 3; ++rank) {
      Dataset d(t, 3, 4, train_size);
      d.next_train(2);
      Batch shard = d.next_train_shard(6, rank, 3);
      CHECK(shard.size() == 2);
      CHECK(d.position() == 8);
      joined = concat(joined, shard);
    }
    CHECK(same_batch(joined, global));
  }
  Dataset d(t, 3, 4);
  CHECK_THROWS_WITH_AS(d.next_train_shard(7, 0, 2), doctest::Contains("not divisible"), ValueError);
  CHECK_THROWS_WITH_AS(d.next_train_shard(8, 2, 2), doctest::Contains("rank 2"), ValueError);
  CHECK(d.position() == 0);
}

TEST_CASE("Dataset: a fixed training set is cycled in order") {
  std::shared_ptr<const Task> t = task("reverse");
  Dataset d(t, 5, 0, 4);
  CHECK(d.eval_set().size() == 0);
  Batch first = d.next_train(4);
  CHECK(same_batch(first, t->examples(d.train_stream(), 0, 4)));
  Batch wrap = d.next_train(6);  // examples 0..3, then 0..1 again
  CHECK(same_batch(wrap, concat(first, t->examples(d.train_stream(), 0, 2))));
  Batch middle = d.next_train(3);  // positions 10..12 -> examples 2, 3, 0
  CHECK(same_batch(middle, concat(t->examples(d.train_stream(), 2, 2), t->examples(d.train_stream(), 0, 1))));
}
