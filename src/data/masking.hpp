#pragma once
// Internal to src/data: the masked-LM corruption the text and grammar tasks share (docs/tasks.md).

#include <cmath>
#include <numeric>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::data {

// BERT's corruption (Devlin et al. 2019, section 3.1) of the n tokens at `input`, in place:
// exactly m = max(1, round(rate n)) positions are chosen uniformly without replacement (a partial
// Fisher-Yates shuffle; BERT chooses 15%); each chosen position is replaced by `mask` with
// probability 0.8, by a token uniform in [0, n_random) with probability 0.1, and kept otherwise.
// target = the original token at the chosen positions, kIgnore at the others. Draws come from
// `gen` alone, so an example's masks are as deterministic as its tokens.
inline void mask_tokens(Generator& gen, std::size_t n, double rate, Index mask, std::size_t n_random, Index* input,
                        Index* target) {
  if (n == 0) return;
  const std::size_t m = std::min(n, std::max<std::size_t>(1, std::size_t(std::llround(rate * double(n)))));
  thread_local std::vector<std::size_t> order;  // its capacity reused: no allocation per row
  order.resize(n);
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::fill(target, target + n, kIgnore);
  for (std::size_t i = 0; i < m; ++i) {
    std::swap(order[i], order[i + gen.randint(n - i)]);
    const std::size_t p = order[i];
    target[p] = input[p];
    const double u = gen.uniform();
    if (u < 0.8)
      input[p] = mask;
    else if (u < 0.9)
      input[p] = Index(gen.randint(n_random));
  }
}

}  // namespace qkv::data
