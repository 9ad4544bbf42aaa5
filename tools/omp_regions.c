/* Where OpenMP threads wait: an LD_PRELOAD library for programs built with GCC's libgomp.
 *
 * tools/omp_regions.py compiles this file and runs a program with it preloaded. Every parallel
 * region GCC starts through GOMP_parallel (all of qkv's: `parallel` and `parallel for` with a
 * static schedule) is timed: the region's wall time on the thread that starts it, each team
 * thread's time inside the region's body, and how long after the start each other thread entered
 * it (its wake-up). A thread's idle time in a region is wall - busy: waiting to be woken, and
 * waiting at the closing barrier for a slower thread. Totals are kept per outlined function (one
 * per `#pragma omp parallel` in the source) and written at exit by each process that timed any
 * (so a driver and the programs it starts do not overwrite each other), one line each:
 *
 *   object offset regions threads wall_s thread_wall_s busy_s wake_s
 *
 * object and offset locate the function (offset from the object's load base, for addr2line);
 * threads is the largest team seen; wall_s sums the regions' wall times and thread_wall_s their
 * wall times times their team sizes; busy_s sums every thread's busy time (thread_wall_s - busy_s
 * is the idle thread time); wake_s sums the other threads' wake-up delays. Environment:
 * QKV_REGIONS_OUT (required: a directory; the file is regions.<pid>.txt in it), QKV_REGIONS_FROM
 * and QKV_REGIONS_TO (count only regions that start within these seconds after the library is
 * loaded into the process; default all). Nested regions are not timed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { kMaxThreads = 256, kMaxFunctions = 1024 };

typedef struct {
  void (*fn)(void*);
  void* data;
  double start;
  double busy[kMaxThreads];
  double wake[kMaxThreads];
  int threads;
} Region;

typedef struct {
  void* fn;
  unsigned long regions;
  int threads;
  double wall, thread_wall, busy, wake;
} Total;

static Total totals[kMaxFunctions];
static int functions, dropped;
static double loaded = -1, from = 0, to = 1e300;
static const char* out_path;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void write_totals(void) {
  if (functions == 0 && dropped == 0) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/regions.%ld.txt", out_path, (long)getpid());
  FILE* f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "omp_regions: cannot write %s\n", path);
    return;
  }
  for (int i = 0; i < functions; ++i) {
    Dl_info info;
    const char* object = "?";
    unsigned long offset = (unsigned long)totals[i].fn;
    if (dladdr(totals[i].fn, &info) && info.dli_fname) {
      object = info.dli_fname;
      offset = (unsigned long)((char*)totals[i].fn - (char*)info.dli_fbase);
    }
    fprintf(f, "%s 0x%lx %lu %d %.9f %.9f %.9f %.9f\n", object, offset, totals[i].regions,
            totals[i].threads, totals[i].wall, totals[i].thread_wall, totals[i].busy, totals[i].wake);
  }
  if (dropped) fprintf(f, "# dropped %d regions of functions beyond %d\n", dropped, kMaxFunctions);
  fclose(f);
}

__attribute__((constructor)) static void start(void) {
  loaded = now();
  out_path = getenv("QKV_REGIONS_OUT");
  if (getenv("QKV_REGIONS_FROM")) from = atof(getenv("QKV_REGIONS_FROM"));
  if (getenv("QKV_REGIONS_TO")) to = atof(getenv("QKV_REGIONS_TO"));
  if (out_path) atexit(write_totals);
}

static void body(void* p) {
  Region* r = p;
  const int t = omp_get_thread_num();
  const double begin = now();
  r->fn(r->data);
  if (t < kMaxThreads) {
    r->wake[t] = begin - r->start;
    r->busy[t] = now() - begin;
  }
  if (t == 0) r->threads = omp_get_num_threads();
}

void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  static void (*real)(void (*)(void*), void*, unsigned, unsigned);
  if (!real) real = (void (*)(void (*)(void*), void*, unsigned, unsigned))dlsym(RTLD_NEXT, "GOMP_parallel");
  if (!out_path || omp_in_parallel()) {
    real(fn, data, num_threads, flags);
    return;
  }
  Region r = {fn, data, now(), {0}, {0}, 1};
  real(body, &r, num_threads, flags);
  const double wall = now() - r.start, at = r.start - loaded;
  if (at < from || at >= to) return;
  int i = 0;
  while (i < functions && totals[i].fn != (void*)fn) ++i;
  if (i == functions) {
    if (functions == kMaxFunctions) {
      ++dropped;
      return;
    }
    totals[functions++].fn = (void*)fn;
  }
  Total* s = &totals[i];
  const int n = r.threads < kMaxThreads ? r.threads : kMaxThreads;
  s->regions += 1;
  if (r.threads > s->threads) s->threads = r.threads;
  s->wall += wall;
  s->thread_wall += n * wall;
  for (int t = 0; t < n; ++t) s->busy += r.busy[t];
  for (int t = 1; t < n; ++t) s->wake += r.wake[t];
}
