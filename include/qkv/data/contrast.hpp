#pragma once
/// @file
/// Clean and corrupted inputs of a rasp program's task, for the causal instruments (patching,
/// attribution, path patching, the logit lens) and their grading (interp/grade.hpp): the two rows
/// have the same length, differ in some tokens, and the program's output differs at one position p
/// where it is a value in both runs. The answer is the clean output's class there, the wrong class
/// the corrupted one's, so the logit difference m = logits[p, answer] - logits[p, wrong] of
/// interp/patching.hpp is large and positive in the clean run and negative in the corrupted one.

#include <cstdint>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/rasp/program.hpp"

namespace qkv::data {

/// One clean and one corrupted row (inputs and targets (1, n + 1): BOS then n tokens, no padding,
/// as ProgramTask::text_row makes them), and where and what to measure.
struct ContrastPair {
  Batch clean, corrupt;
  std::size_t position = 0;  ///< p, in row positions (1 + the token's index)
  Index answer = 0, wrong = 0;
};

/// `count` pairs drawn from `seed`: a length n in [2, max_len] and n tokens uniform; the corrupted
/// row replaces one position's token (uniform) by another, and each other position's with
/// probability 1/2; kept when the output then differs somewhere it is a value in both
/// runs (p drawn among those positions); ValueError naming the program when 10,000 draws find
/// fewer than `count` pairs (a program whose output no change of tokens reaches).
std::vector<ContrastPair> program_contrast_pairs(const rasp::Program& program, std::size_t count, std::uint64_t seed);

}  // namespace qkv::data
