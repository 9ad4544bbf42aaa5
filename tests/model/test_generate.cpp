// Sampling: greedy, temperature, top-k and top-p against their definitions; generation is a
// function of the seed, and the KV cache does not change the text.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "qkv/model/generate.hpp"
#include "test_util.hpp"

namespace qkv {

TEST_CASE("sample_token: greedy, and frequencies that follow softmax(logits / T) restricted by top-k and top-p") {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  Generator g(1);
  model::SamplingOptions greedy{0.0, 0, 1.0};
  CHECK(model::sample_token(logits.data(), 5, greedy, g) == 1);  // the first maximum
  auto frequencies = [&](const model::SamplingOptions& o) {
    Generator gen(2);
    std::vector<double> f(5, 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) f[std::size_t(model::sample_token(logits.data(), 5, o, gen))] += 1.0 / n;
    return f;
  };
  // Temperature 2: p proportional to exp(l / 2).
  auto f = frequencies({2.0, 0, 1.0});
  double z = 0;
  for (float l : logits) z += std::exp(l / 2.0);
  for (std::size_t i = 0; i < 5; ++i) CHECK(f[i] == doctest::Approx(std::exp(logits[i] / 2.0) / z).epsilon(0.05));
  // top-k 2: only the two 3.0 logits (ids 1 and 3), half each.
  f = frequencies({1.0, 2, 1.0});
  CHECK(f[1] == doctest::Approx(0.5).epsilon(0.05));
  CHECK(f[3] == doctest::Approx(0.5).epsilon(0.05));
  CHECK(f[0] + f[2] + f[4] == 0.0);
  // top-p 0.5: the two largest (each ~0.38 of the mass at T = 1) reach it; the third is cut.
  f = frequencies({1.0, 0, 0.5});
  CHECK(f[2] == 0.0);
  CHECK(f[1] + f[3] == doctest::Approx(1.0));
  // A tiny top-p keeps the single most likely token (ties by id).
  f = frequencies({1.0, 0, 1e-9});
  CHECK(f[1] == doctest::Approx(1.0));
  model::SamplingOptions bad{-1.0, 0, 1.0};
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("temperature"), OptionError);
  bad = {1.0, 0, 0.0};
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("top_p: expected a number in (0, 1]"), OptionError);
}

TEST_CASE("generate: the same seed gives the same tokens, with or without the cache - another seed differs") {
  nn::TransformerOptions o;
  o.arch = nn::Arch::Decoder;
  o.d_model = 16;
  o.attn.num_heads = 2;
  o.layers = 2;
  o.ff.hidden = 32;
  o.max_len = 40;
  Generator init(3);
  nn::DecoderModel<float> m(23, o, init);
  model::GenerateOptions g;
  g.max_tokens = 100;  // past the 40-token context: the window jumps twice
  g.seed = 5;
  std::vector<Index> streamed;
  const auto a = model::generate(m, {1, 2, 3}, g, [&](Index t) { streamed.push_back(t); });
  CHECK(a.size() == 100);
  CHECK(a == streamed);
  g.cache = false;
  CHECK(model::generate(m, {1, 2, 3}, g) == a);
  g.seed = 6;
  CHECK(model::generate(m, {1, 2, 3}, g) != a);
  g.sampling.temperature = 0;
  CHECK(model::generate(m, {1, 2, 3}, g) == model::generate(m, {1, 2, 3}, [&] { auto h = g; h.seed = 99; return h; }()));
  CHECK_THROWS_WITH_AS(model::generate(m, {}, g), doctest::Contains("prompt is empty"), ValueError);
}

}  // namespace qkv
