"""The machine a benchmark runs on: the CPU's name and features, the OpenBLAS kernel that fits
them (qkv chooses its kernel the same way: src/kernels/blas.cpp), and the environment both sides
of a comparison with PyTorch run in. Every comparison gives PyTorch's OpenBLAS the same kernel as
qkv's, since Debian's OpenBLAS 0.3.21 misdetects some of these CPUs and a machine may export an
OPENBLAS_CORETYPE that does not fit its CPU (Haswell on an AVX-512 one)."""
import importlib.util
import os
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
    """The environment of a benchmark process: the OpenBLAS core type `core`, (malloc "reuse")
    MALLOC_TUNABLES, and for a PyTorch process (`threads` given) OMP_NUM_THREADS and
    OPENBLAS_NUM_THREADS = threads and OMP_WAIT_POLICY=passive unless set (what qkv does by
    default). qkv takes its thread count from its command line and gives OpenBLAS one per call."""
    env = dict(os.environ if environ is None else environ)
    env.pop("QKV_BLAS_CORETYPE", None)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   OMP_WAIT_POLICY=env.get("OMP_WAIT_POLICY", "passive"))
    if malloc == "reuse":
        env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES"), MALLOC_TUNABLES) if t)
    return env


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
