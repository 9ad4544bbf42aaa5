#pragma once
/// @file
/// GEMM through OpenBLAS, opened (dlopen) at the first product, and, in a build with QKV_ONEDNN,
/// through oneDNN's dnnl_sgemm for the float products where it is faster (gemm_backend).
///
/// qkv threads GEMMs itself with OpenMP (see gemm), so it sets OpenBLAS to one thread per call
/// when it opens it (openblas_set_num_threads(1): in a process that also uses OpenBLAS elsewhere,
/// numpy for one, that setting is shared). Which kernels OpenBLAS runs it decides when it loads,
/// from OPENBLAS_CORETYPE or its own detection; the library never changes the environment. The
/// qkv command chooses the core type from the CPU's features before the first product (Debian's
/// OpenBLAS 0.3.21 goes by the CPU's model number and runs 2-5x slower kernels on recent CPUs):
/// blas_core_type_for_cpu() is that choice, for any program to make the same one.

#include <cstddef>
#include <string>

namespace qkv::kernels {

/// C = alpha * op(A) @ op(B) + beta * C, row-major. op(A) is (M, K), op(B) is (K, N), C is
/// (M, N); lda/ldb/ldc are row strides of the stored matrices. Cuts the product into
/// gemm_block_count(M, N, K) blocks, one BLAS call each, that depend on the shape only: rows of C
/// (columns when M < N), or, when K >= 4 max(M, N) (a weight gradient x^T dy), slices of K whose
/// partial products are added to C in slice order. OpenMP threads share out the blocks (one
/// thread runs them all inside a parallel region). The calls and the order of the additions are
/// the same for any thread count, so the bits are too.
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
          const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc);

/// How many blocks (BLAS calls) gemm cuts an (M, N, K) product into: 1 for small products, at
/// most 8 (4 along K); every block but the last is a multiple of 64 rows (columns, depth) and does >= 2e6
/// multiply-adds.
std::size_t gemm_block_count(std::size_t M, std::size_t N, std::size_t K);

/// Same, always on the calling thread (for use inside parallel regions).
template <class T>
void gemm_serial(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha,
                 const T* A, std::size_t lda, const T* B, std::size_t ldb, T beta, T* C,
                 std::size_t ldc);

/// Which BLAS runs: library, configuration, kernel (core type), and oneDNN's version, ISA and the
/// products it takes when built in; opens OpenBLAS if no product has.
std::string blas_info();

/// The libraries one GEMM call can run on.
enum class GemmBackend { OpenBlas, OneDnn };

/// Where one float BLAS call of op(A) (M, K) times op(B) (K, N) runs (a block of gemm, or a call of
/// gemm_serial): oneDNN's dnnl_sgemm when qkv is built with it (onednn_built()), it is enabled
/// (set_onednn_enabled) and the call does more than 100^3 multiply-adds, OpenBLAS otherwise (below that line OpenBLAS's small-matrix
/// kernels, the attention blocks' products, are the faster ones). A rule on the shape alone, so a
/// build makes the same calls, and gets the same bits, on every run and at every thread count.
/// Double products always run on OpenBLAS (oneDNN has no dgemm).
GemmBackend gemm_backend(std::size_t M, std::size_t N, std::size_t K);

/// True when this build calls oneDNN (CMake option QKV_ONEDNN with libdnnl found).
bool onednn_built();

/// Whether gemm may send products to oneDNN; true by default in a build with it. For measurements
/// and tests that compare the backends in one process: the backend changes the bits in the last
/// places, so choose it before a run, not during one.
void set_onednn_enabled(bool enabled);
bool onednn_enabled();

/// One float product on the named backend, on the calling thread, whatever gemm_backend would
/// choose (benchmarks and tests compare the two). Throws std::invalid_argument for OneDnn in a
/// build without it.
void sgemm_on(GemmBackend backend, bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K,
              float alpha, const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C,
              std::size_t ldc);

/// The OpenBLAS core type whose kernels fit this CPU, from its features: "SkylakeX" with
/// AVX-512 (f, bw, vl, dq, cd), "Haswell" with AVX2 and FMA, "" otherwise (OpenBLAS's own
/// detection is right for older CPUs).
std::string blas_core_type_for_cpu();
/// The instruction-set level of an OpenBLAS x86-64 core type (3 AVX-512, 2 AVX2 + FMA, 1 older),
/// -1 for a name OpenBLAS does not know (case-insensitive).
int blas_core_type_level(const std::string& name);
/// "" when `name` is a core type this CPU runs, else why not (unknown name, with the list;
/// instructions this CPU lacks).
std::string blas_core_type_problem(const std::string& name);

}  // namespace qkv::kernels
