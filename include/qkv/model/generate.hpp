#pragma once
/// @file
/// Generating text with a decoder-only language model: sampling (greedy, temperature, top-k,
/// top-p) and the decoding loop, with a KV cache (one position per new token: O(T) work) or
/// without (the whole window recomputed: O(T^2)). Both give the same logits, so the same text
/// for the same seed.
///
/// The window: the model sees at most its context C = max_len tokens. Generation keeps a window
/// start s (0 at first) and feeds tokens[s, n); whenever n - s would exceed C, s jumps to
/// n - ceil(C / 2), and the cache is refilled from tokens[s, n) (so the cost stays O(T) per token
/// on average). Positions count from the window's start.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/model/load.hpp"
#include "qkv/nn/transformer.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::model {

struct SamplingOptions {
  double temperature = 1.0;  ///< 0: greedy (the argmax); else softmax(logits / temperature)
  std::size_t top_k = 0;     ///< keep only the k most likely tokens (0: all)
  double top_p = 1.0;        ///< keep the fewest most likely tokens whose probability reaches top_p (nucleus)
  /// temperature >= 0 and finite, top_p in (0, 1]; throws OptionError.
  void validate() const;
};

/// The next token for one row of logits (V): at temperature 0 the first maximum; otherwise the
/// probabilities p = softmax(logits / temperature), restricted to the top_k most likely, then to
/// the smallest prefix (by decreasing p, ties by id) whose sum reaches top_p, renormalised, and
/// one draw u = gen.uniform() picks the token whose cumulative probability passes u.
Index sample_token(const float* logits, std::size_t V, const SamplingOptions& options, Generator& gen);

struct GenerateOptions {
  std::size_t max_tokens = 200;  ///< new tokens to produce
  SamplingOptions sampling;
  std::uint64_t seed = 0;  ///< the sampling stream: the same seed gives the same continuation
  bool cache = true;       ///< decode with the KV cache (false: recompute the window every token)
  /// max_tokens <= 1,000,000 and the sampling options' rules (fields "max_tokens",
  /// "sampling.temperature", ...); throws OptionError.
  void validate() const;
};

/// Continue `prompt` (token ids, at least one) with `model`, calling on_token(id) as each new
/// token is chosen; returns the new tokens. Runs under NoGradGuard, in eval mode.
std::vector<Index> generate(const nn::DecoderModel<float>& model, const std::vector<Index>& prompt,
                            const GenerateOptions& options, const std::function<void(Index)>& on_token = {});

/// `qkv generate`, the studio and Python's qkv.generate: exactly one of `text` (read by the
/// model's tokenizer) and `ids`.
struct GenerateRequest {
  std::optional<std::string> text;
  std::optional<std::vector<Index>> ids;
  GenerateOptions options;
};
struct GenerateResult {
  std::vector<Index> prompt;  ///< the prompt's ids
  std::vector<Index> tokens;  ///< the new ones
  std::string text;           ///< the new tokens decoded (text models; "" otherwise)
};
/// Field errors: "model" (not a decoder-only model), "text" / "ids" (none or both, empty, outside
/// the vocabulary, text for a model without a tokenizer), and GenerateOptions::validate's fields
/// under "options." ("options.max_tokens", "options.sampling.top_p"). on_token(id) is called as
/// each new token is chosen.
GenerateResult generate(LoadedModel& model, const GenerateRequest& request, const std::function<void(Index)>& on_token = {});
/// {"prompt": [ids], "tokens": [ids], "text"}.
std::string to_json(const GenerateResult& result);

/// The logits (V) the model gives for the token after every prefix of `tokens` the loop of
/// generate() would feed (the same windows, the cache or not): row i is for tokens[0, p + i),
/// p = `from`. For testing that cached and uncached decoding agree.
std::vector<std::vector<float>> next_token_logits(const nn::DecoderModel<float>& model, const std::vector<Index>& tokens,
                                                  std::size_t from, bool cache);

}  // namespace qkv::model
