#pragma once
/// @file
/// GEMM through OpenBLAS, loaded at first use.
///
/// qkv opens OpenBLAS with dlopen after putting two settings in the environment:
///  - OPENBLAS_CORETYPE, the core type whose kernels fit this CPU, chosen from its features:
///    SkylakeX with AVX-512 (f, bw, vl, dq, cd), Haswell with AVX2 + FMA, else OpenBLAS's own
///    detection. Debian's OpenBLAS 0.3.21 goes by the CPU's model number and runs SSE3 or AVX2
///    kernels on recent AVX-512 CPUs, 2-5x slower. An OPENBLAS_CORETYPE inherited from the
///    environment is kept only if it is of the same level (Cooperlake on an AVX-512 CPU, Zen on an
///    AVX2 one); one that is slower (Haswell on AVX-512), unknown or not runnable here is replaced,
///    and blas_info() says so. QKV_BLAS_CORETYPE=NAME forces a core type; one this CPU cannot run
///    or OpenBLAS does not know is reported (blas_environment_error(), and once on stderr) and
///    not used.
///  - OPENBLAS_NUM_THREADS=1 unless set (qkv threads GEMMs itself with OpenMP; see parallel.hpp).

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

/// Which BLAS runs: library, kernel (core type) and how the core type was chosen (loads OpenBLAS
/// if no GEMM has yet).
std::string blas_info();

/// What is wrong with QKV_BLAS_CORETYPE: "" if it is unset or names a core type this CPU runs,
/// else a message naming the variable, the value and what was expected. The qkv command refuses
/// to start (status 2) with it.
std::string blas_environment_error();

}  // namespace qkv::kernels
