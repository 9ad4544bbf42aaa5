"""The machine a benchmark runs on: the CPU's name and features, and the OpenBLAS kernel that
fits them (qkv chooses its kernel the same way: src/kernels/blas.cpp). Every comparison with
PyTorch gives PyTorch's OpenBLAS the same choice, since Debian's OpenBLAS 0.3.21 misdetects
some of these CPUs."""


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
    """SkylakeX with avx512f, avx512bw and avx512vl, Haswell with avx2 and fma, else None (leave
    OpenBLAS to choose)."""
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None
