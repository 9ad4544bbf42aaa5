#pragma once
// Internal: the elementwise loop every update rule runs. Updates are elementwise, so splitting
// them across threads cannot change a bit; small tensors stay serial (threads cost more).

#include <cstddef>

#include "qkv/kernels/parallel.hpp"

namespace qkv::optim::detail {

inline constexpr std::size_t kParallelMin = 1 << 15;

template <class F>
void for_elements(std::size_t n, F&& f) {
  const bool parallel = n >= kParallelMin && !in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
  for (long i = 0; i < long(n); ++i) f(std::size_t(i));
  (void)parallel;
}

}  // namespace qkv::optim::detail
