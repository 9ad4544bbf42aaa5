#pragma once
// One bf16 product on the calling thread (oneDNN's matmul, or widened to sgemm without it): the
// block call of gemm_bf16, which src/kernels/blas.cpp cuts as it cuts gemm's products.
#include <cstddef>

#include "qkv/kernels/bf16.hpp"

namespace qkv::kernels {
void bf16_block_product(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16* A,
                        std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C, std::size_t ldc,
                        const float* bias);
}  // namespace qkv::kernels
