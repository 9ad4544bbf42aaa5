// Head scores against answers known in advance: hand-made patterns and a hand-set model.
#include <doctest/doctest.h>

#include <cmath>

#include "constructed.hpp"
#include "qkv/data/grammar.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/model/evaluate.hpp"

namespace qkv {
namespace {

// (1, H, T, T) of zeros.
Array<float> zeros(std::size_t H, std::size_t T) {
  Array<float> w = Array<float>::from_shape({1, H, T, T});
  std::fill(w.begin(), w.end(), 0.0f);
  return w;
}

}  // namespace

TEST_CASE("head scores: a previous-token pattern, a uniform causal one and a sink, scored by hand") {
  const std::size_t T = 8;
  Array<float> w = zeros(3, T);
  for (std::size_t i = 0; i < T; ++i) {
    w(0, 0, i, i ? i - 1 : 0) = 1;                                 // head 0: previous token
    for (std::size_t j = 0; j <= i; ++j) w(0, 1, i, j) = 1.0f / float(i + 1);  // head 1: uniform causal
    w(0, 2, i, 0) = 1;                                             // head 2: everything on token 0
  }
  const auto prev = interp::diagonal_scores(w, -1, 1);
  const auto self = interp::diagonal_scores(w, 0, 0);
  const auto first = interp::column_scores(w, 0, 1);
  const auto em = interp::entropy_and_max(w);
  CHECK(prev[0] == doctest::Approx(1.0));
  CHECK(self[0] == doctest::Approx(1.0 / T));  // only row 0 (its one key is itself)
  // uniform causal: w[i, i-1] = 1/(i+1), mean over i = 1..7
  double expect = 0;
  for (std::size_t i = 1; i < T; ++i) expect += 1.0 / double(i + 1);
  CHECK(prev[1] == doctest::Approx(expect / 7));
  CHECK(first[1] == doctest::Approx(expect / 7));
  CHECK(first[2] == doctest::Approx(1.0));
  CHECK(prev[2] == doctest::Approx(1.0 / 7));  // row 1 only: its previous token is token 0
  CHECK(em[0].first == doctest::Approx(0.0));
  CHECK(em[0].second == doctest::Approx(1.0));
  double h = 0;
  for (std::size_t i = 0; i < T; ++i) h += std::log(double(i + 1));
  CHECK(em[1].first == doctest::Approx(h / T));  // entropy of uniform over i+1 keys = log(i+1)

  interp::HeadScores s;
  s.previous_token = prev[0], s.first_token = first[0], s.self = self[0];
  CHECK(interp::head_label(s) == "previous-token");
  s.previous_token = 0.45;  // below 0.5: no label
  CHECK(interp::head_label(s) == "");
  s.induction = 0.9;
  CHECK(interp::head_label(s) == "induction");
}

TEST_CASE("head scores: the induction score is the weight on the token after the previous occurrence") {
  const std::size_t T = 12, N = T / 2;
  const IndexArray r = interp::repeated_random_tokens(3, T, 50, 7);
  for (std::size_t b = 0; b < 3; ++b)
    for (std::size_t t = N; t < T; ++t) CHECK(r(b, t) == r(b, t - N));
  CHECK(interp::repeated_random_tokens(3, T, 50, 7) == r);  // a function of the seed
  CHECK(!(interp::repeated_random_tokens(3, T, 50, 8) == r));
  Array<float> w = zeros(2, T);
  for (std::size_t i = 0; i < T; ++i) {
    // head 0 is an induction head on the second half; head 1 attends to the previous occurrence
    // itself (a duplicate-token head), one before the induction target
    w(0, 0, i, i >= N ? i - N + 1 : i) = 1;
    w(0, 1, i, i >= N ? i - N : i) = 1;
  }
  const auto ind = interp::diagonal_scores(w, 1 - long(N), N);
  CHECK(ind[0] == doctest::Approx(1.0));
  CHECK(ind[1] == doctest::Approx(0.0));
}

TEST_CASE("head scores: retrieval accuracy counts queries whose strongest key is the matching key or its value") {
  // k1 v1 k2 v2 q(k2) q(k1): targets at the queries
  IndexArray tokens = IndexArray::from_shape({1, 6});
  IndexArray targets = IndexArray::from_shape({1, 6});
  const Index seq[6] = {3, 10, 5, 11, 5, 3};
  for (std::size_t t = 0; t < 6; ++t) tokens(0, t) = seq[t], targets(0, t) = t >= 4 ? seq[t] + 7 : data::kIgnore;
  Array<float> w = zeros(2, 6);
  for (std::size_t i = 0; i < 6; ++i) w(0, 0, i, 0) = 1, w(0, 1, i, 0) = 1;
  w(0, 0, 4, 0) = 0, w(0, 0, 4, 3) = 1;  // head 0: query 4 (token 5) on v2 (position 3): right
  // head 0 query 5 (token 3) on k1 (position 0): right. Head 1: query 4 on position 0: wrong.
  const auto acc = interp::retrieval_scores(w, tokens, targets);
  CHECK(acc[0] == doctest::Approx(1.0));
  CHECK(acc[1] == doctest::Approx(0.5));
  CHECK_THROWS_AS(interp::retrieval_scores(w, IndexArray::from_shape({1, 5}), targets), ShapeError);
}

TEST_CASE("head scores: cross-attention retrieval finds the query's key in the source") {
  // source k1 v1 k2 v2 = 3 10 5 11; decoder queries 5 3 (both scored)
  IndexArray source = IndexArray::from_shape({1, 4}), queries = IndexArray::from_shape({1, 2});
  IndexArray targets = IndexArray::from_shape({1, 2});
  const Index src[4] = {3, 10, 5, 11};
  for (std::size_t t = 0; t < 4; ++t) source(0, t) = src[t];
  queries(0, 0) = 5, queries(0, 1) = 3, targets(0, 0) = 4, targets(0, 1) = 3;
  Array<float> w = Array<float>::from_shape({1, 2, 2, 4});
  std::fill(w.begin(), w.end(), 0.0f);
  w(0, 0, 0, 3) = 1, w(0, 0, 1, 0) = 1;  // head 0: query 5 on v2, query 3 on k1: both right
  w(0, 1, 0, 3) = 1, w(0, 1, 1, 2) = 1;  // head 1: query 3 on k2: wrong
  const auto acc = interp::retrieval_scores(w, queries, source, targets, false);
  CHECK(acc[0] == doctest::Approx(1.0));
  CHECK(acc[1] == doctest::Approx(0.5));
  // Keys "earlier" than the query, as for self-attention, leave query 0 nothing to find.
  const auto causal = interp::retrieval_scores(w, queries, source, targets, true);
  CHECK(causal[0] == doctest::Approx(1.0));  // only query 1 (token 3, key at 0 < 1) counts
  CHECK_THROWS_AS(interp::retrieval_scores(w, queries, IndexArray::from_shape({1, 3}), targets, false), ShapeError);
}

TEST_CASE("head scores: a hand-set model's previous-token and first-token heads are found and labelled") {
  test::Constructed m = test::constructed_decoder();
  // the model does what it was built for: it predicts the previous token everywhere
  const data::Batch b = test::previous_token_batch(32, m.T, m.V, 3);
  CHECK(model::evaluate(*m.model, b, 32).token_accuracy == doctest::Approx(1.0));

  interp::HeadScoreOptions o;
  o.examples = 32;
  const auto s = interp::head_scores(*m.model, *m.task, b, o);
  REQUIRE(s.size() == 2);
  CHECK(s[0].layer == "blocks.0.attn");
  CHECK(s[0].kind == model::AttentionKind::Causal);
  CHECK(s[0].previous_token > 0.99);
  // query 1's previous token is token 0: of the 15 queries i >= 1, one puts its weight there
  CHECK(s[0].first_token == doctest::Approx(1.0 / 15).epsilon(0.01));
  CHECK(s[0].label == "previous-token");
  CHECK(s[1].first_token > 0.99);
  CHECK(s[1].previous_token < 0.1);  // row 1's previous token is token 0
  CHECK(s[1].label == "first-token");
  CHECK(s[0].max_weight > 0.99);
  CHECK(s[0].entropy < 0.01);
  CHECK(s[0].induction < 0.05);  // a previous-token head is not an induction head
  CHECK(std::isnan(s[0].retrieval));  // not a recall task
  const std::string table = interp::format_head_scores(s);
  CHECK(table.find("previous-token") != std::string::npos);
  CHECK(table.find("first-token") != std::string::npos);
  // Dominant offsets: head 0's query 0 can only see itself (offset 0), its 15 others look one back;
  // head 1 looks at key 0 from every query, offsets 0, -1, ..., -15 once each (a tie: 0, nearest 0).
  CHECK(s[0].offset == -1);
  CHECK(s[0].offset_share == doctest::Approx(15.0 / 16));
  CHECK(s[0].role_label == "positional (previous)");
  CHECK(s[1].offset == 0);
  CHECK(s[1].offset_share == doctest::Approx(1.0 / 16));
  CHECK(s[1].role_label == "");  // a sink is not a fixed distance
  const std::string csv = interp::head_scores_csv(s);
  CHECK(csv.rfind("layer,layer_index,head,kind,entropy,max_weight,previous_token,first_token,self,induction,retrieval,offset,"
                  "offset_share,label,role_label\n", 0) == 0);
  CHECK(csv.find(",causal,") != std::string::npos);
  CHECK(csv.find(",,-1,0.9375,previous-token,positional (previous)\n") != std::string::npos);  // retrieval empty (NaN)
  CHECK(table.find("positional (previous)") != std::string::npos);
}

TEST_CASE("head scores: dominant offsets of hand-made patterns, and the positional labels they earn") {
  const std::size_t T = 8;
  Array<float> w = zeros(3, T);
  for (std::size_t i = 0; i < T; ++i) {
    w(0, 0, i, std::min(i + 1, T - 1)) = 1;  // head 0: the next token (the last row: itself)
    w(0, 1, i, i >= 3 ? i - 3 : 0) = 1;      // head 1: three back (rows 0-2: token 0)
    w(0, 2, i, (i * 3 + 1) % T) = 1;         // head 2: no fixed distance (each offset at most twice)
  }
  IndexArray none = IndexArray::from_shape({0});
  const auto o = interp::dominant_offsets(w, none);
  CHECK(o[0] == std::pair<long, double>{1, 7.0 / 8});
  CHECK(o[1] == std::pair<long, double>{-3, 5.0 / 8});
  CHECK(o[2].second == doctest::Approx(2.0 / 8));
  // Padding rows (words -1) do not count: with the last three rows padding, head 1 has 2 of 5.
  IndexArray words = IndexArray::from_shape({1, T});
  for (std::size_t i = 0; i < T; ++i) words(0, i) = i < 5 ? Index(i) : -1;
  CHECK(interp::dominant_offsets(w, words)[1] == std::pair<long, double>{-3, 2.0 / 5});
  interp::HeadScores h;
  h.offset = o[0].first, h.offset_share = o[0].second;
  CHECK(interp::role_label(h) == "positional (next)");
  h.offset = o[1].first, h.offset_share = o[1].second;
  CHECK(interp::role_label(h) == "positional (offset -3)");
  h.offset = 2;
  CHECK(interp::role_label(h) == "positional (offset +2)");
  h.offset = 0;
  CHECK(interp::role_label(h) == "positional (self)");
  h.offset_share = 0.45;  // under the threshold: neither
  CHECK(interp::role_label(h) == "");
  interp::LabelThresholds t;
  t.positional = 0.4;
  CHECK(interp::role_label(h, t) == "positional (self)");
}

TEST_CASE("role scores: a hand-set model's verb->object and verb->subject heads, scored and labelled as worked out on paper") {
  test::Constructed m = test::constructed_role_encoder();
  const auto& task = static_cast<const data::GrammarTask&>(*m.task);
  // Five sentences, one per row; the verb tokens and their partners (docs/tasks.md):
  //   他打碎了花瓶     打 (1) -> subject 他 (0), object 花瓶 (4 5)
  //   我爱吃苹果       爱 (1) -> 我, 吃 (the event);  吃 (2) -> 我, 苹果 (3 4)
  //   猫喜欢追逐老鼠   喜 欢 (1 2) -> 猫, 追逐 (3 4);  追 逐 -> 猫, 老鼠 (5 6)
  //   花瓶被他打碎了   打 (4) -> subject 他 (3), object 花瓶 (0 1): roles are semantic
  //   猫吃鱼           吃 (1) -> 猫 (0), 鱼 (2)
  data::Batch b;
  for (const char* text : {"他打碎了花瓶", "我爱吃苹果", "猫喜欢追逐老鼠", "花瓶被他打碎了", "猫吃鱼"})
    b = data::concat(b, task.analyse(text));
  // Every verb token scored (as if masked; the inputs stay, so the hand-set heads see the verbs):
  // the scores at the scored tokens are then those over every verb.
  const std::vector<std::pair<std::size_t, std::size_t>> verbs = {{0, 1}, {1, 1}, {1, 2}, {2, 1}, {2, 2}, {2, 3}, {2, 4}, {3, 4}, {4, 1}};
  for (auto [row, t] : verbs) b.targets(row, t) = b.inputs(row, t);
  const auto& names = task.relation_names();
  const std::size_t subject = std::size_t(std::find(names.begin(), names.end(), "verb->subject") - names.begin());
  const std::size_t object = std::size_t(std::find(names.begin(), names.end(), "verb->object") - names.begin());
  interp::HeadScoreOptions o;
  o.examples = 5;
  const std::vector<interp::HeadScores> s = interp::head_scores(*m.model, *m.task, b, o);
  REQUIRE(s.size() == 2);
  // Head 0 looks from a verb at the first object character: right for 打 吃 追 逐 打 吃, wrong for
  // 爱 喜 欢 (whose object is a verb): 6 of 9 verb tokens. It never finds a subject.
  CHECK(s[0].roles[object].second == doctest::Approx(6.0 / 9));
  CHECK(s[0].roles[subject].second == 0.0);
  // Head 1 looks from a verb at the subject character: all 9.
  CHECK(s[1].roles[subject].second == 1.0);
  CHECK(s[1].roles[object].second == 0.0);
  // The best fixed offsets: -1 finds the subject of 打 爱 喜 打 吃 (5 of 9); +1 the object of 爱 吃
  // 欢 逐 吃 (5 of 9; +2 ties it with 吃 喜 欢 追 逐, and the first best offset is kept).
  const auto base = interp::role_baselines(*m.task, b);
  CHECK(base[subject].share == doctest::Approx(5.0 / 9));
  CHECK(base[subject].offset == -1);
  CHECK(base[object].share == doctest::Approx(5.0 / 9));
  CHECK(base[object].offset == 1);
  CHECK(base[subject].count == 9);
  // At the scored tokens (every verb) the same, and the offset is chosen there (no validation rows).
  CHECK(s[0].roles_scored[object] == doctest::Approx(6.0 / 9));
  CHECK(s[1].roles_scored[subject] == 1.0);
  CHECK(base[object].scored_offset == 1);
  CHECK(base[object].scored_share == doctest::Approx(5.0 / 9));
  CHECK(base[object].scored_count == 9);
  CHECK(std::isnan(base[object].validation_share));
  // Both heads beat their relation's offset by more than 0.1 (6/9 - 5/9 = 0.11): labelled by it.
  CHECK(s[0].label == "verb->object");
  CHECK(s[1].label == "verb->subject");
  CHECK(s[0].role_label == "role: verb->object");
  CHECK(s[1].role_label == "role: verb->subject");
  // Without 猫吃鱼 head 0 ties the offset (5 of 8 both): finding objects is then what a fixed offset
  // does too, and it earns no role label.
  data::Batch four = data::rows(b, 0, 4);
  o.examples = 4;
  CHECK(interp::head_scores(*m.model, *m.task, four, o)[0].label != "verb->object");
  // The table and the CSV carry the role columns and the baseline row.
  const std::string table = interp::format_head_scores(s, base), csv = interp::head_scores_csv(s, base);
  CHECK(table.find("verb->object") != std::string::npos);
  CHECK(table.find("(the best fixed offset)") != std::string::npos);
  CHECK(csv.find(",verb->subject,verb->object,") != std::string::npos);
  CHECK(csv.find("\nbaseline,") != std::string::npos);
  // A task without relations has no role columns.
  test::Constructed plain = test::constructed_decoder();
  const data::Batch pb = test::previous_token_batch(4, test::Constructed::T, test::Constructed::V, 1);
  CHECK(interp::head_scores(*plain.model, *plain.task, pb, o).front().roles.empty());
}

TEST_CASE("role scores at the scored tokens: the offset chosen on validation rows, where it misses, and the role label") {
  test::Constructed m = test::constructed_role_encoder();
  const auto& task = static_cast<const data::GrammarTask&>(*m.task);
  const auto& names = task.relation_names();
  const std::size_t subject = std::size_t(std::find(names.begin(), names.end(), "verb->subject") - names.begin());
  const std::size_t object = std::size_t(std::find(names.begin(), names.end(), "verb->object") - names.begin());
  data::Batch b;
  for (const char* text : {"他打碎了花瓶", "我爱吃苹果", "猫喜欢追逐老鼠", "花瓶被他打碎了", "猫吃鱼"})
    b = data::concat(b, task.analyse(text));
  // Five verbs scored: 打 (row 0), 爱 (row 1), 喜 and 追 (row 2), 吃 (row 4). Their objects sit at
  // +3 and +4 (花瓶), +1 (吃), +2 and +3 (追逐), +2 and +3 (老鼠), +1 (鱼): +3 is best here, 3 of 5.
  for (auto [row, t] : std::vector<std::pair<std::size_t, std::size_t>>{{0, 1}, {1, 1}, {2, 1}, {2, 3}, {4, 1}})
    b.targets(row, t) = b.inputs(row, t);
  interp::RoleTokens scored;
  scored.scored = true;
  const interp::OffsetBaseline here = interp::role_baseline(b, object, scored);
  CHECK(here.offset == 3);
  CHECK(here.share == doctest::Approx(3.0 / 5));
  CHECK(interp::offset_share(b, object, 1, scored) == doctest::Approx(2.0 / 5));
  // The validation rows: 猫吃鱼 with 吃 scored, whose object is at +1 and subject at -1.
  data::Batch v = task.analyse("猫吃鱼");
  v.targets(0, 1) = v.inputs(0, 1);
  const auto base = interp::role_baselines(*m.task, b, &v);
  CHECK(base[object].scored_offset == 1);
  CHECK(base[object].validation_share == 1.0);
  CHECK(base[object].scored_share == doctest::Approx(2.0 / 5));  // +1 on the test rows: 爱 and 吃
  CHECK(base[object].scored_count == 5);
  CHECK(base[object].off_offset_count == 3);                      // 打, 喜, 追
  CHECK(base[subject].scored_offset == -1);
  CHECK(base[subject].scored_share == doctest::Approx(4.0 / 5));  // all but 追 (猫 three back)

  interp::HeadScoreOptions o;
  o.examples = 5;
  const auto s = interp::head_scores(*m.model, *m.task, b, o, &v);
  // Head 0 (the object character): right for 打, 追, 吃; wrong for 爱, 喜 (objects that are verbs).
  CHECK(s[0].roles_scored[object] == doctest::Approx(3.0 / 5));
  CHECK(s[0].roles_off_offset[object] == doctest::Approx(2.0 / 3));  // 打 and 追 of 打, 喜, 追
  CHECK(s[0].roles_validation[object] == 1.0);
  CHECK(s[1].roles_scored[subject] == 1.0);
  CHECK(s[1].roles_off_offset[subject] == 1.0);  // 追: 猫 found where -1 misses it
  // 0.6 - 0.4 and 1.0 - 0.8 beat the validation-chosen offsets by 0.2: role heads. Chosen on the
  // test rows themselves, +3 ties head 0 (0.6) and it would not be one.
  CHECK(s[0].role_label == "role: verb->object");
  CHECK(s[1].role_label == "role: verb->subject");
  CHECK(interp::head_scores(*m.model, *m.task, b, o)[0].role_label != "role: verb->object");
  // Scores by name, as the CSV and the JSON columns give them.
  CHECK(interp::score(s[0], "verb->object@scored") == doctest::Approx(3.0 / 5));
  CHECK(interp::score(s[0], "verb->object@off_offset") == doctest::Approx(2.0 / 3));
  CHECK(interp::score(s[0], "verb->object@validation") == 1.0);
  CHECK(std::isnan(interp::score(s[0], "verb->object@nowhere")));
  const std::vector<std::string> columns = interp::heads_score_names(m.task.get());
  CHECK(std::find(columns.begin(), columns.end(), "verb->subject@off_offset") != columns.end());
  const std::string table = interp::format_head_scores(s, base);
  CHECK(table.find("role: verb->object") != std::string::npos);
  CHECK(table.find("(the offset chosen on the validation rows, its share here)") != std::string::npos);
  const std::string csv = interp::head_scores_csv(s, base);
  CHECK(csv.find(",verb->subject@scored,") != std::string::npos);
  CHECK(csv.find(",verb->object,role: verb->object\n") != std::string::npos);

  // What `qkv heads` prints and sends: a masked model has no induction score, and says so.
  interp::HeadsResult r;
  r.examples = 5, r.validation_examples = 1, r.task = "grammar", r.masked = true;
  r.score_names = columns, r.heads = s, r.baselines = base;
  const std::string text = interp::format_heads(r, "m.h5");
  CHECK(text.rfind("m.h5: grammar, 5 held-out (test) examples; role scores at the masked tokens, offsets chosen on 1 "
                   "validation examples; no induction score (a masked model does not predict the next token)\n", 0) == 0);
  CHECK(text.find("positional (previous, next, self, offset +k)") != std::string::npos);
  r.masked = false, r.induction_sequences = 5;
  CHECK(interp::format_heads(r, "m.h5").find("; induction score on 5 random sequences repeated twice\n") != std::string::npos);
  const std::string json = interp::to_json(r);
  CHECK(json.find("\"role_label\":\"role: verb->object\"") != std::string::npos);
  CHECK(json.find("\"offsets\":{\"verb->subject\":{\"offset\":-1,") != std::string::npos);
  CHECK(json.find("\"verb->object@off_offset\":") != std::string::npos);
}

TEST_CASE("head divergence: the Jensen-Shannon divergence of two heads' rows, 0 for a copy, 1 bit for disjoint rows") {
  // Three heads over 4 queries x 4 keys: head 0 one-hot on key 0 in query row 0, uniform in the
  // others; head 1 its copy; head 2 one-hot on key 1 in row 0 (disjoint from head 0's: 1 bit),
  // uniform in the others (0 bits): a mean of 1/4 over the 4 rows.
  Array<float> w = Array<float>::from_shape({1, 3, 4, 4});
  std::fill(w.begin(), w.end(), 0.25f);
  for (std::size_t h = 0; h < 3; ++h)
    for (std::size_t j = 0; j < 4; ++j) w(0, h, 0, j) = j == (h == 2 ? 1u : 0u) ? 1.0f : 0.0f;
  const Array<double> js = interp::pattern_divergence(w);
  CHECK(js(0, 1) == 0.0);
  CHECK(js(0, 2) == doctest::Approx(0.25));
  CHECK(js(2, 0) == js(0, 2));
  // Half the weight apart in every row: JS of (1/2, 1/2, 0) and (0, 1/2, 1/2) is 1/2 bit.
  Array<float> v = Array<float>::from_shape({1, 2, 1, 3});
  const float rows[2][3] = {{0.5f, 0.5f, 0.0f}, {0.0f, 0.5f, 0.5f}};
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t j = 0; j < 3; ++j) v(0, h, 0, j) = rows[h][j];
  CHECK(interp::pattern_divergence(v)(0, 1) == doctest::Approx(0.5));
  // Through a model and into the CSV: one row per pair of heads of each layer.
  test::Constructed m = test::constructed_role_encoder();
  const auto& task = static_cast<const data::GrammarTask&>(*m.task);
  const auto all = interp::head_divergence(*m.model, task.text_row("猫吃鱼", "test"), 1);
  REQUIRE(all.size() == 1);
  CHECK(all[0](0, 1) > 0.0);
  const std::string csv = interp::head_divergence_csv(*m.model, all);
  CHECK(csv.rfind("layer,layer_index,head_a,head_b,js_bits\nblocks.0.attn,0,0,1,", 0) == 0);
}

}  // namespace qkv
