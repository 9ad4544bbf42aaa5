#pragma once
// Internal: the elementwise loop every update rule runs. Updates are elementwise, so splitting
// them across threads cannot change a bit; small tensors stay serial (threads cost more).

#include <cstddef>
#include <utility>

#include "qkv/kernels/parallel.hpp"

namespace qkv::optim::detail {

template <class F>
void for_elements(std::size_t n, F&& f) {
  parallel_for(n, 1, std::forward<F>(f));
}

}  // namespace qkv::optim::detail
