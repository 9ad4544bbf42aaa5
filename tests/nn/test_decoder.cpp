// The decoder-only language model: parameter names for each option, causality, gradients,
// decoding with the KV cache equal to recomputing (float64 to 1e-12, float32 to 1e-5, past one
// 64-key block of the fused kernel), and the encoder-decoder's cached decoding.
#include <doctest/doctest.h>

#include "nn/nn_test_util.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/model/generate.hpp"

namespace qkv {
using namespace nn;

namespace {

TransformerOptions decoder(Positional pos, bool tied = false, bool attn_only = false, std::size_t layers = 2) {
  TransformerOptions o;
  o.arch = Arch::Decoder;
  o.d_model = 8;
  o.attn.num_heads = 2;
  o.layers = layers;
  o.ff.hidden = 16;
  o.positional = pos;
  o.tie_embeddings = tied;
  o.attn_only = attn_only;
  o.max_len = 150;
  return o;
}

IndexArray random_ids(std::size_t B, std::size_t T, std::size_t V, std::uint64_t seed) {
  Generator g(seed);
  IndexArray ids = IndexArray::from_shape({B, T});
  for (auto& v : ids) v = Index(g.randint(V));
  return ids;
}

}  // namespace

TEST_CASE("DecoderModel: parameter names for learned/rope positions, tied embeddings, attention-only blocks") {
  Generator gen(1);
  auto names = [&](const TransformerOptions& o) { return test::param_names(DecoderModel<float>(11, o, gen)); };
  auto learned = names(decoder(Positional::Learned));
  CHECK(learned[0] == "tok_emb.weight");
  CHECK(learned[1] == "pos.weight");
  CHECK(learned[2] == "blocks.0.attn.w_q.weight");
  CHECK(std::count(learned.begin(), learned.end(), "blocks.1.ff.fc1.weight") == 1);
  CHECK(learned.back() == "head.weight");
  auto rope = names(decoder(Positional::Rope, true, true));
  CHECK(rope[1] == "blocks.0.attn.w_q.weight");  // no position table with rotary positions
  CHECK(std::find(rope.begin(), rope.end(), "head.weight") == rope.end());  // tied
  CHECK(std::none_of(rope.begin(), rope.end(), [](auto& n) { return n.find(".ff.") != std::string::npos || n.find("norm2") != std::string::npos; }));
  DecoderModel<float> tied(11, decoder(Positional::Rope, true), gen);
  double ss = 0;
  for (float w : tied.tok_emb->weight.value()) ss += double(w) * w;
  CHECK(std::sqrt(ss / 88.0) == doctest::Approx(1.0 / std::sqrt(8.0)).epsilon(0.3));  // N(0, 1/C) init
  CHECK_THROWS_WITH_AS(EncoderModel<float>(5, 5, [] { auto o = decoder(Positional::Rope); o.arch = Arch::Encoder; return o; }()),
                       doctest::Contains("rope"), OptionError);
}

TEST_CASE("DecoderModel: position t's logits depend on tokens <= t only") {
  for (Positional pos : {Positional::Learned, Positional::Sinusoidal, Positional::Rope}) {
    Generator gen(2);
    DecoderModel<double> m(7, decoder(pos, pos == Positional::Rope), gen);
    IndexArray a = random_ids(1, 6, 7, 3), b = a;
    b(0, 4) = (b(0, 4) + 1) % 7;  // change position 4
    const Array<double> la = m.forward(a).value(), lb = m.forward(b).value();
    for (std::size_t t = 0; t < 6; ++t) {
      bool same = true;
      for (std::size_t v = 0; v < 7; ++v) same = same && la(0, t, v) == lb(0, t, v);
      CHECK(same == (t < 4));
    }
  }
}

TEST_CASE("DecoderModel: gradcheck of every parameter (learned untied, rope tied attention-only, post-LN)") {
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    TransformerOptions o = variant == 0 ? decoder(Positional::Learned, false, false, 1)
                           : variant == 1 ? decoder(Positional::Rope, true, true, 2)
                                          : decoder(Positional::Sinusoidal, false, false, 1);
    o.norm_first = variant != 2;
    o.ff.hidden = 6;
    o.max_len = 8;
    o.d_model = 4;
    o.layers = variant == 1 ? 2 : 1;
    Generator gen(4);
    DecoderModel<double> m(4, o, gen);
    const IndexArray ids = random_ids(1, 3, 4, 5);
    test::check_module_grad([&] { return m.forward(ids); }, m);
  }
}

TEST_CASE("DecoderModel: decoding with the KV cache gives the logits of the whole sequence (float64, 1e-12)") {
  for (Positional pos : {Positional::Learned, Positional::Rope}) {
    CAPTURE(int(pos));
    Generator gen(6);
    DecoderModel<double> m(13, decoder(pos), gen);
    m.eval();
    NoGradGuard no_grad;
    const std::size_t T = 140;  // more than two 64-key blocks of the fused kernel
    const IndexArray ids = random_ids(2, T, 13, 7);
    const Array<double> full = m.forward(ids).value();
    // A prompt of 70 in one go, 40 more in one go (queries after cached keys: a causal offset of
    // 70 and keys past the first block), then one token at a time.
    auto cache = m.make_cache();
    auto cols = [&](std::size_t lo, std::size_t hi) {
      IndexArray p = IndexArray::from_shape({2, hi - lo});
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t t = lo; t < hi; ++t) p(b, t - lo) = ids(b, t);
      return p;
    };
    double worst = 0;
    const Array<double> first = m.forward(cols(0, 70), cache).value();
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t t = 0; t < 70; ++t)
        for (std::size_t v = 0; v < 13; ++v) worst = std::max(worst, std::fabs(first(b, t, v) - full(b, t, v)));
    const Array<double> chunk = m.forward(cols(70, 110), cache).value();
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t t = 70; t < 110; ++t)
        for (std::size_t v = 0; v < 13; ++v) worst = std::max(worst, std::fabs(chunk(b, t - 70, v) - full(b, t, v)));
    for (std::size_t t = 110; t < T; ++t) {
      const Array<double> step = m.forward(cols(t, t + 1), cache).value();
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t v = 0; v < 13; ++v) worst = std::max(worst, std::fabs(step(b, 0, v) - full(b, t, v)));
    }
    CHECK(cache.length() == T);
    CHECK(worst < 1e-12);
    CHECK_THROWS_WITH_AS(m.forward(cols(0, 11), cache), doctest::Contains("exceed max_len 150"), ShapeError);
  }
}

TEST_CASE("generate: cached and uncached decoding give the same next-token logits (float32, 1e-5), past the window too") {
  for (Positional pos : {Positional::Learned, Positional::Sinusoidal, Positional::Rope}) {
    CAPTURE(int(pos));
    Generator gen(8);
    TransformerOptions o = decoder(pos);
    o.max_len = 96;  // the window jumps at 96 tokens: prompts below and past it
    DecoderModel<float> m(17, o, gen);
    for (std::uint64_t seed : {9, 10}) {
      const IndexArray ids = random_ids(1, 250, 17, seed);
      const std::vector<Index> tokens(ids.begin(), ids.end());
      const auto with = model::next_token_logits(m, tokens, seed == 9 ? 1 : 80, true);
      const auto without = model::next_token_logits(m, tokens, seed == 9 ? 1 : 80, false);
      REQUIRE(with.size() == without.size());
      double worst = 0;
      for (std::size_t i = 0; i < with.size(); ++i)
        for (std::size_t v = 0; v < 17; ++v) worst = std::max(worst, double(std::fabs(with[i][v] - without[i][v])));
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("Seq2SeqModel: decoding with the cache gives decode()'s logits for the whole prefix") {
  TransformerOptions o;
  o.arch = Arch::EncoderDecoder;
  o.d_model = 8;
  o.attn.num_heads = 2;
  o.layers = 2;
  o.ff.hidden = 16;
  o.max_len = 90;
  Generator gen(11);
  Seq2SeqModel<double> m(9, 10, o, gen);
  m.eval();
  NoGradGuard no_grad;
  const IndexArray src = random_ids(2, 12, 9, 12), tgt = random_ids(2, 80, 10, 13);
  const Variable<double> memory = m.encode(src);
  const Array<double> full = m.decode(memory, tgt).value();
  auto cache = m.make_cache();
  double worst = 0;
  for (std::size_t t = 0; t < 80; ++t) {
    IndexArray one = IndexArray::from_shape({2, 1});
    one(0, 0) = tgt(0, t), one(1, 0) = tgt(1, t);
    const Array<double> step = m.decode(memory, one, cache).value();
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t v = 0; v < 10; ++v) worst = std::max(worst, std::fabs(step(b, 0, v) - full(b, t, v)));
  }
  CHECK(worst < 1e-12);
}

TEST_CASE("MultiHeadAttention: a KV cache is inference only") {
  MultiHeadAttentionOptions o;
  o.embed_dim = 8;
  o.num_heads = 2;
  MultiHeadAttention<float> m(o);
  KVCache<float> cache;
  MultiHeadAttentionArgs<float> args;
  args.cache = &cache;
  Variable<float> x(test::random_array<float>({1, 3, 8}, 14));
  CHECK_THROWS_WITH_AS(m.forward(x, x, x, args), doctest::Contains("under NoGradGuard"), Error);
}

}  // namespace qkv
