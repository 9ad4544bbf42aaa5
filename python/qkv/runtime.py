"""The process side of qkv in Python: threads and which BLAS kernel runs."""

import os

from . import _qkv


def info():
    """What runs qkv here, as `qkv info` reports it.

    Returns a dict:
      version            qkv's version
      blas               OpenBLAS's description ("OpenBLAS (...), kernel Haswell"); this opens
                         OpenBLAS if no product has yet
      blas_kernel        the kernel (OpenBLAS core type) it runs, e.g. "Haswell"
      cpu_core_type      the core type that fits this CPU's features ("SkylakeX" with AVX-512,
                         "Haswell" with AVX2 + FMA, "" for older CPUs): what the qkv command uses
      openblas_coretype  OPENBLAS_CORETYPE as this process sees it (None when unset)
      threads            qkv's thread count (set_num_threads)
      openmp             built with OpenMP
      fast_kernel_hint   "" when the kernel fits the CPU; else how to get the fast one

    OpenBLAS picks its kernel when it is opened (qkv opens it at its first matrix product), from
    OPENBLAS_CORETYPE or its own detection, which misses recent CPUs; qkv's library never changes
    the environment. To get the kernel the qkv command runs, start Python with
    OPENBLAS_CORETYPE=<cpu_core_type> (docs/python.md, "Speed").
    """
    d = dict(_qkv.info())
    d["openblas_coretype"] = os.environ.get("OPENBLAS_CORETYPE")
    d["blas_kernel"] = d["blas"].rsplit("kernel ", 1)[-1] if "kernel " in d["blas"] else ""
    want = d["cpu_core_type"]
    if want and d["blas_kernel"].lower() != want.lower():
        d["fast_kernel_hint"] = (
            f"OpenBLAS runs its {d['blas_kernel']} kernels; this CPU runs {want}: start Python with "
            f"OPENBLAS_CORETYPE={want} (as the qkv command chooses)")
    else:
        d["fast_kernel_hint"] = ""
    return d


def num_threads():
    """The number of threads qkv's kernels use (OpenMP; BLAS runs one per call)."""
    return _qkv.num_threads()


def set_num_threads(n):
    """Use `n` threads in qkv's kernels (as `--threads N`), for the whole process. Results are the
    same bits for any thread count."""
    _qkv.set_num_threads(int(n))
