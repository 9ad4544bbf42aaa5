#!/usr/bin/python3
"""tools/blas_bound.py on made-up `perf script` output: which process is whose, the OpenBLAS
share of the steady middle of each, and the bounds it gives. (Running it for real needs perf and
PyTorch, which the suite does not install; docs/performance.md has its measurements.)"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import blas_bound  # noqa: E402

BLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so"
TORCH = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0"
failures = []


def check(what, got, expected):
    if got != expected:
        failures.append(f"{what}: got {got!r}, expected {expected!r}")


def lines(pid, t0, dsos, dt=0.001):
    return [f"  {pid} {t0 + i * dt:.6f}:      7fb0ea0716a8 ({d})" for i, d in enumerate(dsos)]


# qkv: 1000 samples of start-up in its own code, then 2000 steady ones, 4 in 5 in OpenBLAS, then
# 1000 of writing its checkpoint. The middle half by time (samples 1000-3000) is the steady part.
qkv = (["/work/main/build/qkv"] * 1000 + ([BLAS] * 4 + ["/work/main/build/qkv"]) * 400
       + ["/usr/lib/x86_64-linux-gnu/libhdf5_serial.so.103"] * 1000)
# PyTorch: 1000 samples importing torch, then 3000 steady ones, 2 in 3 in OpenBLAS (the rest in
# libtorch_cpu); its middle half (samples 1000-3000) lies in them.
torch = [TORCH] * 1000 + ([BLAS] * 2 + [TORCH]) * 1000
driver = ["/usr/bin/python3.11"] * 500 + [TORCH] * 300  # the driver script imports torch
text = lines(101, 10.0, qkv) + lines(102, 20.0, torch) + lines(100, 5.0, driver) + [
    "perf: some other line", "", "  7 12.5: x (unknown form"]
samples = blas_bound.parse_samples(reversed(text))  # any order in, time order out

check("processes", sorted(samples), [100, 101, 102])
check("time order", samples[101][0][0] < samples[101][-1][0], True)
check("qkv's process", blas_bound.side(samples[101]), "qkv")
check("bench_train counts as qkv", blas_bound.side([(0.0, "/x/build-bench/bench/bench_train"), (0.1, BLAS)]), "qkv")
check("PyTorch's process", blas_bound.side(samples[102]), "torch")
check("the driver importing torch trains nothing", blas_bound.side(samples[100]), None)
share, n = blas_bound.steady_share(samples[101])
check("qkv: the middle half is the steady part", (round(share, 3), n), (0.8, 2000))
share, n = blas_bound.steady_share(samples[102])
check("PyTorch: the middle half", round(share, 2), 0.67)
check("too few samples: no share", blas_bound.steady_share(samples[101][:300])[0], None)
shares = blas_bound.shares_by_side(samples)
check("shares by side", {k: [round(s, 2) for s in v] for k, v in shares.items()}, {"qkv": [0.8], "torch": [0.67]})

# A ratio of 1.2 with shares 0.8 and 0.6: PyTorch's OpenBLAS time per step is 1.2 * 0.6 / 0.8 = 0.9
# of qkv's, and qkv with nothing but its OpenBLAS calls would be 1.2 / 0.8 = 1.5x PyTorch.
check("bound", tuple(round(x, 6) for x in blas_bound.bound(1.2, 0.8, 0.6)), (0.9, 1.5))

# The same comparison with qkv's model FLOPs at 120 GFLOP/s of its step and a core whose FMA rate
# is 200: the FLOPs at that rate take 0.6 of the step, so with the rest (0.2) as it is the ratio is
# 1.2 / 0.8 = 1.5, and with nothing else 1.2 / 0.6 = 2.
check("FMA-rate bound", tuple(round(x, 6) for x in blas_bound.fma_bound(1.2, 0.8, 120.0, 200.0)), (1.5, 2.0))
LABEL = "16 floats per FMA (avx512bw)"
report = {"benchmarks": [
    {"name": "fma_peak/real_time", "run_type": "iteration", "GFLOP": g, "label": LABEL} for g in (230.0, 200.0, 220.0)] + [
    {"name": "fma_peak/real_time_mean", "run_type": "aggregate", "GFLOP": 999.0, "label": LABEL},
    {"name": "gemm_square/512/real_time", "run_type": "iteration", "GFLOP": 150.0}]}
check("FMA rate: the median of the fma_peak runs, not the aggregates", blas_bound.fma_rate(report), (220.0, LABEL))
try:
    blas_bound.fma_rate({"benchmarks": [{"name": "gemm_square/512/real_time", "GFLOP": 150.0}]})
    failures.append("no fma_peak run: no error")
except ValueError as e:
    check("no fma_peak run: the error says so", "no fma_peak" in str(e), True)
with tempfile.TemporaryDirectory() as tmp:  # a stand-in bench_kernels: the call and its parsing
    fake = os.path.join(tmp, "bench_kernels")
    with open(fake, "w") as f:
        f.write("#!/usr/bin/python3\nimport json, os, sys\n"
                "assert '--benchmark_filter=^fma_peak' in sys.argv and os.environ['QKV_BENCH_THREADS'] == '1'\n"
                f"print(json.dumps({report!r}))\n")
    os.chmod(fake, 0o755)
    check("measure_fma runs bench_kernels", blas_bound.measure_fma(fake, None), (220.0, LABEL))

check("one row", blas_bound.one_row({"rows": [{"ratio": 1.2}]}), {"ratio": 1.2})
for rows in ([], [{"ratio": 1.2}, {"ratio": 1.6}]):
    try:
        blas_bound.one_row({"rows": rows})
        failures.append(f"{len(rows)} rows: no error")
    except ValueError as e:
        check(f"{len(rows)} rows: the error says what to give", "one thread count and one workload" in str(e), True)
check("a process of neither side is not measured",
      blas_bound.shares_by_side({7: [(float(i), BLAS) for i in range(100)]}), {"qkv": [], "torch": []})
try:
    blas_bound.shares_by_side({8: [(float(i), "/x/qkv") for i in range(50)] + [(50.0 + i, BLAS) for i in range(50)]})
    failures.append("a 100-sample qkv process: no error")
except ValueError as e:
    check("a short training process: the error names it", "process 8 (qkv)" in str(e), True)

check("a good bench_lm command", blas_bound.command_problem(
    ["tools/bench_lm.py", "speed", "c.yaml", "--threads", "1", "--steps", "40"]), None)
check("a good bench_vs_torch command", blas_bound.command_problem(
    ["tools/bench_vs_torch.py", "--workloads=medium", "--threads=1"]), None)
for cmd, says in ((["tools/bench_lm.py", "curve", "c.yaml", "--threads", "1"], "only `speed`"),
                  (["tools/bench_lm.py", "speed", "c.yaml"], "--threads 1"),
                  (["tools/bench_vs_torch.py", "--workloads", "medium", "--threads", "1,2"], "--threads 1"),
                  (["tools/bench_lm.py", "speed", "c.yaml", "--threads", "2"], "--threads 1"),
                  (["tools/bench_vs_torch.py", "--threads", "1"], "one workload"),
                  (["tools/bench_vs_torch.py", "--workloads", "small,long", "--threads", "1"], "one workload"),
                  (["python3", "x.py"], "after --"), ([], "after --")):
    check(f"{cmd}: the problem named", says in (blas_bound.command_problem(cmd) or ""), True)

# perf missing, broken or not allowed to sample: said before the comparison starts, with the fix.
with tempfile.TemporaryDirectory() as tmp:
    said = blas_bound.perf_problem(None, tmp)
    check("no perf on PATH: named, with the package and the install command",
          "not installed" in said and "linux-perf" in said and "install-deps.sh --dev" in said, True)
    wrapper = os.path.join(tmp, "perf-wrapper")  # Debian's old wrapper when no perf fits the kernel
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\necho 'perf_6.18 not found' >&2\necho 'You may need to install linux-perf-6.18' >&2\nexit 1\n")
    os.chmod(wrapper, 0o755)
    said = blas_bound.perf_problem(wrapper, tmp)
    check("a perf that does not run: its message and the fix", "perf_6.18 not found" in said and "install-deps.sh --dev" in said,
          True)
    denied = os.path.join(tmp, "perf-denied")  # runs, but may not sample
    with open(denied, "w") as f:
        f.write("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'perf version 6.1'; exit 0; }\n"
                "echo 'Error: Access to performance monitoring and observability operations is limited.' >&2\nexit 255\n")
    os.chmod(denied, 0o755)
    said = blas_bound.perf_problem(denied, tmp)
    check("a perf that may not sample: said, with perf_event_paranoid", "cannot sample" in said and "perf_event_paranoid" in said,
          True)
    works = os.path.join(tmp, "perf-works")
    with open(works, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(works, 0o755)
    check("a working perf: no problem", blas_bound.perf_problem(works, tmp), None)
    env = {**os.environ, "PATH": tmp}  # the script itself: exit 2 and the message, no comparison run
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(blas_bound.__file__), "blas_bound.py"), "--",
                        "tools/bench_lm.py", "speed", "c.yaml", "--threads", "1"], env=env, capture_output=True, text=True)
    check("blas_bound.py without perf: exit 2", r.returncode, 2)
    check("blas_bound.py without perf: says so", "`perf` is not installed" in r.stderr, True)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("blas_bound: all checks passed")
