#include "qkv/kernels/bf16.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "bf16_block.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/kernels/cpu.hpp"
#include "qkv/tensor/allocator.hpp"
#include "qkv/tensor/parallel.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#ifdef QKV_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace qkv::kernels {

// ---- rounding ----

bf16 to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0) return bf16((u >> 16) & 0x8000u);  // zero or denormal: a zero of its sign
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16((u >> 16) | 0x40u);  // NaN: quiet, payload's top kept
  return bf16((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // ties to even; infinities unchanged
}

namespace {

#if defined(__x86_64__)
// 32 floats per instruction; the tail through the scalar rule (the same rounding).
__attribute__((target("avx512f,avx512bf16"))) void to_bf16_avx512(bf16* dst, const float* src, std::size_t n,
                                                                  float scale) {
  std::size_t i = 0;
  const __m512 s = _mm512_set1_ps(scale);
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(src + i), s), hi = _mm512_mul_ps(_mm512_loadu_ps(src + i + 16), s);
    _mm512_storeu_si512(dst + i, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  for (; i < n; ++i) dst[i] = to_bf16(src[i] * scale);
}
#endif

thread_local Precision g_precision = Precision::Float32;
thread_local int g_onednn_calls = 0;

}  // namespace

void to_bf16(bf16* dst, const float* src, std::size_t n, float scale) {
#if defined(__x86_64__)
  if (cpu_features().avx512_bf16) return to_bf16_avx512(dst, src, n, scale);
#endif
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i] * scale);
}

void to_bf16(bf16* dst, const float* src, std::size_t n) { to_bf16(dst, src, n, 1.f); }

// ---- the per-thread setting ----

Precision product_precision() { return g_precision; }
int onednn_calls_in_progress() { return g_onednn_calls; }
ProductPrecisionGuard::ProductPrecisionGuard(Precision precision) : previous_(g_precision) { g_precision = precision; }
ProductPrecisionGuard::~ProductPrecisionGuard() { g_precision = previous_; }

// ---- buffers ----

Bf16Buffer::Bf16Buffer(std::size_t n) : n_(n), p_(n ? Allocator<bf16>().allocate(n) : nullptr) {}

Bf16Buffer::Bf16Buffer(const float* src, std::size_t n) : Bf16Buffer(n) {
  // Chunks of 4096 values (a multiple of the 32 the vector path takes at once): elementwise, so
  // any split gives the same bits.
  constexpr std::size_t kChunk = 4096;
  bf16* dst = p_;
  parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](std::size_t c) {
    const std::size_t lo = c * kChunk;
    to_bf16(dst + lo, src + lo, std::min(kChunk, n - lo));
  });
}

Bf16Buffer lowered_with_column_sums(const float* src, std::size_t rows, std::size_t cols, float* sums) {
  if (!sums) return Bf16Buffer(src, rows * cols);
  Bf16Buffer out(rows * cols);
  constexpr std::size_t kRows = 64;
  const std::size_t blocks = (rows + kRows - 1) / kRows;
  const PooledBuffer<float> partial(blocks * cols);  // block b's column sums
  bf16* dst = out.data();
  parallel_for(blocks, kRows * cols, [&](std::size_t b) {
    float* p = partial.data() + b * cols;
    std::fill(p, p + cols, 0.f);
    for (std::size_t r = b * kRows; r < std::min(rows, (b + 1) * kRows); ++r) {
      const float* row = src + r * cols;
      to_bf16(dst + r * cols, row, cols);
#pragma omp simd
      for (std::size_t j = 0; j < cols; ++j) p[j] += row[j];
    }
  });
  for (std::size_t b = 0; b < blocks; ++b) {
    const float* p = partial.data() + b * cols;
#pragma omp simd
    for (std::size_t j = 0; j < cols; ++j) sums[j] += p[j];
  }
  return out;
}

Bf16Buffer::~Bf16Buffer() {
  if (p_) Allocator<bf16>().deallocate(p_, n_);
}

Bf16Buffer& Bf16Buffer::operator=(Bf16Buffer&& o) noexcept {
  if (this != &o) {
    if (p_) Allocator<bf16>().deallocate(p_, n_);
    n_ = o.n_, p_ = o.p_;
    o.n_ = 0, o.p_ = nullptr;
  }
  return *this;
}

// ---- one product on the calling thread ----

namespace {

#ifdef QKV_HAVE_DNNL
void check(dnnl_status_t s, const char* what, std::size_t M, std::size_t N, std::size_t K) {
  if (s != dnnl_success)
    throw std::runtime_error(std::string("qkv: oneDNN bf16 matmul: ") + what + " failed with status " +
                             std::to_string(int(s)) + " at M " + std::to_string(M) + " N " + std::to_string(N) +
                             " K " + std::to_string(K));
}

dnnl_engine_t engine() {
  // Made once and never destroyed: the threads' primitives refer to it until the process ends.
  static dnnl_engine_t e = [] {
    dnnl_engine_t made = nullptr;
    check(dnnl_engine_create(&made, dnnl_cpu, 0), "engine", 0, 0, 0);
    return made;
  }();
  return e;
}

// One thread per call: oneDNN threads with OpenMP, and a primitive made or run with more threads
// would cut the product its own way (along K too), so its bits would follow the thread count.
// omp_set_num_threads sets the calling thread's count only.
struct OneThread {
#ifdef _OPENMP
  int before = omp_get_max_threads();
  OneThread() {
    if (before != 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (before != 1) omp_set_num_threads(before);
  }
#endif
};

// A matmul primitive for one layout of one block shape, and the memory objects it runs on (their
// data pointers set per call). Per thread: primitives run concurrently on other threads, and each
// needs its own memory objects and scratchpad.
struct Key {
  bool ta, tb, bias;
  std::size_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  bool operator==(const Key& o) const {
    return ta == o.ta && tb == o.tb && bias == o.bias && M == o.M && N == o.N && K == o.K && lda == o.lda &&
           ldb == o.ldb && ldc == o.ldc && alpha == o.alpha && beta == o.beta;
  }
};
struct KeyHash {
  std::size_t operator()(const Key& k) const {
    std::size_t h = k.ta * 4 + k.tb * 2 + k.bias;
    for (std::size_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) h = h * 1000003u ^ v;
    std::uint32_t a, b;
    std::memcpy(&a, &k.alpha, 4), std::memcpy(&b, &k.beta, 4);
    return h * 31 + a * 7 + b;
  }
};
struct Matmul {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr, bias = nullptr, scratch = nullptr;
  std::size_t scratch_bytes = 0;
  std::string kernel;
};

dnnl_memory_desc_t matrix_md(std::size_t rows, std::size_t cols, std::size_t ld, bool transposed, dnnl_data_type_t t) {
  // Logical (rows, cols); stored row-major with row stride ld, or, transposed, as (cols, rows).
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {dnnl_dim_t(rows), dnnl_dim_t(cols)};
  dnnl_dims_t strides = {transposed ? 1 : dnnl_dim_t(ld), transposed ? dnnl_dim_t(ld) : 1};
  check(dnnl_memory_desc_init_by_strides(&md, 2, dims, t, strides), "memory descriptor", rows, cols, 0);
  return md;
}

Matmul make_matmul(const Key& k) {
  const dnnl_memory_desc_t a = matrix_md(k.M, k.K, k.lda, k.ta, dnnl_bf16);
  const dnnl_memory_desc_t b = matrix_md(k.K, k.N, k.ldb, k.tb, dnnl_bf16);
  const dnnl_memory_desc_t c = matrix_md(k.M, k.N, k.ldc, false, dnnl_f32);
  const dnnl_memory_desc_t bias = matrix_md(1, k.N, k.N, false, dnnl_f32);
  dnnl_matmul_desc_t desc;
  check(dnnl_matmul_desc_init(&desc, &a, &b, k.bias ? &bias : nullptr, &c), "descriptor", k.M, k.N, k.K);
  dnnl_primitive_attr_t attr;
  check(dnnl_primitive_attr_create(&attr), "attributes", k.M, k.N, k.K);
  check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode", k.M, k.N, k.K);
  if (k.alpha != 1.f) check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k.alpha), "alpha", k.M, k.N, k.K);
  dnnl_post_ops_t ops = nullptr;
  if (k.beta != 0.f) {  // C = alpha A B + beta C: the sum post-op
    check(dnnl_post_ops_create(&ops), "post-ops", k.M, k.N, k.K);
    check(dnnl_post_ops_append_sum(ops, k.beta), "beta", k.M, k.N, k.K);
    check(dnnl_primitive_attr_set_post_ops(attr, ops), "post-ops", k.M, k.N, k.K);
  }
  Matmul m;
  dnnl_primitive_desc_t pd;
  {
    OneThread one;
    check(dnnl_primitive_desc_create(&pd, &desc, attr, engine(), nullptr), "primitive descriptor", k.M, k.N, k.K);
    check(dnnl_primitive_create(&m.primitive, pd), "primitive", k.M, k.N, k.K);
  }
  const char* impl = nullptr;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) m.kernel = impl;
  const dnnl_memory_desc_t* sd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  m.scratch_bytes = dnnl_memory_desc_get_size(sd);
  check(dnnl_memory_create(&m.a, &a, engine(), DNNL_MEMORY_NONE), "memory", k.M, k.N, k.K);
  check(dnnl_memory_create(&m.b, &b, engine(), DNNL_MEMORY_NONE), "memory", k.M, k.N, k.K);
  check(dnnl_memory_create(&m.c, &c, engine(), DNNL_MEMORY_NONE), "memory", k.M, k.N, k.K);
  if (k.bias) check(dnnl_memory_create(&m.bias, &bias, engine(), DNNL_MEMORY_NONE), "memory", k.M, k.N, k.K);
  check(dnnl_memory_create(&m.scratch, sd, engine(), DNNL_MEMORY_NONE), "memory", k.M, k.N, k.K);
  dnnl_primitive_desc_destroy(pd);
  if (ops) dnnl_post_ops_destroy(ops);
  dnnl_primitive_attr_destroy(attr);
  return m;
}

// The calling thread's primitives, stream and scratchpad. Made on first use of a shape and kept
// (never destroyed: OpenMP's threads live as long as the process). Every thread's state is also
// listed in one global array, so that it stays reachable from a global root: LeakSanitizer does
// not scan the dynamic TLS of a shared library, and would report the primitives as leaked.
struct ThreadState {
  std::unordered_map<Key, Matmul, KeyHash> matmuls;
  dnnl_stream_t stream = nullptr;
  std::vector<char> scratch;
};
ThreadState* new_thread_state() {
  static std::mutex m;
  static std::vector<ThreadState*>* all = new std::vector<ThreadState*>;
  const std::lock_guard<std::mutex> lock(m);
  all->push_back(new ThreadState);
  return all->back();
}
ThreadState& thread_state() {
  thread_local ThreadState* s = new_thread_state();
  return *s;
}

void onednn_bf16(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16* A,
                 std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C, std::size_t ldc,
                 const float* bias) {
  ThreadState& t = thread_state();
  const Key key{ta, tb, bias != nullptr, M, N, K, lda, ldb, ldc, alpha, beta};
  auto it = t.matmuls.find(key);
  if (it == t.matmuls.end()) it = t.matmuls.emplace(key, make_matmul(key)).first;
  Matmul& m = it->second;
  if (!t.stream) check(dnnl_stream_create(&t.stream, engine(), dnnl_stream_default_flags), "stream", M, N, K);
  if (t.scratch.size() < m.scratch_bytes) t.scratch.resize(m.scratch_bytes);
  check(dnnl_memory_set_data_handle(m.a, const_cast<bf16*>(A)), "set A", M, N, K);
  check(dnnl_memory_set_data_handle(m.b, const_cast<bf16*>(B)), "set B", M, N, K);
  check(dnnl_memory_set_data_handle(m.c, C), "set C", M, N, K);
  check(dnnl_memory_set_data_handle(m.scratch, t.scratch.data()), "set scratchpad", M, N, K);
  if (bias) check(dnnl_memory_set_data_handle(m.bias, const_cast<float*>(bias)), "set bias", M, N, K);
  const dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m.a},
                                   {DNNL_ARG_WEIGHTS, m.b},
                                   {DNNL_ARG_DST, m.c},
                                   {DNNL_ARG_SCRATCHPAD, m.scratch},
                                   {DNNL_ARG_BIAS, m.bias}};
  OneThread one;
  ++g_onednn_calls;
  const dnnl_status_t executed = dnnl_primitive_execute(m.primitive, t.stream, bias ? 5 : 4, args);
  const dnnl_status_t waited = executed == dnnl_success ? dnnl_stream_wait(t.stream) : executed;
  --g_onednn_calls;
  check(waited, "execute", M, N, K);
}
#endif

// Without oneDNN: the bf16 values widened to float (exact), then sgemm. The same operands, so the
// same products up to the order of the additions; a reference, never fast.
[[maybe_unused]] void widened_bf16(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha,
                                   const bf16* A, std::size_t lda, const bf16* B, std::size_t ldb, float beta,
                                   float* C, std::size_t ldc, const float* bias) {
  auto widen = [](const bf16* src, std::size_t rows, std::size_t cols, std::size_t ld, float* dst) {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) dst[r * cols + c] = from_bf16(src[r * ld + c]);
  };
  const std::size_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  const PooledBuffer<float> a(a_rows * a_cols), b(b_rows * b_cols);
  widen(A, a_rows, a_cols, lda, a.data());
  widen(B, b_rows, b_cols, ldb, b.data());
  sgemm_on(GemmBackend::OpenBlas, ta, tb, M, N, K, alpha, a.data(), a_cols, b.data(), b_cols, beta, C, ldc);
  if (bias)
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] += bias[j];
}

}  // namespace

void bf16_block_product(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16* A,
                        std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C, std::size_t ldc,
                        const float* bias) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // as BLAS: C scaled by beta (and the bias added)
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j)
        C[i * ldc + j] = (beta == 0.f ? 0.f : beta * C[i * ldc + j]) + (bias ? bias[j] : 0.f);
    return;
  }
#ifdef QKV_HAVE_DNNL
  onednn_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
#else
  widened_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
#endif
}

void gemm_bf16_serial(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16* A,
                      std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
  bf16_block_product(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

// ---- operands of either precision ----

namespace {
template <class T>
void check_operands(const Operand<T>& A, const Operand<T>& B) {
  if (bool(A.low) != bool(B.low))
    throw std::logic_error("kernels::gemm: one operand is bfloat16 and the other is not");
}
}  // namespace

template <class T>
void gemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha, Operand<T> A, std::size_t lda,
          Operand<T> B, std::size_t ldb, T beta, T* C, std::size_t ldc, const T* bias) {
  check_operands(A, B);
  if constexpr (std::is_same_v<T, float>)
    if (A.low) return gemm_bf16(ta, tb, M, N, K, alpha, A.low, lda, B.low, ldb, beta, C, ldc, bias);
  if (bias) throw std::logic_error("kernels::gemm: a bias is fused into bfloat16 products only");
  gemm<T>(ta, tb, M, N, K, alpha, A.values, lda, B.values, ldb, beta, C, ldc);
}

template <class T>
void gemm_serial(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha, Operand<T> A,
                 std::size_t lda, Operand<T> B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  check_operands(A, B);
  if constexpr (std::is_same_v<T, float>)
    if (A.low) return gemm_bf16_serial(ta, tb, M, N, K, alpha, A.low, lda, B.low, ldb, beta, C, ldc);
  gemm_serial<T>(ta, tb, M, N, K, alpha, A.values, lda, B.values, ldb, beta, C, ldc);
}

template void gemm<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, Operand<float>, std::size_t,
                          Operand<float>, std::size_t, float, float*, std::size_t, const float*);
template void gemm<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, Operand<double>, std::size_t,
                           Operand<double>, std::size_t, double, double*, std::size_t, const double*);
template void gemm_serial<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, Operand<float>,
                                 std::size_t, Operand<float>, std::size_t, float, float*, std::size_t);
template void gemm_serial<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, Operand<double>,
                                  std::size_t, Operand<double>, std::size_t, double, double*, std::size_t);

// ---- where bf16 pays ----

const Bf16Support& bf16_support() {
  static const Bf16Support support = [] {
    Bf16Support s;
#ifdef QKV_HAVE_DNNL
    const dnnl_version_t* v = dnnl_version();
    s.library = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    try {
      Matmul probe = make_matmul(Key{false, false, false, 64, 64, 64, 64, 64, 64, 1.f, 0.f});
      s.kernel = probe.kernel;
      dnnl_primitive_destroy(probe.primitive);
      for (dnnl_memory_t m : {probe.a, probe.b, probe.c, probe.bias, probe.scratch})
        if (m) dnnl_memory_destroy(m);
    } catch (const std::exception& e) {
      s.reason = std::string("oneDNN made no bf16 matmul here (") + e.what() + ")";
      return s;
    }
    const CpuFeatures& f = cpu_features();
    if (!f.amx_bf16)
      s.reason = std::string("this CPU has no AMX-BF16") +
                 (f.avx512_bf16 ? " (AVX512-BF16 only: oneDNN's " + s.kernel +
                                      " bf16 matmul measured about half its float32 rate on a Xeon limited to that ISA)"
                                : "");
    else if (s.kernel.find("amx") == std::string::npos)
      s.reason = "oneDNN runs bf16 matmuls on " + s.kernel + ", not on AMX (its ISA is limited, e.g. by ONEDNN_MAX_CPU_ISA)";
#else
    s.reason = "this qkv is built without oneDNN (package libdnnl-dev)";
#endif
    s.fast = s.reason.empty();
    return s;
  }();
  return support;
}

std::string bf16_info() {
  const Bf16Support& s = bf16_support();
  if (s.fast) return "bf16 products: " + s.library + " matmul (" + s.kernel + ")";
  return "bf16 products: not used (" + s.reason + ")";
}

}  // namespace qkv::kernels
