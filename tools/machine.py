"""The machine a benchmark runs on: the CPU's name and features, the OpenBLAS kernel that fits
them (qkv chooses its kernel the same way: src/kernels/blas.cpp), and the environment both sides
of a comparison with PyTorch run in. Every comparison gives PyTorch's OpenBLAS the same kernel as
qkv's, since Debian's OpenBLAS 0.3.21 misdetects some of these CPUs and a machine may export an
OPENBLAS_CORETYPE that does not fit its CPU (Haswell on an AVX-512 one)."""
import importlib.util
import os
import re
import sys


def cpu_info():
    """(model name, set of flags) of the first CPU in /proc/cpuinfo."""
    name, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name == "unknown CPU":
                    name = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return name, flags


def isa(flags):
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        return "avx512f"
    if {"avx2", "fma"} <= flags:
        return "avx2+fma"
    return "no avx2"


def openblas_coretype(flags):
    """The best core type for these CPU flags: SkylakeX with AVX-512 (f, bw, vl, dq, cd), Haswell
    with avx2 and fma, else None (leave OpenBLAS to choose)."""
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


# OpenBLAS core types by the instruction set of their kernels: 3 AVX-512, 2 AVX2 + FMA (others 1).
CORE_LEVEL = {"skylakex": 3, "cooperlake": 3, "haswell": 2, "zen": 2, "excavator": 2}


def blas_coretype(flags, environ=None):
    """(core type, how it was chosen) for both sides of a comparison, as qkv chooses its own:
    QKV_BLAS_CORETYPE if set; else the best for the CPU's flags, where an inherited
    OPENBLAS_CORETYPE of the same level is kept and any other replaced; core type None leaves
    OpenBLAS to choose."""
    environ = os.environ if environ is None else environ
    forced, inherited = environ.get("QKV_BLAS_CORETYPE"), environ.get("OPENBLAS_CORETYPE")
    if forced:
        return forced, f"QKV_BLAS_CORETYPE={forced} from the environment"
    best = openblas_coretype(flags)
    if best is None:
        return inherited, (f"OPENBLAS_CORETYPE={inherited} from the environment" if inherited
                           else "detected by OpenBLAS")
    if inherited and CORE_LEVEL.get(inherited.lower(), 1) == CORE_LEVEL[best.lower()]:
        return inherited, f"OPENBLAS_CORETYPE={inherited} from the environment (the level of {best})"
    note = f"; OPENBLAS_CORETYPE={inherited} in the environment not used" if inherited else ""
    return best, "chosen from the CPU features" + note


# glibc malloc settings for both sides of a comparison: no mmap for large blocks and no trimming,
# so that freed memory is reused rather than handed back to the kernel and faulted in again
# (zeroed page by page) at the next step. PyTorch's CPU allocator is plain malloc; its tuning
# guide recommends a caching malloc (jemalloc, tcmalloc), which this stands in for with nothing
# installed. On a machine where a page fault costs 14 us (2026-12-04, Zen 5 VM) it makes PyTorch
# 1.4-6x faster; qkv's pool does not allocate in steady state, so it changes nothing for qkv.
MALLOC_TUNABLES = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"


def comparison_env(core, malloc="reuse", threads=None, environ=None):
    """The environment of a benchmark process: the OpenBLAS core type `core` (OPENBLAS_CORETYPE for
    PyTorch's OpenBLAS, and QKV_BLAS_CORETYPE, which qkv uses as it is: given OPENBLAS_CORETYPE
    alone, qkv replaces a core type below the CPU's best, Haswell on an AVX-512 CPU, with its own
    choice), (malloc "reuse") MALLOC_TUNABLES, and for a PyTorch process (`threads` given)
    OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = threads and OMP_WAIT_POLICY=passive unless set (what
    qkv does by default). qkv takes its thread count from its command line and gives OpenBLAS one
    per call."""
    env = dict(os.environ if environ is None else environ)
    env.pop("QKV_BLAS_CORETYPE", None)
    if core:
        env["OPENBLAS_CORETYPE"] = env["QKV_BLAS_CORETYPE"] = core
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   OMP_WAIT_POLICY=env.get("OMP_WAIT_POLICY", "passive"))
    if malloc == "reuse":
        env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES"), MALLOC_TUNABLES) if t)
    return env


def kernel_mismatch(qkv_blas, torch_blas):
    """A warning if the OpenBLAS kernels two processes report ("... kernel NAME ..." or "... core
    NAME ...", as `qkv info`, bench_train and the PyTorch sides print them) differ, else None: a
    comparison of two kernels measures the kernels, not the frameworks."""
    names = [m.group(1) if m else None
             for m in (re.search(r"\b(?:kernel|core) ([A-Za-z]\w*)", t or "") for t in (qkv_blas, torch_blas))]
    if None in names or names[0].lower() == names[1].lower():
        return None
    return (f"WARNING: qkv ran OpenBLAS kernel {names[0]} and PyTorch {names[1]}: the ratios compare kernels, "
            "not frameworks")


def page_fault_us(megabytes=64):
    """Microseconds per first touch of a fresh 4 KiB page (anonymous mmap, written once): what a
    framework pays for memory it frees to the kernel and allocates again."""
    import mmap
    import time
    n = megabytes << 20
    best = float("inf")
    for _ in range(3):
        m = mmap.mmap(-1, n)
        t = time.perf_counter()
        for off in range(0, n, 4096):
            m[off] = 1
        best = min(best, time.perf_counter() - t)
        m.close()
    return best * 1e6 / (n // 4096)


def pinned_cpus(threads, available=None):
    """The CPUs a benchmark process with `threads` threads is pinned to: the first `threads` of the
    CPUs this process may run on (`available`, default os.sched_getaffinity(0)), or None (not pinned)
    when it would have them all. Both sides of a comparison run on the same CPUs: the vCPUs of a VM
    need not be equal (2026-12-05, Zen 5 VM: the medium step at 1 thread ran 19% slower on CPU 1
    than on CPU 0, a store-to-load chain 2.8x slower, register arithmetic and sgemm within 7%), and
    a 1-thread process left to the scheduler lands on either."""
    cpus = sorted(os.sched_getaffinity(0) if available is None else available)
    return cpus[:threads] if threads < len(cpus) else None


def pin_to(cpus):
    """A subprocess preexec_fn that pins the child to `cpus` (None: no preexec_fn)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


# A fixed amount of single-threaded sgemm work that times itself: both frameworks' steps are mostly
# OpenBLAS kernels. Other work measures other things: on the VM of 2026-12-05 a scalar loop with a
# store-to-load chain ran 2.8x slower on CPU 1 than on CPU 0, sgemm 7% slower.
_SPIN = ("import time, numpy as np\na = np.ones(({m}, {m}), np.float32)\nb = a @ a\nt = time.perf_counter()\n"
         "for _ in range({reps}): b = a @ a\nprint(time.perf_counter() - t)")


def capacity(alone, together):
    """How many CPUs' worth of work n processes got at once: sum over them of (seconds of the loop
    alone) / (its seconds when all n ran together). n on a machine whose n CPUs run at full speed
    side by side; less when they share a core or the host gives the VM less CPU time than it has
    vCPUs."""
    return sum(alone / t for t in together)


def _spin(n, reps, m, env):
    import subprocess
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN.format(m=m, reps=reps)], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(n)]
    return [float(p.communicate()[0]) for p in procs]


def parallel_capacity(core=None, n=None, reps=40, m=768):
    """The `capacity` of n (default os.cpu_count()) processes, each running `reps` (m, m) float32
    products on one OpenBLAS thread of core type `core` (about 0.2 s on one Zen 5 core), started
    together, against the best of 3 runs of one alone; the best of 3 runs together (on an idle
    2-vCPU Zen 5 VM 1.8-2.05 from run to run; 1.02 for a while when the VM got about one core's
    time). A comparison at n threads measures each framework's scaling only where this is close to
    n; benchmarks print it before and after their rounds, since other tenants of a host come and go."""
    n = n or os.cpu_count() or 1
    env = comparison_env(core, "default", threads=1)
    alone = min(_spin(1, reps, m, env)[0] for _ in range(3))
    return max(capacity(alone, _spin(n, reps, m, env)) for _ in range(3))


def cpus_text(cpus):
    return "not pinned (all CPUs)" if cpus is None else "pinned to CPU " + ",".join(map(str, cpus))


def capacity_line(c, n, when):
    """A header line for the capacity `c` of n CPUs measured `when`, with a warning below 0.8 n."""
    line = f"parallel capacity {when}: {c:.2f} of {n} CPUs ({n} single-threaded sgemm processes at once, each timed against one alone)"
    if c < 0.8 * n:
        line += (f"; WARNING: this machine does not run {n} threads at full speed now, so rows at more than"
                 " one thread do not measure either framework's scaling")
    return line


def run_conditions(capacities, thread_counts, of="the rounds", n=None):
    """The header lines of a comparison: each capacity of `capacities` ({"before": c, "after": c}:
    parallel_capacity of n = os.cpu_count() CPUs, before and after `of`) and the CPUs each thread
    count ran on."""
    n = n or os.cpu_count() or 1
    return ([capacity_line(c, n, f"{when} {of}") for when, c in capacities.items()]
            + ["CPUs of each thread count (both sides): "
               + "; ".join(f"{t} thread(s) {cpus_text(pinned_cpus(t))}" for t in thread_counts)])


def torch_cpu_capability(config_text):
    """The instruction set of ATen's own CPU kernels (elementwise ops, softmax, layer norm, the
    optimizers' loops; not the BLAS) from torch.__config__.show() in the process that runs them:
    PyTorch chooses it at start-up, ATEN_CPU_CAPABILITY (default, avx2, avx512) overrides it.
    Debian's torch 1.13 chooses AVX2 on the AVX-512 EPYCs of these machines."""
    for line in config_text.splitlines():
        _, found, value = line.partition("CPU capability usage:")
        if found:
            return value.strip()
    return "unknown"


def torch_missing(tool, find_spec=importlib.util.find_spec):
    """None if this Python imports torch, else the message `tool` exits with: the comparisons
    need Debian's python3-torch, which `make test` does not install."""
    if find_spec("torch") is not None:
        return None
    return (f"{tool}: PyTorch is not installed for this Python ({sys.executable}); the comparisons use "
            "Debian's python3-torch: scripts/install-deps.sh --python, then run the script with /usr/bin/python3")


def executable_missing(tool, path, what, how):
    """None if `path` is an executable file, else a message naming it, what it is and how to build it."""
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return None
    return f"{tool}: {what} {path} not found or not executable; build it with {how}"


def report_missing(*messages):
    """Prints the messages that are not None to stderr, one per line; True if there was one (the
    caller then exits with status 2)."""
    found = [m for m in messages if m]
    for m in found:
        print(m, file=sys.stderr)
    return bool(found)
