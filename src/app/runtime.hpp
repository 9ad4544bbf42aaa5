#pragma once
// What belongs to the qkv process and to no library: the environment it runs in, its
// re-execution, the BLAS core type it asks OpenBLAS for, Ctrl-C, the machine's memory.

#include <atomic>
#include <cstddef>
#include <string>

namespace qkv::app {

/// First thing in main(argv):
///  1. OMP_WAIT_POLICY: unless the environment sets it, set "passive" and re-execute the program
///     (libgomp reads it at start-up only). Idle OpenMP threads then sleep at the end of a
///     parallel region instead of spinning: on a machine shared with other jobs, a spinning
///     thread holds a core while the thread it waits for is descheduled (a 2-thread training
///     step ran 10x slower than with 1 thread; docs/performance.md). OMP_WAIT_POLICY=active keeps
///     spinning.
///  2. OPENBLAS_CORETYPE (read by OpenBLAS when qkv opens it, at the first product):
///     QKV_BLAS_CORETYPE when set; else the core type that fits this CPU
///     (kernels::blas_core_type_for_cpu), unless the inherited OPENBLAS_CORETYPE is of the same
///     level. A machine may export one that halves the GEMM rate (Haswell on an AVX-512 CPU) or
///     cannot run (SkylakeX on an AVX2 one). OPENBLAS_NUM_THREADS=1 unless set.
/// Returns "" or the error of a QKV_BLAS_CORETYPE that cannot be used (the caller exits 2).
std::string prepare_process(char** argv);

/// Which BLAS runs and how its core type was chosen, for `qkv info` and the first lines of a run.
std::string blas_description();

/// Ctrl-C while `scope` lives sets `requested` (the previous handler comes back after).
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  /// True once SIGINT arrived.
  static bool requested();
};


}  // namespace qkv::app
