#pragma once
/// @file
/// The task of a rasp program (task.name: program): random inputs of the program's domain,
/// labelled by the reference interpreter (rasp/evaluate.hpp). What `qkv compile` writes into the
/// checkpoints it makes, so that `qkv eval` scores a compiled model on its program; a model can
/// also be trained on it (docs/compile.md).
///
/// Rows (T = max_len + 1): position 0 holds BOS, positions 1..n the n input tokens (n drawn
/// uniformly from [1, max_len], each token uniformly from the vocabulary), the rest PAD. Token
/// ids: vocab[i] is id i, BOS is V, PAD is V + 1 (V = the vocabulary's size). Targets: at
/// position 1 + i the class of the output's value at i (class c = the output's c-th value in
/// Value order), kIgnore at BOS, at padding and where the output is None or Undefined.

#include <cstddef>
#include <memory>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/rasp/program.hpp"

namespace qkv::data {

/// The ids and sizes of a program's task.
struct ProgramLayout {
  std::size_t tokens = 0;       ///< V: ids 0..V-1 are the vocabulary
  Index bos = 0, pad = 0;       ///< V and V + 1
  std::size_t input_vocab = 0;  ///< V + 2; a causal program's (a decoder's logits cover its inputs) at least `classes`
  std::size_t classes = 0;      ///< the output's values
  std::size_t length = 0;       ///< max_len + 1
};
ProgramLayout program_layout(const rasp::Program& program);

/// One row for token ids `tokens` (1..max_len of them): input and target (length() each) as
/// the file comment says.
void program_row(const rasp::Program& program, const std::vector<std::size_t>& tokens, Index* input, Index* target);

/// The task of `program` (TaskOptions::program or the file TaskOptions::path, parsed).
std::unique_ptr<Task> make_program_task(std::shared_ptr<const rasp::Program> program);

}  // namespace qkv::data
