#pragma once
/// @file
/// Path patching (Wang et al. 2022, "Interpretability in the Wild", section 3.1): how much of the
/// difference between a clean and a corrupted input one head (the sender) carries to chosen
/// receivers by the residual stream alone, every other path held at the corrupted run's values.
/// In the direction of activation patching here (denoising: clean values into the corrupted run):
///
///   1. run the clean and the corrupted input; keep every head's result (hook_head_result) and
///      every MLP's output (hook_mlp_out)
///   2. run the corrupted input with the sender's result replaced by the clean run's, and every
///      other head's result and every MLP output frozen at the corrupted run's; record each
///      receiver's input: head h's query, key or value input (hook_q_input[:, h], ...), or, for
///      the logits, the last block's output (hook_resid_post)
///   3. run the corrupted input with only the receiver's input replaced by what step 2 recorded
///      (the rest runs freely) and measure m (patching's logit difference, its defaults included)
///
///   restored(sender -> receiver) = (m_3 - m_corrupt) / (m_clean - m_corrupt)
///
/// 1 for a receiver through which the sender carries the whole difference. Step 2 runs once;
/// step 3 once per receiver, and once more for the head receivers together. Encoder and decoder-only
/// models (field error "model" for an encoder-decoder).

#include <optional>
#include <string>
#include <vector>

#include "qkv/interp/ablation.hpp"
#include "qkv/interp/patching.hpp"

namespace qkv::interp {

/// A receiver: a head's query, key or value input ("q", "k", "v"), or the logits (layer and head
/// unused).
struct PathReceiver {
  std::size_t layer = 0, head = 0;
  std::string input = "q";  ///< "q", "k", "v", or "logits"
};
/// "1.2<q>", "logits".
std::string receiver_name(const PathReceiver& r);

/// A receiver from its text: "L.H<q>" (receiver_name's), "L.H.q" (the same, for shells), or
/// "logits". Field error `field` otherwise.
PathReceiver parse_receiver(const std::string& text, const std::string& field);

/// `qkv path`, the studio's path view and Python's qkv.path_patch.
struct PathPatchRequest {
  model::InputRequest clean, corrupt;
  std::optional<std::size_t> position;
  std::optional<std::string> answer, wrong;
  bool ids = false;
  HeadRef sender;
  /// Empty: every head of the layers after the sender's, by its query, key and value input, and
  /// the logits.
  std::vector<PathReceiver> receivers;
};

struct PathPatchResult {
  HeadRef sender;
  std::size_t position = 0;
  Index answer = 0, wrong = 0;
  double clean_metric = 0, corrupt_metric = 0;
  std::vector<PathReceiver> receivers;
  std::vector<double> restored;  ///< per receiver, patched alone
  /// Every head receiver patched at once (the logits left out: patching the final stream would
  /// set every path at once, the heads' included); the logits when they are the only receiver.
  double restored_all = 0;
  std::size_t forward_passes = 0;
};

/// Field errors: patching's, "sender" (out of range), "receivers[i]" (out of range, not after the
/// sender's layer, an unknown input), "model" (an encoder-decoder).
PathPatchResult path_patch(model::LoadedModel& model, const PathPatchRequest& request);

/// The command's text: the metric, then each receiver's share, and all of them together.
std::string format_path_patch(const PathPatchResult& result, const data::Task& task);

/// {"sender": [layer, head], "position", "answer", "wrong", "answer_token", "wrong_token",
/// "clean", "corrupt", "receivers": [{"name", "layer", "head", "input", "restored"}],
/// "restored_all", "forward_passes"}.
std::string to_json(const PathPatchResult& result, const data::Task& task);

}  // namespace qkv::interp
