#pragma once
/// @file
/// Mixed precision: products with bfloat16 operands and float32 accumulation, where the CPU has a
/// matrix unit for them (train.precision: bf16, docs/bfloat16.md).
///
/// A bfloat16 is the upper half of a float32: the same sign and 8 exponent bits, 7 of the 23
/// mantissa bits (relative rounding error <= 2^-9). A product of two bfloat16 values is exact in
/// float32, so C = op(A) op(B) with bf16 A, B and float32 accumulation loses only what rounding A
/// and B lost. Which products take bfloat16 operands is a per-thread setting of the ops
/// (ProductPrecisionGuard, like PyTorch's autocast): linear, matmul and the fused attention read it
/// when they run forward and keep it for their backward; everything else (norms, softmax, the loss,
/// the optimizer, the reductions of gradients) stays float32.
///
/// The products run on oneDNN's matmul primitive (bf16 x bf16 -> f32; AMX tiles where the CPU and
/// the OS have them), cut into blocks by the shape alone as kernels::gemm cuts its products, one
/// thread per block: the bits are the same run to run and for any thread count, per CPU kind and
/// oneDNN kernel. Without oneDNN they run as float32 sgemm on the bf16 values widened back
/// (the same operands, other bits, slower): a reference for tests, never chosen for training.

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace qkv::kernels {

/// The bits of a bfloat16: the upper 16 bits of the float32 it stands for.
using bf16 = std::uint16_t;

/// x rounded to the nearest bfloat16, ties to even; zero and denormal inputs give a zero of their
/// sign, infinities stay, NaN stays NaN (quiet). The rule of AVX512-BF16's vcvtne2ps2bf16, which
/// to_bf16(dst, src, n) uses where the CPU has it, so both paths give the same bits.
bf16 to_bf16(float x);
/// The float32 a bfloat16 stands for (exact).
inline float from_bf16(bf16 b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
/// dst[i] = to_bf16(src[i]) for i < n, on the calling thread: vcvtne2ps2bf16 with AVX512-BF16,
/// the same rounding in software otherwise.
void to_bf16(bf16* dst, const float* src, std::size_t n);
/// dst[i] = to_bf16(scale * src[i]) (the product rounded to float first).
void to_bf16(bf16* dst, const float* src, std::size_t n, float scale);

/// The precision of the products the ops run on this thread.
enum class Precision { Float32, BFloat16 };
/// Float32 unless a ProductPrecisionGuard on this thread says otherwise.
Precision product_precision();
/// True when T is float and this thread's products take bfloat16 operands.
template <class T>
bool lower_products() {
  return std::is_same_v<T, float> && product_precision() == Precision::BFloat16;
}

/// RAII: the products of the ops recorded on this thread while the guard lives take `precision`'s
/// operands (train_step sets it for train.precision: bf16). The backward of an op runs in the
/// precision of its forward, whatever guard is active then.
class ProductPrecisionGuard {
 public:
  explicit ProductPrecisionGuard(Precision precision);
  ~ProductPrecisionGuard();
  ProductPrecisionGuard(const ProductPrecisionGuard&) = delete;
  ProductPrecisionGuard& operator=(const ProductPrecisionGuard&) = delete;

 private:
  Precision previous_;
};

/// n values rounded to bfloat16 (to_bf16) in pooled memory, split over the threads for large n;
/// empty when default-constructed. Move-only: an op's backward closure keeps the operands its
/// products read.
class Bf16Buffer {
 public:
  Bf16Buffer() = default;
  Bf16Buffer(const float* src, std::size_t n);
  /// Uninitialised room for n values (a kernel's scratch).
  explicit Bf16Buffer(std::size_t n);
  ~Bf16Buffer();
  Bf16Buffer(Bf16Buffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.n_ = 0, o.p_ = nullptr; }
  Bf16Buffer& operator=(Bf16Buffer&& o) noexcept;
  Bf16Buffer(const Bf16Buffer&) = delete;
  Bf16Buffer& operator=(const Bf16Buffer&) = delete;
  bf16* data() const { return p_; }
  std::size_t size() const { return n_; }
  bool empty() const { return p_ == nullptr; }

 private:
  std::size_t n_ = 0;
  bf16* p_ = nullptr;
};

/// A Bf16Buffer of src's n values when `lower` (and T is float), else an empty one.
template <class T>
Bf16Buffer lowered(const T* src, std::size_t n, bool lower) {
  if constexpr (std::is_same_v<T, float>)
    if (lower) return Bf16Buffer(src, n);
  return {};
}
/// The rows x cols matrix src rounded to bfloat16 and, in the same pass over src, sums[j] += the
/// sum of its column j when sums is not null (a Linear layer's output gradient, for its products,
/// and its bias gradient): float32 sums of blocks of 64 rows, added in block order, the same bits
/// for any thread count.
Bf16Buffer lowered_with_column_sums(const float* src, std::size_t rows, std::size_t cols, float* sums);
/// lowered_with_column_sums when `lower` (and T is float); else an empty buffer, and no sums.
template <class T>
Bf16Buffer lowered(const T* src, std::size_t rows, std::size_t cols, bool lower, T* sums) {
  if constexpr (std::is_same_v<T, float>)
    if (lower) return lowered_with_column_sums(src, rows, cols, sums);
  return {};
}

/// One operand of a product: its values in T, or (low non-null) their bfloat16 copy, which the
/// product then reads instead.
template <class T>
struct Operand {
  const T* values = nullptr;
  const bf16* low = nullptr;
  Operand operator+(std::size_t offset) const {
    return {values ? values + offset : nullptr, low ? low + offset : nullptr};
  }
};

/// C = alpha op(A) op(B) + beta C (+ bias: N values added to every row, when not null), row-major
/// as kernels::gemm, with bfloat16 A and B and float32 accumulation, bias and C; blocks and
/// threads as kernels::gemm (the same bits for any thread count).
void gemm_bf16(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16* A,
               std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C, std::size_t ldc,
               const float* bias = nullptr);
/// Same, one call on the calling thread (for use inside parallel regions).
void gemm_bf16_serial(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, float alpha,
                      const bf16* A, std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C,
                      std::size_t ldc);

/// kernels::gemm when both operands hold values, gemm_bf16 when both are lowered (T float; only
/// then may `bias` be given: gemm_bf16's, fused into the product).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, Operand<T> A,
          std::size_t lda, Operand<T> B, std::size_t ldb, T beta, T* C, std::size_t ldc, const T* bias = nullptr);
/// The same on the calling thread (gemm_serial, gemm_bf16_serial).
template <class T>
void gemm_serial(bool trans_a, bool trans_b, std::size_t M, std::size_t N, std::size_t K, T alpha, Operand<T> A,
                 std::size_t lda, Operand<T> B, std::size_t ldb, T beta, T* C, std::size_t ldc);

/// Calls into oneDNN running on this thread (0 or 1): lets a program that counts heap allocations
/// (tests/alloc, bench_train) tell oneDNN's own, made inside its matmul calls (its execution
/// context: bench/onednn_allocs counts them), from qkv's, of which a training step makes none.
int onednn_calls_in_progress();

/// Whether bfloat16 products pay on this CPU, and on what.
struct Bf16Support {
  bool fast = false;   ///< training with train.precision: bf16 uses them (else it trains in float32)
  std::string kernel;  ///< oneDNN's kernel for a bf16 matmul ("brg:avx512_core_amx_bf16"), "" without oneDNN
  std::string library; ///< "oneDNN 2.6.3" or ""
  /// Why not fast (empty when fast): no oneDNN in this build; no AMX-BF16 on this CPU; oneDNN
  /// limited to an ISA without AMX (ONEDNN_MAX_CPU_ISA). bf16 pays where oneDNN runs it on AMX;
  /// with AVX512-BF16 alone its bf16 matmul measured about half its float32 rate on a Xeon
  /// limited to that ISA, so there float32 is the faster choice.
  std::string reason;
};
/// Probed once (a small bf16 matmul primitive is created to name the kernel).
const Bf16Support& bf16_support();
/// One line for `qkv info` and the start of a run: "bf16 products: oneDNN 2.6.3 matmul
/// (brg:avx512_core_amx_bf16)" or "bf16 products: not used (<reason>)".
std::string bf16_info();

}  // namespace qkv::kernels
