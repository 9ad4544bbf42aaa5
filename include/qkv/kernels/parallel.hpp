#pragma once
/// @file
/// Thread control. qkv parallelises with OpenMP only: BLAS runs one thread per call, and qkv
/// splits large GEMMs across its OpenMP threads itself, so BLAS threads and OpenMP threads never
/// multiply. Every kernel partitions work by what each thread writes and reduces in a fixed
/// order, so results are bitwise identical for any thread count.

namespace qkv {

/// Number of threads kernels use (1 when built without OpenMP).
int num_threads();
/// Set the number of threads kernels use (n >= 1).
void set_num_threads(int n);
/// True inside an OpenMP parallel region.
bool in_parallel();

/// Call first thing in main(argv). When OMP_WAIT_POLICY is unset, sets it to "passive" and
/// re-executes the program (libgomp reads it only at start-up); otherwise, or when the exec fails,
/// returns. Passive waiting puts idle OpenMP threads to sleep at the end of a parallel region
/// instead of spinning: on a machine shared with other jobs, a spinning thread holds a core while
/// the thread it waits for is descheduled, and a 2-thread training step ran 10x slower than with 1
/// thread (docs/performance.md). Set OMP_WAIT_POLICY=active to keep spinning.
void prefer_passive_omp_wait(char** argv);

}  // namespace qkv
