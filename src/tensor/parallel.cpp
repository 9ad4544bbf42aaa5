#include "qkv/tensor/parallel.hpp"

#include <stdexcept>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace qkv {

int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("set_num_threads: expected n >= 1, got " + std::to_string(n));
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

bool in_parallel() {
#ifdef _OPENMP
  return omp_in_parallel();
#else
  return false;
#endif
}

}  // namespace qkv
