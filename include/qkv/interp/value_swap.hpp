#pragma once
/// @file
/// The value-swap probe of associative recall: does the prediction follow the value in the
/// context? For each example, the first scored query's key k is found in the pairs (its first
/// occurrence j; the pairs are the sequence before the queries for `recall`, the source for
/// `seq2seq_recall`), the value after it is replaced by another value v' (uniform over the V - 1
/// others, Generator(hash64(seed, example))), and every query of k in that example is scored
/// against v'. A model that reads the value from the context predicts v' ("follows"); one that
/// predicts the old value ("stays") answers from something else.
///
///   follow = #{queries of k predicting v' - V} / #{queries of k}
///   stay   = #{queries of k predicting v - V} / #{queries of k}
///   intact = the share of those queries right before the swap (for comparison)

#include <cstdint>
#include <cstddef>
#include <string>

#include "qkv/data/tasks.hpp"
#include "qkv/model/load.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

struct ValueSwapResult {
  std::size_t examples = 0;  ///< examples probed
  std::size_t queries = 0;   ///< queries of the swapped keys, over all examples
  double intact = 0;         ///< share of those queries right before the swap
  double follow = 0;         ///< share predicting the new value after it
  double stay = 0;           ///< share still predicting the old value after it
};

/// The swap probe over the rows of `batch` (a recall or seq2seq_recall task's examples).
/// ValueError for any other task.
ValueSwapResult value_swap(model::TaskModel& model, const data::Task& task, const data::Batch& batch,
                           std::uint64_t seed = 0, std::size_t batch_size = 256);

/// `qkv swap` and Python's qkv.swap: the probe over the first `examples` test examples (0: all).
struct SwapRequest {
  std::size_t examples = 0;
  std::uint64_t seed = 0;  ///< draws the replacement values
};
/// Field errors: "data" (loaded without data), "model" (not a recall task).
ValueSwapResult value_swap(model::LoadedModel& model, const SwapRequest& request);
/// {"examples", "queries", "intact", "follow", "stay"}.
std::string to_json(const ValueSwapResult& result);

}  // namespace qkv::interp
