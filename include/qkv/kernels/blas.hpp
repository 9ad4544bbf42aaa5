#pragma once
/// @file
/// GEMM through OpenBLAS, loaded at first use.
///
/// qkv opens OpenBLAS with dlopen after putting two settings in the environment (unless the user
/// set them): OPENBLAS_CORETYPE chosen from the CPU's features (Debian's OpenBLAS 0.3.21 does not
/// recognise recent AVX-512 Xeons and would run generic kernels 3-5x slower), and
/// OPENBLAS_NUM_THREADS=1 (qkv threads GEMMs itself with OpenMP; see parallel.hpp).

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

/// Which BLAS runs: library, kernel (core type) and how the core type was chosen.
std::string blas_info();

}  // namespace qkv::kernels
