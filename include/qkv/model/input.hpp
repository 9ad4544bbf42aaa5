#pragma once
/// @file
/// The one row an instrument reads, as every front end asks for it: text, token ids, or a
/// held-out example. Checked here once; errors are field errors (tensor/options.hpp) naming the
/// request's field ("text", "example", "masks[2]"), which each front end spells its own way.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/model/load.hpp"

namespace qkv::model {

/// Exactly one of `text`, `ids`, `example` and `row`.
struct InputRequest {
  /// Text, read by the task's tokenizer as Task::text_row reads it (a grammar sentence is analysed
  /// into its words and relations; `mask_text` marks the mask tokens of a masked model).
  std::optional<std::string> text;
  std::string mask_text = data::kMaskText;
  /// Token ids, each in [0, input vocabulary).
  std::optional<std::vector<Index>> ids;
  /// Held-out example `example` of `split` (the model's data must be loaded).
  std::optional<std::size_t> example;
  data::Split split = data::Split::Val;
  /// A row already made (one example: inputs (1, T), targets, a seq2seq model's decoder inputs),
  /// e.g. Python's batch dicts; taken as it is.
  std::optional<data::Batch> row;
  /// Masked models: these positions of a text or ids row become mask tokens, and the token each
  /// hid becomes its target (what the loss then scores).
  std::vector<std::size_t> masks;
  /// Grammar models: text that is no sentence of the grammar, but is made of its vocabulary, is
  /// read as plain tokens (without words and relations) instead of refused; `note` says so.
  bool plain_text = false;
};

struct InputRow {
  data::Batch row;   ///< one row (1, T)
  std::string note;  ///< how the input was read when not as asked ("" otherwise)
};

/// The row of `request` for the model `l`. Field errors: "text" / "ids" / "example" (none or
/// several given, empty, too long, characters or ids outside the vocabulary, an example past the
/// split, a held-out example without data), "masks[i]" (not a masked model, out of range,
/// already masked, padding), "mask_text" (empty).
InputRow input_row(const LoadedModel& l, const InputRequest& request);

/// The class id a token names (an instrument's answer, say): with `ids` (or a task without a
/// tokenizer) a whole number, else text that the task's tokenizer reads as exactly one token.
/// Field error `field` otherwise, or for a class >= task.num_classes().
Index token_class(const data::Task& task, const std::string& token, bool ids, const std::string& field);

/// "held-out example 3" / "text '我爱吃苹果'" / "tokens '3 1 2'", for titles.
std::string describe(const InputRequest& request);

}  // namespace qkv::model
