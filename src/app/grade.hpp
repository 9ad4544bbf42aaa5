#pragma once
// qkv grade: every instrument graded on the shelf of known circuits (docs/grade.md).

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::app {

struct GradeArgs {
  std::vector<std::string> models;       ///< shelf names or a checkpoint (.h5); empty: the whole shelf
  std::string circuit;                   ///< the ground truth of a checkpoint given in `models`
  std::vector<std::string> instruments;  ///< empty: every one
  std::string programs = "programs";     ///< where the shelf's .rasp files are
  std::size_t pairs = 8;                 ///< clean/corrupted pairs per model
  std::size_t examples = 256;            ///< test examples of labels and ablation
  std::size_t steps = 5;                 ///< EAP-IG's
  std::uint64_t seed = 0;                ///< draws the pairs
  std::string csv, write;                ///< a CSV of the table; a directory for the shelf's checkpoints
  bool json = false;
  int threads = 0;
};
/// The table of every model and instrument (head and edge AUROC, top-k precision), optionally
/// the shelf's checkpoints and circuit files written to `write`.
int grade(const GradeArgs& args);

}  // namespace qkv::app
