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

}  // namespace qkv
