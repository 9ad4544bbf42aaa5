#include "qkv/kernels/blas.hpp"

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <type_traits>
#include <stdexcept>

#include "bf16_block.hpp"
#include "qkv/tensor/parallel.hpp"
#include "qkv/tensor/allocator.hpp"

#ifdef QKV_HAVE_ONEDNN
#include <dnnl.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef QKV_BLAS_LIBRARY
#define QKV_BLAS_LIBRARY "libopenblas.so.0"
#endif

namespace qkv::kernels {
namespace {

// The CBLAS interface, declared here so that no cblas.h is needed (it clashes with xtensor-blas).
enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };
using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                          float, float*, int);
using dgemm_fn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*,
                          int, double, double*, int);
using str_fn = char* (*)();

struct Blas {
  sgemm_fn sgemm = nullptr;
  dgemm_fn dgemm = nullptr;
  str_fn corename = nullptr;
  str_fn config = nullptr;
  std::string library;
};

// OpenBLAS's x86-64 core types (0.3.21, DYNAMIC_ARCH) by the instruction set their kernels need:
// level 3 AVX-512, 2 AVX2 + FMA, 1 older (SSE3, AVX, FMA4). qkv picks the best level this CPU
// runs, from its features rather than its model number, which is what OpenBLAS 0.3.21 looks up
// and fails on for newer CPUs (it runs SSE3 or AVX2 kernels on AVX-512 ones).
struct CoreType {
  const char* name;
  int level;
  bool (*runs_here)();
};

#if defined(__x86_64__)
bool has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512cd");
}
bool has_avx512_bf16() { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }
bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool has_avx() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx");
}
bool has_fma4() { return has_avx() && __builtin_cpu_supports("fma4"); }
bool always() { return true; }

constexpr CoreType kCoreTypes[] = {
    {"SkylakeX", 3, has_avx512},      {"Cooperlake", 3, has_avx512_bf16}, {"Haswell", 2, has_avx2},
    {"Zen", 2, has_avx2},             {"Excavator", 2, has_avx2},
    {"Sandybridge", 1, has_avx},      {"Bulldozer", 1, has_fma4},         {"Piledriver", 1, has_fma4},
    {"Steamroller", 1, has_fma4},     {"Prescott", 1, always},            {"Core2", 1, always},
    {"Penryn", 1, always},            {"Dunnington", 1, always},          {"Nehalem", 1, always},
    {"Atom", 1, always},              {"Opteron", 1, always},             {"Opteron_SSE3", 1, always},
    {"Barcelona", 1, always},         {"Nano", 1, always},                {"Katmai", 1, always},
    {"Coppermine", 1, always},        {"Northwood", 1, always},           {"Banias", 1, always},
    {"Athlon", 1, always},
};

const CoreType* find_core_type(const std::string& name) {
  for (const CoreType& c : kCoreTypes)
    if (strcasecmp(c.name, name.c_str()) == 0) return &c;
  return nullptr;
}

// The best core type this CPU runs: SkylakeX with AVX-512 (f, bw, vl, dq, cd), Haswell with AVX2
// and FMA, else none (OpenBLAS's own detection is right for older CPUs).
const CoreType* best_core_type() {
  if (has_avx512()) return find_core_type("SkylakeX");
  if (has_avx2()) return find_core_type("Haswell");
  return nullptr;
}

std::string core_type_names() {
  std::string s;
  for (const CoreType& c : kCoreTypes) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}
#endif

#ifdef QKV_HAVE_ONEDNN
std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "code " + std::to_string(int(isa));
  }
}
#endif

Blas load() {
  Blas b;
  void* handle = nullptr;
  for (const char* name : {"libopenblas.so.0", QKV_BLAS_LIBRARY, "libopenblas.so"}) {
    handle = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (handle) {
      b.library = name;
      break;
    }
  }
  if (!handle)
    throw std::runtime_error(std::string("qkv: cannot load OpenBLAS (tried libopenblas.so.0 and ") +
                             QKV_BLAS_LIBRARY + "): " + dlerror() +
                             ". Install it with scripts/install-deps.sh (package libopenblas0).");
  b.sgemm = reinterpret_cast<sgemm_fn>(dlsym(handle, "cblas_sgemm"));
  b.dgemm = reinterpret_cast<dgemm_fn>(dlsym(handle, "cblas_dgemm"));
  b.corename = reinterpret_cast<str_fn>(dlsym(handle, "openblas_get_corename"));
  b.config = reinterpret_cast<str_fn>(dlsym(handle, "openblas_get_config"));
  if (!b.sgemm || !b.dgemm)
    throw std::runtime_error("qkv: " + b.library + " does not export cblas_sgemm/cblas_dgemm");
  // If the process had OpenBLAS loaded already with more threads, keep it to one per call.
  using set_threads_fn = void (*)(int);
  if (auto set_threads = reinterpret_cast<set_threads_fn>(dlsym(handle, "openblas_set_num_threads")))
    set_threads(1);
  return b;
}

const Blas& blas() {
  static const Blas b = load();
  return b;
}

void openblas_gemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                   std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
  blas().sgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(M), int(N), int(K), alpha, A, int(lda),
               B, int(ldb), beta, C, int(ldc));
}
void openblas_gemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, double alpha, const double* A,
                   std::size_t lda, const double* B, std::size_t ldb, double beta, double* C, std::size_t ldc) {
  blas().dgemm(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(M), int(N), int(K), alpha, A, int(lda),
               B, int(ldb), beta, C, int(ldc));
}

// Above this many multiply-adds a float call goes to oneDNN (in a build with it): OpenBLAS 0.3.21
// runs its small-matrix kernels at or below 100^3 on x86-64 (the attention blocks' products, where
// they beat dnnl_sgemm by 5-14% on a Zen 5), its packed ones above, where dnnl_sgemm is 2-13% faster
// at the Linear layers' blocks (docs/performance.md).
constexpr double kOneDnnMinWork = 1e6;

#ifdef QKV_HAVE_ONEDNN
// dnnl_sgemm threads with OpenMP: inside a parallel region it runs on the calling thread, outside
// one it would use every OpenMP thread and cut the product its own way, so its bits would follow the
// thread count. One thread per call, always: outside a parallel region the calling thread's OpenMP
// thread count is 1 for the call (omp_set_num_threads sets it for this thread only).
void onednn_sgemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const float* A,
                  std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
#ifdef _OPENMP
  const int before = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (before != 1) omp_set_num_threads(1);
#endif
  const dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', dnnl_dim_t(M), dnnl_dim_t(N), dnnl_dim_t(K),
                                          alpha, A, dnnl_dim_t(lda), B, dnnl_dim_t(ldb), beta, C, dnnl_dim_t(ldc));
#ifdef _OPENMP
  if (before != 1) omp_set_num_threads(before);
#endif
  if (status != dnnl_success)
    throw std::runtime_error("qkv: dnnl_sgemm failed with status " + std::to_string(int(status)) + " at M " +
                             std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
}
#endif

template <class T>
void call_gemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
               std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // BLAS would scale C by beta; do the same without calling it
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
#ifdef QKV_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>)
    if (gemm_backend(M, N, K) == GemmBackend::OneDnn)
      return onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  openblas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

template <class T>
void gemm_serial(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
                 std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  call_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace {

// Where gemm cuts the product (see gemm below): blocks of `block` rows of C, or columns, or
// (kind kDepth) slices of the inner dimension K whose partial products are added in order.
enum class Cut { kRows, kColumns, kDepth };
struct GemmPlan {
  Cut cut;
  std::size_t extent, block, count;
};

GemmPlan plan_gemm(std::size_t M, std::size_t N, std::size_t K) {
  constexpr std::size_t kAlign = 64;     // block borders: multiples of 64 rows, columns or depth
  constexpr std::size_t kMaxBlocks = 8;  // enough for 8 threads
  constexpr std::size_t kMaxDepthBlocks = 4;
  // Every block does at least this many multiply-adds, so a call's fixed cost (packing the shared
  // operand, about 1/64 of the block's work at worst) stays small. It also keeps every block above
  // OpenBLAS's "small matrix" line (M*N*K <= 100^3 on x86_64), whose kernels round differently.
  constexpr double kMinBlockWork = 2e6;
  // A block of rows (columns) packs the whole of the other operand again: K x N (K x M) values.
  // When K is the long side (the weight gradient x^T dy of a Linear layer: K = batch x tokens)
  // that repacking costs 15-25% of the product, so such products are cut along K instead: each
  // slice packs only its own part of both operands, and the partial products, M x N each, are
  // added in slice order. Each partial is written and read once more, so slices are fewer (<= 4).
  const bool deep = K >= 4 * std::max(M, N);
  const Cut cut = deep ? Cut::kDepth : M >= N ? Cut::kRows : Cut::kColumns;
  const std::size_t extent = cut == Cut::kDepth ? K : cut == Cut::kRows ? M : N;
  const std::size_t max_blocks = deep ? kMaxDepthBlocks : kMaxBlocks;
  const double work_per_line = cut == Cut::kDepth ? double(M) * double(N) : double(cut == Cut::kRows ? N : M) * double(K);
  for (std::size_t blocks = std::min(max_blocks, extent / kAlign); blocks > 1; --blocks) {
    const std::size_t block = ((extent + blocks - 1) / blocks + kAlign - 1) / kAlign * kAlign;
    const std::size_t count = (extent + block - 1) / block;
    if (double(extent - (count - 1) * block) * work_per_line >= kMinBlockWork) return {cut, extent, block, count};
  }
  return {cut, extent, extent, 1};
}

}  // namespace

std::size_t gemm_block_count(std::size_t M, std::size_t N, std::size_t K) {
  return M == 0 || N == 0 || K == 0 ? 1 : plan_gemm(M, N, K).count;
}

namespace {

// gemm's blocks and threads for operands of type In and a product of type T; `call` runs one block
// on the calling thread (call_gemm for gemm, bf16_block_product for gemm_bf16), with the part of
// `bias` (N values added to every row of C, or null) its columns take, and none for the partial
// products of a cut along K.
template <class In, class T, class Call>
void gemm_blocks(const Call& call, bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha,
                 const In* A, std::size_t lda, const In* B, std::size_t ldb, T beta, T* C, std::size_t ldc,
                 const T* bias = nullptr) {
  // The product is cut into blocks that depend on the shape only, never on the thread count, and
  // each block is one OpenBLAS call; threads share out whole blocks. One thread makes the same
  // calls as eight, so the bits are the same for any thread count, whatever the BLAS kernel does
  // inside a call. (A split into one block per thread, aligned to 64 rows, was not enough: with
  // OpenBLAS's Haswell sgemm kernels a 2048-row product split at row 1024 differed from the whole
  // one from row 1020 on, in about 1 element of 7.)
  const GemmPlan plan = plan_gemm(M, N, K);
  if (plan.count <= 1) {
    call(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    return;
  }
  const long count = long(plan.count);
  const bool serial = num_threads() == 1 || in_parallel();
  if (plan.cut == Cut::kDepth) {
    // Slice 0 goes to C with the caller's beta; slice i > 0 to partial i - 1 (M x N, pooled);
    // then C += partials in slice order, element by element.
    const PooledBuffer<T> partial((plan.count - 1) * M * N);  // every value written by a BLAS call (beta 0)
    auto run = [&](long i) {
      const std::size_t lo = std::size_t(i) * plan.block, n = std::min(plan.block, K - lo);
      const In* a = ta ? A + lo * lda : A + lo;
      const In* b = tb ? B + lo : B + lo * ldb;
      if (i == 0)
        call(ta, tb, M, N, n, alpha, a, lda, b, ldb, beta, C, ldc, bias);
      else
        call(ta, tb, M, N, n, alpha, a, lda, b, ldb, T(0), partial.data() + std::size_t(i - 1) * M * N, N, nullptr);
    };
    auto add = [&](std::size_t r) {
      T* c = C + r * ldc;
      for (std::size_t i = 1; i < plan.count; ++i) {
        const T* p = partial.data() + ((i - 1) * M + r) * N;
        for (std::size_t j = 0; j < N; ++j) c[j] += p[j];
      }
    };
    if (serial) {
      for (long i = 0; i < count; ++i) run(i);
      for (std::size_t r = 0; r < M; ++r) add(r);
      return;
    }
#pragma omp parallel
    {
#pragma omp for schedule(static)
      for (long i = 0; i < count; ++i) run(i);
#pragma omp for schedule(static)
      for (long r = 0; r < long(M); ++r) add(std::size_t(r));
    }
    return;
  }
  auto run = [&](long i) {
    const std::size_t lo = std::size_t(i) * plan.block, n = std::min(plan.block, plan.extent - lo);
    if (plan.cut == Cut::kRows) {
      const In* a = ta ? A + lo : A + lo * lda;
      call(ta, tb, n, N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc, ldc, bias);
    } else {
      const In* b = tb ? B + lo * ldb : B + lo;
      call(ta, tb, M, n, K, alpha, A, lda, b, ldb, beta, C + lo, ldc, bias ? bias + lo : nullptr);
    }
  };
  if (serial) {
    for (long i = 0; i < count; ++i) run(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (long i = 0; i < count; ++i) run(i);
}

}  // namespace

template <class T>
void gemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A,
          std::size_t lda, const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  auto call = [](bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, T alpha, const T* A, std::size_t lda,
                 const T* B, std::size_t ldb, T beta, T* C, std::size_t ldc, const T*) {
    call_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  };
  gemm_blocks(call, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha, const bf16* A,
               std::size_t lda, const bf16* B, std::size_t ldb, float beta, float* C, std::size_t ldc,
               const float* bias) {
  gemm_blocks(bf16_block_product, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

std::string blas_info() {
  const Blas& b = blas();
  std::string s = "OpenBLAS";
  if (b.config) s += std::string(" (") + b.config() + ")";
  if (b.corename) s += std::string(", kernel ") + b.corename();
#ifdef QKV_HAVE_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  // OpenBLAS first: it runs every product a oneDNN build does not send to oneDNN, and tools read
  // the line's start for its kernel.
  s += "; oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
       " (dnnl_sgemm, ISA " + onednn_isa_name(dnnl_get_effective_cpu_isa()) + ") for float products above 100^3 " +
       "multiply-adds" + (onednn_enabled() ? "" : " (disabled: OpenBLAS for all)");
#endif
  return s;
}

namespace {
std::atomic<bool> g_onednn_enabled{true};
}  // namespace

void set_onednn_enabled(bool enabled) { g_onednn_enabled.store(enabled, std::memory_order_relaxed); }
bool onednn_enabled() { return onednn_built() && g_onednn_enabled.load(std::memory_order_relaxed); }

GemmBackend gemm_backend(std::size_t M, std::size_t N, std::size_t K) {
  const bool onednn = onednn_enabled() && double(M) * double(N) * double(K) > kOneDnnMinWork;
  return onednn ? GemmBackend::OneDnn : GemmBackend::OpenBlas;
}

bool onednn_built() {
#ifdef QKV_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

void sgemm_on(GemmBackend backend, bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, float alpha,
              const float* A, std::size_t lda, const float* B, std::size_t ldb, float beta, float* C, std::size_t ldc) {
  if (M == 0 || N == 0 || K == 0) return call_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (backend == GemmBackend::OpenBlas) return openblas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#ifdef QKV_HAVE_ONEDNN
  onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  throw std::invalid_argument("sgemm_on: this qkv is built without oneDNN (CMake option QKV_ONEDNN, package libdnnl-dev)");
#endif
}

std::string blas_core_type_for_cpu() {
#if defined(__x86_64__)
  const CoreType* best = best_core_type();
  return best ? best->name : "";
#else
  return "";
#endif
}

int blas_core_type_level(const std::string& name) {
#if defined(__x86_64__)
  const CoreType* c = find_core_type(name);
  return c ? c->level : -1;
#else
  (void)name;
  return -1;
#endif
}

std::string blas_core_type_problem(const std::string& name) {
#if defined(__x86_64__)
  const CoreType* c = find_core_type(name);
  if (!c) return name + ": not an OpenBLAS x86-64 core type; expected one of " + core_type_names();
  if (!c->runs_here()) return name + ": this CPU lacks the instructions " + c->name + "'s kernels use";
#else
  (void)name;
#endif
  return "";
}

#define QKV_INSTANTIATE(T)                                                                      \
  template void gemm<T>(bool, bool, std::size_t, std::size_t, std::size_t, T, const T*,          \
                        std::size_t, const T*, std::size_t, T, T*, std::size_t);                 \
  template void gemm_serial<T>(bool, bool, std::size_t, std::size_t, std::size_t, T, const T*,   \
                               std::size_t, const T*, std::size_t, T, T*, std::size_t);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)

}  // namespace qkv::kernels
