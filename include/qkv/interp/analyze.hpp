#pragma once
/// @file
/// Where every head looks on one input, and what the model answers there: the studio's grid and
/// the page `qkv view` writes draw this. One forward pass in eval mode without recording, with the
/// chosen heads ablated (ablation.hpp) and every layer's hook_pattern recorded.

#include <optional>
#include <string>
#include <vector>

#include "qkv/interp/ablation.hpp"
#include "qkv/model/answer.hpp"
#include "qkv/model/input.hpp"

namespace qkv::interp {

struct AnalyzeRequest {
  model::InputRequest input;
  std::vector<HeadRef> ablate;  ///< heads removed for this pass (none: the intact model)
  AblationMode mode = AblationMode::Zero;
  std::size_t top_k = 5;        ///< the answer's candidates per position, in [1, 50]
};

/// One attention layer's weights on the input.
struct LayerWeights {
  std::string name;
  model::AttentionKind kind = model::AttentionKind::Self;
  std::vector<std::string> query_tokens, key_tokens;
  Array<float> weights;  ///< (H, Tq, Tk), rows summing to 1 (0 on masked keys)
};

struct AnalyzeResult {
  std::vector<std::string> tokens;  ///< the row's token labels
  std::vector<Index> ids;
  std::string note;                 ///< how the input was read when not as asked
  std::vector<HeadRef> ablated;
  AblationMode mode = AblationMode::Zero;
  std::vector<LayerWeights> layers;  ///< model order
  model::Answer answer;
  /// With heads ablated: the intact model's score on the same row (what the removal cost).
  std::optional<model::Score> intact;
};

/// Field errors: "input.*", "ablate[i]", "mode" (mean ablation without data), "top_k". `cache`
/// (one per model) keeps the means of mean ablation and the intact score of the last row.
AnalyzeResult analyze(model::LoadedModel& model, const AnalyzeRequest& request, AblationCache* cache = nullptr);

/// How weights travel in JSON: "float32" (base64 of the little-endian floats: exact) or "uint8"
/// (base64 of round(255 w): a quarter of the bytes, what the pages draw from).
enum class WeightEncoding { Float32, Uint8 };
/// {"tokens", "ids", "note", "ablated": [[layer, head]], "mode", "layers": [{"name", "kind",
/// "query_tokens", "key_tokens", "encoding", "weights": [base64 per head]}], "answer": {"kind",
/// "positions": [{"position", "prediction", "token", "p", ["target", "target_token",
/// "p_target", "right"]}], ["fills": [{"position", "top": [{"id", "token", "p"}]}]], ["next":
/// {"position", "top"}]}, "loss", "scored", "token_accuracy", ["intact": {"loss", "scored",
/// "token_accuracy"}]} (loss and accuracy null when nothing is scored).
std::string to_json(const AnalyzeResult& result, const data::Task& task, WeightEncoding encoding);

}  // namespace qkv::interp
