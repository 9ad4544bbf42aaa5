#pragma once
/// @file
/// Thread control. qkv parallelises with OpenMP only: BLAS runs one thread per call, and qkv
/// splits large GEMMs across its OpenMP threads itself, so BLAS threads and OpenMP threads never
/// multiply. Every kernel partitions work by what each thread writes and reduces in a fixed
/// order, so results are bitwise identical for any thread count.

#include <cstddef>

namespace qkv {

/// Work below this many elements runs on the calling thread: starting threads costs more. The
/// one threshold of every parallel loop (parallel_for).
inline constexpr std::size_t kParallelMin = 32768;

/// True inside an OpenMP parallel region (false when built without OpenMP).
bool in_parallel();

/// f(i) for every i in [0, n): split over the threads in contiguous ranges (OpenMP's static
/// schedule) when n * grain >= kParallelMin and the caller is not inside a parallel region
/// already; on the calling thread otherwise. `grain` is the work of one index, in elements (what
/// weighs it against the threshold). f(i) must write only what index i owns and reduce in a fixed
/// order, so that the result does not depend on the split: every kernel keeps that rule.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, F&& f) {
#ifdef _OPENMP
  if (n > 1 && n * grain >= kParallelMin && !in_parallel()) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < long(n); ++i) f(std::size_t(i));
    return;
  }
#endif
  for (std::size_t i = 0; i < n; ++i) f(i);
}

/// Number of threads kernels use (1 when built without OpenMP).
int num_threads();
/// Set the number of threads kernels use (n >= 1).
void set_num_threads(int n);

}  // namespace qkv
