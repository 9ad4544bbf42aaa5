// Activation patching against answers known in advance: in the hand-set model (constructed.hpp)
// head 0 copies the previous token to the output and head 1 reaches the output through zero
// columns of w_o, so patching head 0 restores the whole logit difference and head 1 none of it.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "constructed.hpp"
#include "qkv/interp/patching.hpp"

namespace qkv {
namespace {

// Two rows of the constructed decoder's tokens that differ at `at` only.
std::pair<data::Batch, data::Batch> pair_differing_at(const test::Constructed& m, std::size_t at) {
  std::vector<Index> clean;
  for (std::size_t t = 0; t < m.T; ++t) clean.push_back(Index((3 * t + 1) % m.V));
  std::vector<Index> corrupt = clean;
  corrupt[at] = (clean[at] + 3) % Index(m.V);
  return {data::ids_row(*m.task, clean, "clean"), data::ids_row(*m.task, corrupt, "corrupt")};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("patching: the previous-token head restores the whole logit difference, the head without output none") {
  test::Constructed m = test::constructed_decoder();
  // The token before the last position differs: at the last position (the default) the model
  // predicts that token, 'clean[14]' in the clean run and 'corrupt[14]' in the corrupted one.
  auto [clean, corrupt] = pair_differing_at(m, m.T - 2);
  const interp::PatchingResult r = interp::patch_heads(*m.model, *m.task, clean, corrupt);
  CHECK(r.position == m.T - 1);
  CHECK(r.answer == clean.inputs(0, m.T - 2));  // the defaults: each run's most likely token
  CHECK(r.wrong == corrupt.inputs(0, m.T - 2));
  CHECK(r.clean_diff > 1.0);
  CHECK(r.corrupt_diff < -1.0);
  CHECK(r.clean_p_answer > 0.5);
  CHECK(r.corrupt_p_answer < 0.1);
  REQUIRE(r.layers == std::vector<std::string>{"blocks.0.attn"});
  REQUIRE(r.heads.size() == 1);
  REQUIRE(r.heads[0].size() == 2);
  CHECK(r.heads[0][0].restored == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(r.heads[0][0].logit_diff == doctest::Approx(r.clean_diff).epsilon(1e-5));
  CHECK(r.heads[0][0].p_answer == doctest::Approx(r.clean_p_answer).epsilon(1e-5));
  CHECK(r.heads[0][1].restored == 0.0);  // exactly: the corrupted run's logits, bit for bit
  CHECK(r.heads[0][1].logit_diff == r.corrupt_diff);

  // The model is unchanged afterwards: no hook is left behind.
  const Array<float> before = m.model->logits(corrupt).value();
  CHECK(m.model->logits(corrupt).value() == before);
  const interp::PatchingResult again = interp::patch_heads(*m.model, *m.task, clean, corrupt);
  CHECK(again.corrupt_diff == r.corrupt_diff);

  const std::string table = interp::format_patching(r, *m.task);
  CHECK(table.find("at position 15") != std::string::npos);
  CHECK(table.find("0 blocks.0.attn") != std::string::npos);
  CHECK(table.find("1.000") != std::string::npos);
  const std::string json = interp::patching_json(r, *m.task);
  CHECK(json.find("\"position\":15") != std::string::npos);
  CHECK(json.find("\"restored\":0,") != std::string::npos);
}

TEST_CASE("patching: a position, answer and wrong token given, and two equal runs with nothing to restore") {
  test::Constructed m = test::constructed_decoder();
  auto [clean, corrupt] = pair_differing_at(m, 4);
  interp::PatchingOptions o;
  o.position = 5;  // predicts token 4, where the runs differ
  const interp::PatchingResult r = interp::patch_heads(*m.model, *m.task, clean, corrupt, o);
  CHECK(r.answer == clean.inputs(0, 4));
  CHECK(r.heads[0][0].restored == doctest::Approx(1.0).epsilon(1e-5));

  // The clean input patched into itself: with two classes given, both runs' logit differences
  // are the same and the share is undefined (NaN, '-' in the table, null in JSON).
  o.answer = 1, o.wrong = 2;
  const interp::PatchingResult same = interp::patch_heads(*m.model, *m.task, clean, clean, o);
  CHECK(same.clean_diff == same.corrupt_diff);
  CHECK(std::isnan(same.heads[0][0].restored));
  CHECK(interp::format_patching(same, *m.task).find("nothing to restore") != std::string::npos);
  CHECK(interp::patching_json(same, *m.task).find("\"restored\":null") != std::string::npos);
}

TEST_CASE("patching: inputs of different lengths, positions and classes out of range, and one answer are refused") {
  test::Constructed m = test::constructed_decoder();
  auto [clean, corrupt] = pair_differing_at(m, 3);
  const data::Batch shorter = data::ids_row(*m.task, {1, 2, 3}, "corrupt");
  CHECK(error_of([&] { interp::patch_heads(*m.model, *m.task, clean, shorter); }) ==
        "corrupt: patching needs a clean and a corrupted input of the same length (each head is patched position by "
        "position): the clean input has 16 tokens, the corrupted 3 tokens");
  interp::PatchingOptions o;
  o.position = 16;
  CHECK(error_of([&] { interp::patch_heads(*m.model, *m.task, clean, corrupt, o); }) ==
        "position 16: the model's output has 16 positions (0..15)");
  o = {};
  o.answer = 8;
  CHECK(error_of([&] { interp::patch_heads(*m.model, *m.task, clean, corrupt, o); }) ==
        "answer 8: the model's output has 8 classes (0..7)");
  o = {};
  o.answer = 2, o.wrong = 2;
  CHECK(error_of([&] { interp::patch_heads(*m.model, *m.task, clean, corrupt, o); }).find(
            "wrong: answer and wrong are the same, '2' at position 15") == 0);
  // Both runs predict the same token at the last position (they differ at 3 only).
  CHECK(error_of([&] { interp::patch_heads(*m.model, *m.task, clean, corrupt); })
            .find("wrong: the clean and the corrupted input's most likely tokens are the same") == 0);
  CHECK(error_of([&] { interp::patch_heads(*m.model, *m.task, data::concat(clean, clean), corrupt); }) ==
        "corrupt: expected one row each, found 2 clean and 1 corrupted rows");
}

}  // namespace qkv
