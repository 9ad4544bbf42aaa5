// Heap allocations per call of oneDNN's GEMM interfaces, the question behind qkv's promise of
// no allocation per training step (docs/performance.md, "oneDNN as the GEMM", and docs/bfloat16.md):
// dnnl_sgemm, and the matmul primitive the way qkv runs its bf16 products (kernels/bf16.cpp:
// created once per shape, a user-owned scratchpad, memory objects created once and re-pointed, the
// C API's execute with a fixed argument array), in float32 and in bf16 -> f32. malloc, calloc,
// realloc, posix_memalign and aligned_alloc are interposed and counted; C++ operator new reaches
// them through libstdc++'s malloc. Built where oneDNN is found:
//   build-bench/bench/onednn_allocs          # one OpenMP thread, as qkv calls oneDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}
namespace {
long allocations = 0;
}
extern "C" {
void* malloc(std::size_t n) { ++allocations; return __libc_malloc(n); }
void* calloc(std::size_t a, std::size_t b) { ++allocations; return __libc_calloc(a, b); }
void* realloc(void* p, std::size_t n) { ++allocations; return __libc_realloc(p, n); }
void* aligned_alloc(std::size_t a, std::size_t n) { ++allocations; return __libc_memalign(a, n); }
int posix_memalign(void** p, std::size_t a, std::size_t n) {
  ++allocations;
  *p = __libc_memalign(a, n);
  return *p ? 0 : 12;  // ENOMEM
}
}

namespace {
void check(dnnl_status_t s, const char* what) {
  if (s == dnnl_success) return;
  std::fprintf(stderr, "onednn_allocs: %s failed (dnnl status %d)\n", what, int(s));
  std::exit(1);
}

struct Shape {
  dnnl_dim_t m, n, k;
  bool ta, tb;  // row-major C (m x n) = op(A) op(B), op(A) m x k, op(B) k x n
};

constexpr int kCalls = 50;

// Allocations per call of dnnl_sgemm, after 3 warm-up calls.
double sgemm_allocs(const Shape& s) {
  std::vector<float> a(s.m * s.k, 1.f), b(s.k * s.n, 1.f), c(s.m * s.n);
  const dnnl_dim_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  auto call = [&] {
    check(dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f,
                     c.data(), s.n),
          "dnnl_sgemm");
  };
  for (int i = 0; i < 3; ++i) call();
  const long before = allocations;
  for (int i = 0; i < kCalls; ++i) call();
  return double(allocations - before) / kCalls;
}

// Allocations per call of a matmul primitive made once, with a user scratchpad and reused memory
// objects, after 3 warm-up calls; operands of type `t` (f32 or bf16), C in f32. *scratch_bytes: the
// scratchpad's size.
double matmul_allocs(const Shape& s, dnnl_engine_t engine, dnnl_stream_t stream, std::size_t* scratch_bytes,
                     dnnl_data_type_t t) {
  std::vector<float> a(s.m * s.k, 1.f), b(s.k * s.n, 1.f), c(s.m * s.n);  // room for either type
  dnnl_memory_desc_t ad, bd, cd;
  dnnl_dims_t da = {s.m, s.k}, db = {s.k, s.n}, dc = {s.m, s.n};
  check(dnnl_memory_desc_init_by_tag(&ad, 2, da, t, s.ta ? dnnl_ba : dnnl_ab), "A descriptor");
  check(dnnl_memory_desc_init_by_tag(&bd, 2, db, t, s.tb ? dnnl_ba : dnnl_ab), "B descriptor");
  check(dnnl_memory_desc_init_by_tag(&cd, 2, dc, dnnl_f32, dnnl_ab), "C descriptor");
  dnnl_matmul_desc_t md;
  check(dnnl_matmul_desc_init(&md, &ad, &bd, nullptr, &cd), "matmul descriptor");
  dnnl_primitive_attr_t attr;
  check(dnnl_primitive_attr_create(&attr), "attributes");
  check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "user scratchpad");
  dnnl_primitive_desc_t pd;
  check(dnnl_primitive_desc_create(&pd, &md, attr, engine, nullptr), "primitive descriptor");
  dnnl_primitive_t prim;
  check(dnnl_primitive_create(&prim, pd), "primitive");
  const dnnl_memory_desc_t* sd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  *scratch_bytes = dnnl_memory_desc_get_size(sd);
  std::vector<char> scratch(*scratch_bytes + 64);
  dnnl_memory_t am, bm, cm, sm;
  check(dnnl_memory_create(&am, &ad, engine, a.data()), "A memory");
  check(dnnl_memory_create(&bm, &bd, engine, b.data()), "B memory");
  check(dnnl_memory_create(&cm, &cd, engine, c.data()), "C memory");
  check(dnnl_memory_create(&sm, sd, engine, scratch.data()), "scratchpad memory");
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
  auto call = [&] {
    check(dnnl_memory_set_data_handle(cm, c.data()), "set_data_handle");  // as qkv would, per call
    check(dnnl_primitive_execute(prim, stream, 4, args), "execute");
    check(dnnl_stream_wait(stream), "stream wait");
  };
  for (int i = 0; i < 3; ++i) call();
  const long before = allocations;
  for (int i = 0; i < kCalls; ++i) call();
  const double per_call = double(allocations - before) / kCalls;
  for (dnnl_memory_t m : {am, bm, cm, sm}) dnnl_memory_destroy(m);
  dnnl_primitive_destroy(prim);
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  return per_call;
}
}  // namespace

int main() {
  omp_set_num_threads(1);
  dnnl_engine_t engine;
  check(dnnl_engine_create(&engine, dnnl_cpu, 0), "engine");
  dnnl_stream_t stream;
  check(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "stream");
  const dnnl_version_t* v = dnnl_version();
  std::printf("oneDNN %d.%d.%d, one thread, heap allocations per call (mean of %d calls after 3 warm-up calls)\n\n",
              v->major, v->minor, v->patch, kCalls);
  std::printf("| M N K (row-major, op) | dnnl_sgemm | matmul primitive f32, user scratchpad | its scratchpad, bytes | "
              "matmul primitive bf16 -> f32 | its scratchpad, bytes |\n");
  std::printf("|---|---|---|---|---|---|\n");
  // Products of the language models' Linear layers and of an attention block (bench_kernels' shapes).
  const Shape shapes[] = {{4096, 768, 192, false, true}, {4096, 192, 768, false, false}, {192, 768, 4096, true, false},
                          {2048, 64, 64, false, true},   {128, 128, 64, false, true}};
  for (const Shape& s : shapes) {
    std::size_t scratch = 0, scratch_bf16 = 0;
    const double g = sgemm_allocs(s), m = matmul_allocs(s, engine, stream, &scratch, dnnl_f32),
                 mb = matmul_allocs(s, engine, stream, &scratch_bf16, dnnl_bf16);
    std::printf("| %ld %ld %ld %c %c | %.2f | %.2f | %zu | %.2f | %zu |\n", long(s.m), long(s.n), long(s.k),
                s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', g, m, scratch, mb, scratch_bf16);
  }
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(engine);
  return 0;
}
