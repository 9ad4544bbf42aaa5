#!/usr/bin/python3
"""tools/machine.py: the benchmarks give both sides the OpenBLAS core type qkv would choose
(src/kernels/blas.cpp), whatever the environment says, and keep freed memory with glibc's malloc."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import machine  # noqa: E402

AVX512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}
AVX2 = {"avx2", "fma", "sse3"}
failures = []


def check(what, got, expected):
    if got != expected:
        failures.append(f"{what}: got {got!r}, expected {expected!r}")


check("AVX-512, nothing set", machine.blas_coretype(AVX512, {})[0], "SkylakeX")
check("AVX2, nothing set", machine.blas_coretype(AVX2, {})[0], "Haswell")
check("SSE only, nothing set", machine.blas_coretype({"sse3"}, {})[0], None)
core, source = machine.blas_coretype(AVX512, {"OPENBLAS_CORETYPE": "Haswell"})
check("AVX-512 with an inherited Haswell", core, "SkylakeX")
check("the replaced value is named", "OPENBLAS_CORETYPE=Haswell in the environment not used" in source, True)
check("AVX2 with an inherited SkylakeX", machine.blas_coretype(AVX2, {"OPENBLAS_CORETYPE": "SkylakeX"})[0], "Haswell")
check("AVX-512 with an inherited Cooperlake", machine.blas_coretype(AVX512, {"OPENBLAS_CORETYPE": "Cooperlake"})[0],
      "Cooperlake")
check("AVX2 with an inherited Zen", machine.blas_coretype(AVX2, {"OPENBLAS_CORETYPE": "Zen"})[0], "Zen")
check("QKV_BLAS_CORETYPE wins", machine.blas_coretype(AVX512, {"QKV_BLAS_CORETYPE": "Prescott",
                                                               "OPENBLAS_CORETYPE": "Haswell"})[0], "Prescott")
check("a flag short of AVX-512 (no avx512cd)", machine.openblas_coretype(AVX512 - {"avx512cd"}), "Haswell")

env = machine.comparison_env("SkylakeX", "reuse", threads=2,
                             environ={"OPENBLAS_CORETYPE": "Haswell", "QKV_BLAS_CORETYPE": "Prescott",
                                      "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})
check("the PyTorch side's core type", env["OPENBLAS_CORETYPE"], "SkylakeX")
check("qkv is given the same core type, to use as it is", env["QKV_BLAS_CORETYPE"], "SkylakeX")
check("threads", (env["OMP_NUM_THREADS"], env["OPENBLAS_NUM_THREADS"], env["OMP_WAIT_POLICY"]), ("2", "2", "passive"))
check("tunables appended", env["GLIBC_TUNABLES"], "glibc.malloc.hugetlb=1:" + machine.MALLOC_TUNABLES)
check("no core type: none forced on qkv", "QKV_BLAS_CORETYPE" in machine.comparison_env(
    None, "default", environ={"QKV_BLAS_CORETYPE": "Prescott"}), False)
env = machine.comparison_env("Haswell", "default", environ={"OMP_WAIT_POLICY": "active"})
check("qkv's side: no thread variables", ("OMP_NUM_THREADS" in env, env["OMP_WAIT_POLICY"]), (False, "active"))
check("malloc default: no tunables", "GLIBC_TUNABLES" in env, False)
check("a page fault costs a positive time", machine.page_fault_us(4) > 0, True)

check("capacity: full speed side by side", machine.capacity(0.2, [0.2, 0.2]), 2.0)
check("capacity: each twice as slow together", machine.capacity(0.2, [0.4, 0.4]), 1.0)
check("capacity line: no warning at full speed", "WARNING" in machine.capacity_line(1.9, 2, "before"), False)
check("capacity line: a warning under 0.8 n", "WARNING" in machine.capacity_line(1.2, 2, "before"), True)
cap = machine.parallel_capacity(machine.blas_coretype(machine.cpu_info()[1])[0], n=2, reps=4, m=256)
check("parallel_capacity: two processes measured, a positive capacity", cap > 0, True)
lines = machine.run_conditions({"before": 1.2, "after": 1.9}, [1, 2], n=2)
check("run_conditions: both capacities, the warning on the low one, the CPUs line",
      (len(lines), "WARNING" in lines[0], "WARNING" in lines[1], lines[2].startswith("CPUs of each thread count")),
      (3, True, False, True))
check("pinned_cpus: 1 thread of 2 CPUs pins to the first", machine.pinned_cpus(1, {3, 1}), [1])
check("pinned_cpus: as many threads as CPUs, not pinned", machine.pinned_cpus(2, {0, 1}), None)
check("pinned_cpus: more threads than CPUs, not pinned", machine.pinned_cpus(4, {0, 1}), None)
check("pin_to(None): no preexec_fn", machine.pin_to(None), None)
check("cpus_text", (machine.cpus_text([0]), machine.cpus_text(None)), ("pinned to CPU 0", "not pinned (all CPUs)"))
if len(os.sched_getaffinity(0)) > 1:
    import subprocess
    cpu = machine.pinned_cpus(1)
    r = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True, preexec_fn=machine.pin_to(cpu))
    check("pin_to: the child runs on the pinned CPU only", r.stdout.strip(), str(cpu))

msg = machine.torch_missing("bench_x", find_spec=lambda name: None)
check("no torch: the message names the tool and the install command",
      msg is not None and msg.startswith("bench_x: PyTorch is not installed") and "install-deps.sh --python" in msg, True)
check("torch found: no message", machine.torch_missing("bench_x", find_spec=lambda name: object()), None)
msg = machine.executable_missing("bench_x", "/nonexistent/bench_train", "the benchmark binary", "make bench")
check("a missing binary: path and how to build it", "/nonexistent/bench_train" in msg and "make bench" in msg, True)
check("an executable: no message", machine.executable_missing("bench_x", sys.executable, "python", "-"), None)
check("report_missing: nothing missing", machine.report_missing(None, None), False)
check("report_missing: one message", machine.report_missing(None, "test_machine: (a message printed on purpose)"), True)

show = "PyTorch built with:\n  - GCC 12.2\n  - CPU capability usage: AVX2\n  - Build settings: BLAS_INFO=generic"
check("torch_cpu_capability: read from torch.__config__.show()", machine.torch_cpu_capability(show), "AVX2")
check("torch_cpu_capability: a build that does not say", machine.torch_cpu_capability("PyTorch built with:\n"), "unknown")

check("kernel_mismatch: same kernel", machine.kernel_mismatch("OpenBLAS (...), kernel SkylakeX [chosen by qkv]",
                                                               "OpenBLAS, kernel skylakex"), None)
msg = machine.kernel_mismatch("OpenBLAS (...), kernel SkylakeX [chosen by qkv]", "OpenBLAS, kernel Haswell")
check("kernel_mismatch: both kernels named", msg is not None and "SkylakeX" in msg and "Haswell" in msg, True)
check("kernel_mismatch: a twin's 'core NAME'", machine.kernel_mismatch(
    "OpenBLAS (OpenBLAS 0.3.21 DYNAMIC_ARCH SkylakeX), kernel SkylakeX", "OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell, core Haswell")
      is not None, True)
check("kernel_mismatch: a side not run", machine.kernel_mismatch("OpenBLAS, kernel Haswell", "not run"), None)

# The qkv binary (argument 1) runs the kernel the comparison gives it, also one below the CPU's best
# (Haswell on an AVX-512 CPU, which qkv replaces when it finds it in OPENBLAS_CORETYPE alone).
if len(sys.argv) > 1:
    import subprocess
    flags = machine.cpu_info()[1]
    cores = [c for c in ("Haswell", machine.openblas_coretype(flags)) if c and (c != "Haswell" or {"avx2", "fma"} <= flags)]
    if not cores:
        print("test_machine: this CPU runs neither Haswell nor a better core type; qkv's kernel not checked")
    for core in dict.fromkeys(cores):
        r = subprocess.run([sys.argv[1], "info"], capture_output=True, text=True,
                           env=machine.comparison_env(core, environ={**os.environ, "OPENBLAS_CORETYPE": "Prescott"}))
        blas = next((row for row in r.stdout.splitlines() if row.startswith("BLAS:")), r.stdout + r.stderr)
        check(f"qkv info under comparison_env({core!r}) runs kernel {core}", f"kernel {core}" in blas, True)

for f in failures:
    print("FAIL", f)
print(f"test_machine: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
