#pragma once
// Internal to src/data: the base of the tasks whose examples are independent rows.

#include "qkv/data/tasks.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::data {

// examples() allocates the batch and calls fill() once per row with that row's own generator
// (and the example's index in its split), in parallel: rows share nothing.
class RowTask : public Task {
 public:
  Batch examples(std::uint64_t seed, std::uint64_t first, std::size_t count) const override {
    return examples(Split::Train, seed, first, count);
  }
  Batch examples(Split split, std::uint64_t seed, std::uint64_t first, std::size_t count) const override {
    const std::size_t T = input_length(), Tt = target_length();
    const bool s2s = seq2seq();
    Batch b;
    b.inputs = IndexArray::from_shape(Shape{count, T});
    b.targets = IndexArray::from_shape(Shape{count, Tt});
    b.decoder_inputs = IndexArray::from_shape(s2s ? Shape{count, Tt} : Shape{0});
    Index* in = b.inputs.data();
    Index* tg = b.targets.data();
    Index* dec = s2s ? b.decoder_inputs.data() : nullptr;
    // Batches of 64 rows and more are split over the threads.
    parallel_for(count, kParallelMin / 64, [&](std::size_t r) {
      Generator gen(hash64(seed, first + std::uint64_t(r)));
      if (s2s)
        fill(split, first + r, gen, in + r * T, tg + r * Tt, dec + r * Tt);
      else
        fill(split, first + r, gen, in + r * T, tg + r * Tt);
    });
    return b;
  }

 protected:
  /// Write one example: input (input_length()) and target (target_length()) tokens.
  virtual void fill(Generator& gen, Index* input, Index* target) const = 0;
  /// The same for example `k` of `split` (tasks with held-out data use the split and index);
  /// by default fill(gen, ...).
  virtual void fill(Split split, std::uint64_t k, Generator& gen, Index* input, Index* target) const {
    (void)split, (void)k;
    fill(gen, input, target);
  }
  /// A sequence-to-sequence example with its decoder inputs (target_length()); by default
  /// teacher forcing: fill() then the decoder sees BOS followed by the target shifted right.
  virtual void fill(Split split, std::uint64_t k, Generator& gen, Index* input, Index* target, Index* decoder) const {
    fill(split, k, gen, input, target);
    decoder[0] = bos();
    std::copy(target, target + target_length() - 1, decoder + 1);
  }
};

}  // namespace qkv::data
