#include "qkv/kernels/attention.hpp"
#include "qkv/tensor/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/kernels/bf16.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/softmax.hpp"
#include "qkv/tensor/allocator.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::kernels {
namespace {

// Query rows and keys per block. A block of scores is kBq x kBk (32 KB in float): it stays in L2
// next to the Q, K and V blocks, and the GEMMs on it are large enough for BLAS to run near peak.
constexpr std::size_t kBq = 64;
// With bfloat16 products, twice the query rows per block: half the calls, each of which costs
// oneDNN a few microseconds beyond its arithmetic (measured: the blocks of a 128-token context
// ran at 130-190 GFLOP/s against 400-900 for the Linear layers' products).
inline std::size_t query_block(bool low) { return low ? 2 * kBq : kBq; }
constexpr std::size_t kBk = 128;

// Bt (D x rows, row stride ld) = B^T for B (rows x D, rows of D values): a head's keys (values)
// transposed once, so that every block product with them is a plain one (see gemm_abt).
template <class T>
void transpose_rows(T* Bt, std::size_t ld, const T* B, std::size_t rows, std::size_t D) {
  for (std::size_t d = 0; d < D; ++d)  // contiguous stores; the strided loads hit L1 after d = 0
    for (std::size_t r = 0; r < rows; ++r) Bt[d * ld + r] = B[r * D + d];
}

// C (nq x nk, row stride ld) = alpha A B^T for A (nq x D) and B (nk x D), rows of D values,
// given B also transposed: Bt (D x nk, row stride ldt). The product runs as A * Bt: OpenBLAS
// 0.3.21 has small-matrix kernels for that layout but not for A B^T, which it packs (measured
// alone at 32 x 32 x 16, the small model's block: 50 GFLOP/s, 62 with a transpose per block).
// With fewer than 4 query rows (decoding with the KV cache) A B^T goes to BLAS as it is, and the
// caller need not transpose (Bt may be null): the transpose would cost as much as the product.
template <class T>
void gemm_abt(T* C, std::size_t ld, const T* A, const T* B, const T* Bt, std::size_t ldt, std::size_t nq,
              std::size_t nk, std::size_t D, T alpha) {
  if (nq < 4) return gemm_serial<T>(false, true, nq, nk, D, alpha, A, D, B, D, T(0), C, ld);
  gemm_serial<T>(false, false, nq, nk, D, alpha, A, D, Bt, ldt, T(0), C, ld);
}

// Whether any block of Tq queries has 4 rows or more, so that gemm_abt needs B transposed.
inline bool needs_transpose(std::size_t Tq) { return std::min(kBq, Tq) >= 4; }

// Row stride of a transposed head (D rows of Tk keys): Tk plus one cache line, so that the D rows
// of a block do not all map to the same L1 sets when Tk is a multiple of 1024 floats (4 KiB
// apart, the 32 rows of a D = 32 block competed for 12 ways: the Q K^T product ran at 2/3 of its
// rate at T = 1024).
template <class T>
std::size_t transposed_ld(std::size_t Tk) { return Tk + 64 / sizeof(T); }

// C (nq x nk, row stride ld) = alpha A B^T: gemm_abt on float operands; on bfloat16 ones (low)
// oneDNN reads B^T in place, with no transpose, and alpha scales C afterwards (oneDNN 2.6 runs a
// matmul with an output scale 2-4x slower at these shapes).
template <class T>
void product_abt(T* C, std::size_t ld, Operand<T> A, Operand<T> B, const T* Bt, std::size_t ldt, std::size_t nq,
                 std::size_t nk, std::size_t D, T alpha) {
  if (!A.low) return gemm_abt(C, ld, A.values, B.values, Bt, ldt, nq, nk, D, alpha);
  gemm_serial<T>(false, true, nq, nk, D, T(1), A, D, B, D, T(0), C, ld);
  if (alpha != T(1))
#pragma omp simd
    for (std::size_t i = 0; i < nq * ld; ++i) C[i] *= alpha;
}

// Row stride of a block of nk keys: kBk for float products; nk, dense, for bfloat16 ones (oneDNN
// 2.6 runs a matmul whose operands or result have longer rows than they use on a generic kernel
// 6-20x slower than its AMX one: the causal blocks of 64 keys took 60 us instead of 3).
inline std::size_t block_ld(bool low, std::size_t nk) { return low ? nk : kBk; }

// The nq x nk block P (row stride ld) as the operand of a product: itself, or scale * P rounded
// to bfloat16 into Pb (same stride) when the products are low (the product then takes alpha 1).
template <class T>
Operand<T> block_operand(const T* P, bf16* Pb, std::size_t nq, std::size_t nk, std::size_t ld, T scale = T(1)) {
  if constexpr (std::is_same_v<T, float>)
    if (Pb) {
      to_bf16(Pb, P, nq * ld, scale);  // ld == nk: one run
      return {nullptr, Pb};
    }
  return {P};
}

// The block of scores for query rows q0..q0+nq and keys k0..k0+nk of head (b, h):
// S = scale * Q K^T + bias, -inf where not allowed. S has row stride ld; Q and K point at the
// block's first row, Kt at the block's first column of the head's K^T (row stride ldt).
template <class T>
void score_block(T* S, std::size_t ld, Operand<T> Q, Operand<T> K, const T* Kt, std::size_t ldt,
                 const AttentionMasks<T>& m, T scale, std::size_t b, std::size_t h, std::size_t q0, std::size_t nq,
                 std::size_t k0, std::size_t nk, std::size_t D) {
  product_abt(S, ld, Q, K, Kt, ldt, nq, nk, D, scale);
  if (!m.allowed && !m.bias && !m.causal) return;
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (!m.allowed && !m.bias) {  // causal only: each row's keys after i + offset, one run
    for (std::size_t r = 0; r < nq; ++r) {
      const std::size_t last = q0 + r + m.causal_offset;  // the last key row q0 + r may see
      const std::size_t from = last < k0 ? 0 : std::min(nk, last - k0 + 1);
      std::fill(S + r * ld + from, S + r * ld + nk, kNegInf);
    }
    return;
  }
  const Strides4& as = m.allowed_strides;
  const Strides4& bs = m.bias_strides;
  for (std::size_t r = 0; r < nq; ++r) {
    const std::size_t i = q0 + r;
    T* s = S + r * ld;
    const bool* allowed = m.allowed ? m.allowed + b * as.b + h * as.h + i * as.i : nullptr;
    const T* bias = m.bias ? m.bias + b * bs.b + h * bs.h + i * bs.i : nullptr;
    for (std::size_t c = 0; c < nk; ++c) {
      const std::size_t j = k0 + c;
      if ((m.causal && j > i + m.causal_offset) || (allowed && !allowed[j * as.j]))
        s[c] = kNegInf;
      else if (bias)
        s[c] += bias[j * bs.j];
    }
  }
}

// Dropout of element (b, h, i, j): counter first + ((b H + h) Tq + i) Tk + j of DropoutDraws.
struct DropoutMask {
  const AttentionDropout& d;
  std::size_t H, Tq, Tk;
  DropoutDraws draws{d.seed, d.p};
  std::uint64_t row_counter(std::size_t b, std::size_t h, std::size_t i) const {
    return d.first + ((std::uint64_t(b) * H + h) * Tq + i) * Tk;
  }
};

// Keys a causal block of queries q0..q0+nq can see: j <= q0 + nq - 1 + offset.
template <class T>
std::size_t key_end(const AttentionMasks<T>& m, std::size_t q0, std::size_t nq, std::size_t Tk) {
  return m.causal ? std::min(Tk, q0 + nq + m.causal_offset) : Tk;
}

}  // namespace

template <class T>
void attention_forward(T* out, T* lse, T* weights, const T* q, const T* k, const T* v,
                       const AttentionMasks<T>& masks, const AttentionDropout& dropout, T scale,
                       std::size_t B, std::size_t H, std::size_t Tq, std::size_t Tk, std::size_t D,
                       std::size_t Dv, std::size_t kv_capacity, const AttentionLowered* lowered) {
  // q (B,H,Tq,D), k (B,H,Tk,D), v (B,H,Tk,Dv) -> out (B,H,Tq,Dv), lse (B,H,Tq),
  // weights (B,H,Tq,Tk) when not null. One task per (b, h, block of kBq queries): each writes
  // its own rows of out, lse and weights.
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const bool low = std::is_same_v<T, float> && lowered && !lowered->empty();
  const std::size_t bq = query_block(low), n_qblocks = (Tq + bq - 1) / bq;
  const bool drop = dropout.p > 0;
  const T keep_scale = drop ? T(1.0 / (1.0 - dropout.p)) : T(1);
  const DropoutMask dm{dropout, H, Tq, Tk};
  // Threads only for enough work (decoding one token of a small model is not: waking threads
  // would cost more than the whole call).
  const bool parallel = B * H * n_qblocks > 1 && B * H * Tq * Tk * (D + Dv) >= kParallelMin && !in_parallel();
  const std::size_t cap = kv_capacity ? kv_capacity : Tk;  // rows per (b, h) in k and v
  // bf16 products: q, k and v rounded by the caller; each block of weights before its product with V.
  const bf16* q_low = low ? lowered->q.data() : nullptr;
  const bf16* k_low = low ? lowered->k.data() : nullptr;
  const bf16* v_low = low ? lowered->v.data() : nullptr;
  // K^T of every head (B, H, D, Tk), shared by the tasks of its query blocks (float products).
  const bool transpose = !low && needs_transpose(Tq);
  const std::size_t ldt = transposed_ld<T>(Tk);
  const PooledBuffer<T> kt_buf(transpose ? B * H * D * ldt : 0);
#pragma omp parallel if (parallel)
  {
    PooledBuffer<T> S_buf(bq * kBk), m_buf(bq), l_buf(bq), m_new_buf(bq), alpha_buf(bq);  // per thread
    const Bf16Buffer P_low(low ? bq * kBk : 0);
    T* S = S_buf.data();
    T* m = m_buf.data();
    T* l = l_buf.data();
    T* m_new = m_new_buf.data();
    T* alpha = alpha_buf.data();
    if (transpose) {
#pragma omp for schedule(static)
      for (long bh = 0; bh < long(B * H); ++bh)
        transpose_rows(kt_buf.data() + std::size_t(bh) * D * ldt, ldt, k + std::size_t(bh) * cap * D, Tk, D);
    }
#pragma omp for collapse(3) schedule(dynamic)
    for (long b = 0; b < long(B); ++b)
      for (long h = 0; h < long(H); ++h)
        for (long qb = 0; qb < long(n_qblocks); ++qb) {
          const std::size_t bh = std::size_t(b) * H + std::size_t(h);
          const std::size_t q0 = std::size_t(qb) * bq, nq = std::min(bq, Tq - q0);
          const Operand<T> Q = Operand<T>{q, q_low} + (bh * Tq + q0) * D;
          const Operand<T> K = Operand<T>{k, k_low} + bh * cap * D;
          const T* Kt = transpose ? kt_buf.data() + bh * D * ldt : nullptr;
          const Operand<T> V = Operand<T>{v, v_low} + bh * cap * Dv;
          T* O = out + (bh * Tq + q0) * Dv;
          T* L = lse + bh * Tq + q0;
          std::fill(O, O + nq * Dv, T(0));
          std::fill(m, m + nq, -kInf);
          std::fill(l, l + nq, T(0));
          const std::size_t k_end = key_end(masks, q0, nq, Tk);

          for (std::size_t k0 = 0; k0 < k_end; k0 += kBk) {
            const std::size_t nk = std::min(kBk, k_end - k0), ld = block_ld(low, nk);
            score_block(S, ld, Q, K + k0 * D, Kt ? Kt + k0 : nullptr, ldt, masks, scale, b, h, q0, nq, k0, nk, D);
            // Online softmax: the rows' new maxima, then alpha = exp(m - m_new), the factor that
            // rescales what was accumulated against the old maximum (0 when m was -inf), all rows
            // at once through the vectorised exp.
            for (std::size_t r = 0; r < nq; ++r) {
              m_new[r] = std::max(m[r], row_max(S + r * ld, nk));
              alpha[r] = m_new[r] == -kInf ? -kInf : m[r] - m_new[r];
            }
            row_exp_shift(alpha, alpha, nq, T(0));
            for (std::size_t r = 0; r < nq; ++r) {
              T* s = S + r * ld;
              if (m_new[r] == -kInf) {  // no allowed key so far: this block adds nothing to the row
                std::fill(s, s + nk, T(0));
                continue;
              }
              const T sum = row_exp_shift(s, s, nk, m_new[r]);  // vectorised exp (xsimd)
              l[r] = l[r] * alpha[r] + sum;  // the normaliser counts dropped weights too
              m[r] = m_new[r];
              if (alpha[r] != T(1))
                for (T* o = O + r * Dv; o != O + (r + 1) * Dv; ++o) *o *= alpha[r];
              if (drop) dm.draws.apply(s, s, nk, dm.row_counter(b, h, q0 + r) + k0, keep_scale);
            }
            gemm_serial<T>(false, false, nq, Dv, nk, T(1), block_operand(S, P_low.data(), nq, nk, ld), ld, V + k0 * Dv,
                           Dv, T(1), O, Dv);
          }
          for (std::size_t r = 0; r < nq; ++r) {
            if (l[r] > T(0)) {
              const T inv = T(1) / l[r];
              for (T* o = O + r * Dv; o != O + (r + 1) * Dv; ++o) *o *= inv;
              L[r] = m[r] + std::log(l[r]);
            } else {
              L[r] = kInf;  // fully masked: O stayed 0, and exp(S - lse) = 0 in the backward
            }
          }

          if (!weights) continue;
          // Second pass, only when the weights are wanted: now that lse is known,
          // Pd = exp(S - lse) * keep / (1 - p), written straight into the (Tq, Tk) rows.
          T* W = weights + (bh * Tq + q0) * Tk;
          for (std::size_t k0 = 0; k0 < Tk; k0 += kBk) {
            const std::size_t nk = std::min(kBk, Tk - k0), ld = block_ld(low, nk);
            if (k0 >= k_end) {
              for (std::size_t r = 0; r < nq; ++r)
                std::fill(W + r * Tk + k0, W + r * Tk + k0 + nk, T(0));
              continue;
            }
            score_block(S, ld, Q, K + k0 * D, Kt ? Kt + k0 : nullptr, ldt, masks, scale, b, h, q0, nq, k0, nk, D);
            for (std::size_t r = 0; r < nq; ++r) {
              T* w = W + r * Tk + k0;
              row_exp_shift(w, S + r * ld, nk, L[r]);
              if (drop) dm.draws.apply(w, w, nk, dm.row_counter(b, h, q0 + r) + k0, keep_scale);
            }
          }
        }
  }
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const AttentionMasks<T>& masks,
                        const AttentionDropout& dropout, T scale, std::size_t B, std::size_t H,
                        std::size_t Tq, std::size_t Tk, std::size_t D, std::size_t Dv,
                        const AttentionLowered* lowered) {
  // dout, out (B,H,Tq,Dv), lse (B,H,Tq), q (B,H,Tq,D), k (B,H,Tk,D), v (B,H,Tk,Dv)
  //   -> dq (B,H,Tq,D), dk (B,H,Tk,D), dv (B,H,Tk,Dv).
  // dK and dV sum over every query of a head, so one task is a whole (b, h): each thread owns
  // the dq, dk, dv slices it writes, and sums in a fixed order.
  //
  // In the forward pass O = Pd V with Pd = P * keep / (1 - p) and P = softmax(S), so
  //   dV = Pd^T dO,  dPd = dO V^T,  dP = dPd * keep / (1 - p),
  //   dS = P * (dP - Delta) with Delta_i = sum_j P_ij dP_ij = sum_j Pd_ij dPd_ij = dO_i . O_i,
  //   and since P dP = P * keep / (1 - p) * dPd = Pd dPd, dS = Pd dPd - P Delta: the mask is
  //   applied once (to P, for Pd), not again to dPd.
  //   and S = scale Q K^T (+ bias) gives dQ = scale dS K, dK = scale dS^T Q.
  const bool drop = dropout.p > 0;
  const T keep_scale = drop ? T(1.0 / (1.0 - dropout.p)) : T(1);
  const DropoutMask dm{dropout, H, Tq, Tk};
  const bool low = std::is_same_v<T, float> && lowered && !lowered->empty();
  const std::size_t bq = query_block(low), n_qblocks = (Tq + bq - 1) / bq;
  const bool need_ds = dq || dk;
  const bool parallel = B * H > 1 && B * H * Tq * Tk * (D + Dv) >= kParallelMin && !in_parallel();
  // bf16 products: q, k and v rounded by the caller (the forward's copies), dout here; each block
  // of weights (dS) before its products.
  const bf16* q_low = low ? lowered->q.data() : nullptr;
  const bf16* k_low = low ? lowered->k.data() : nullptr;
  const bf16* v_low = low ? lowered->v.data() : nullptr;
  const Bf16Buffer do_low = kernels::lowered(dout, B * H * Tq * Dv, low);
#pragma omp parallel if (parallel)
  {
    PooledBuffer<T> P_buf(bq * kBk), G_buf(bq * kBk), H_buf(drop ? bq * kBk : 0), delta_buf(bq);  // per thread
    const Bf16Buffer P_low(low ? bq * kBk : 0);
    // The head's K^T and V^T (D x Tk, Dv x Tk), transposed once per task for float products (see gemm_abt).
    const bool transpose = !low && needs_transpose(Tq);
    const std::size_t ldt = transposed_ld<T>(Tk);
    PooledBuffer<T> kt_buf(transpose ? D * ldt : 0), vt_buf(transpose && need_ds ? Dv * ldt : 0);
    T* Kt = transpose ? kt_buf.data() : nullptr;
    T* Vt = transpose && need_ds ? vt_buf.data() : nullptr;
    T* P = P_buf.data();  // P, then dS
    T* G = G_buf.data();  // Pd with dropout, else dPd
    T* dPd = drop ? H_buf.data() : G;
    T* delta = delta_buf.data();
#pragma omp for collapse(2) schedule(dynamic)
    for (long b = 0; b < long(B); ++b)
      for (long h = 0; h < long(H); ++h) {
        const std::size_t bh = std::size_t(b) * H + std::size_t(h);
        const Operand<T> K = Operand<T>{k, k_low} + bh * Tk * D;
        const Operand<T> V = Operand<T>{v, v_low} + bh * Tk * Dv;
        T* dQ = dq ? dq + bh * Tq * D : nullptr;
        T* dK = dk ? dk + bh * Tk * D : nullptr;
        T* dV = dv ? dv + bh * Tk * Dv : nullptr;
        if (dQ) std::fill(dQ, dQ + Tq * D, T(0));
        if (dK) std::fill(dK, dK + Tk * D, T(0));
        if (dV) std::fill(dV, dV + Tk * Dv, T(0));
        if (Kt) transpose_rows(Kt, ldt, K.values, Tk, D);
        if (Vt) transpose_rows(Vt, ldt, V.values, Tk, Dv);

        for (std::size_t qb = 0; qb < n_qblocks; ++qb) {
          const std::size_t q0 = qb * bq, nq = std::min(bq, Tq - q0);
          const Operand<T> Q = Operand<T>{q, q_low} + (bh * Tq + q0) * D;
          const T* dO = dout + (bh * Tq + q0) * Dv;
          const Operand<T> dOp = Operand<T>{dout, do_low.data()} + (bh * Tq + q0) * Dv;
          const T* O = out + (bh * Tq + q0) * Dv;
          const T* L = lse + bh * Tq + q0;
          for (std::size_t r = 0; r < nq; ++r) {
            T d = 0;
            for (std::size_t c = 0; c < Dv; ++c) d += dO[r * Dv + c] * O[r * Dv + c];
            delta[r] = d;
          }
          const std::size_t k_end = key_end(masks, q0, nq, Tk);

          for (std::size_t k0 = 0; k0 < k_end; k0 += kBk) {
            const std::size_t nk = std::min(kBk, k_end - k0), ld = block_ld(low, nk);
            score_block(P, ld, Q, K + k0 * D, Kt ? Kt + k0 : nullptr, ldt, masks, scale, b, h, q0, nq, k0, nk, D);
            for (std::size_t r = 0; r < nq; ++r) row_exp_shift(P + r * ld, P + r * ld, nk, L[r]);
            const T* Pd = P;
            if (drop) {
              for (std::size_t r = 0; r < nq; ++r)
                dm.draws.apply(P + r * ld, G + r * ld, nk, dm.row_counter(b, h, q0 + r) + k0, keep_scale);
              Pd = G;
            }
            if (dV)
              gemm_serial<T>(true, false, nk, Dv, nq, T(1), block_operand(Pd, P_low.data(), nq, nk, ld), ld, dOp, Dv,
                             T(1), dV + k0 * Dv, Dv);
            if (!need_ds) continue;
            product_abt(dPd, ld, dOp, V + k0 * Dv, Vt ? Vt + k0 : nullptr, ldt, nq, nk, Dv, T(1));
            for (std::size_t r = 0; r < nq; ++r) {  // P becomes dS
              T* p = P + r * ld;
              const T* g = dPd + r * ld;
              const T* pd = Pd + r * ld;
              const T dr = delta[r];
              if (drop) {
#pragma omp simd
                for (std::size_t c = 0; c < nk; ++c) p[c] = pd[c] * g[c] - p[c] * dr;
              } else {
#pragma omp simd
                for (std::size_t c = 0; c < nk; ++c) p[c] = p[c] * (g[c] - dr);
              }
            }
            const Operand<T> dS = block_operand(P, P_low.data(), nq, nk, ld, scale);  // bf16: scale * dS
            const T a = dS.low ? T(1) : scale;
            if (dQ) gemm_serial<T>(false, false, nq, D, nk, a, dS, ld, K + k0 * D, D, T(1), dQ + q0 * D, D);
            if (dK) gemm_serial<T>(true, false, nk, D, nq, a, dS, ld, Q, D, T(1), dK + k0 * D, D);
          }
        }
      }
  }
}

#define QKV_INSTANTIATE(T)                                                                         \
  template void attention_forward<T>(                                                              \
      T*, T*, T*, const T*, const T*, const T*, const AttentionMasks<T>&, const AttentionDropout&, \
      T, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t,    \
      const AttentionLowered*);                                                                     \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,          \
                                      const T*, const T*, const AttentionMasks<T>&,                \
                                      const AttentionDropout&, T, std::size_t, std::size_t,        \
                                      std::size_t, std::size_t, std::size_t, std::size_t,                 \
                                      const AttentionLowered*);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)

}  // namespace qkv::kernels
