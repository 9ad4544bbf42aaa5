#!/usr/bin/python3
"""How much of each side's training step is OpenBLAS, and the speed-up that leaves qkv at most
(docs/performance.md, "The BLAS bound, measured").

    /usr/bin/python3 tools/blas_bound.py [--freq 999] [--keep DIR] -- tools/bench_lm.py speed \\
        configs/fortunes.yaml --threads 1 --steps 40 --rounds 3
    /usr/bin/python3 tools/blas_bound.py -- tools/bench_vs_torch.py --workloads medium --threads 1 --runs 3

Runs the comparison (`bench_lm.py speed` or `bench_vs_torch.py`, one workload, 1 thread: at more
threads a step's wall-clock time is not the CPU time perf samples) under `perf record` (cpu-clock
samples of every process it starts) and adds `--json` to it for its table. Each training process
is told apart by the code it runs: qkv's (samples in the `qkv` or `bench_train` executable) or
PyTorch's (samples in libtorch_cpu). For each process it takes the
middle half of its samples in time, which lies inside its training steps (start-up, data loading
and warm-up come before, the end of the run after), and counts the share of those samples that
fall in OpenBLAS (libopenblas: the sgemm kernels, their packing, OpenBLAS's zeroing of C).

Both sides call the same OpenBLAS. With r = qkv's tokens/s over PyTorch's (the comparison's
median ratio), s_q and s_t the two OpenBLAS shares (medians over the rounds' processes):

    PyTorch's OpenBLAS time per step / qkv's   = r s_t / s_q
    ceiling = PyTorch's step / qkv's OpenBLAS time per step = r / s_q

The ceiling is the ratio qkv would reach if everything in its step outside OpenBLAS took no time,
with its BLAS calls as they are: a target above it needs fewer or faster matrix products, not
faster code around them.

How much faster could the products be? No float32 GEMM runs faster than the core's FMA rate P
(`bench_kernels` fma_peak: independent FMA chains, no memory traffic, at the build's vector
width), run here on the comparison's CPU after it. With g qkv's model GFLOP/s (as bench_train
counts them: every attention score), the model's FLOPs at the rate P take g / P of qkv's step, so

    products at the FMA rate, the rest of the step as it is = r / (1 - s_q + g / P)
    products at the FMA rate and nothing else in the step  = r / (g / P)

are what any GEMM of qkv's own could give at most: a target above the first needs the rest of the
step to shrink as well, one above the second cannot be reached. (qkv's causal attention skips
some scores the count includes, so g / P overstates the products' time at P by their share: about
1-3% for the language models.) Needs `perf` (Debian's linux-perf: scripts/install-deps.sh --dev)
and a kernel that lets this user sample (perf_event_paranoid <= 2 for one's own processes): the
script checks both before it starts and exits 2 saying which is missing. The FMA-rate lines need
`bench_kernels` (`make bench`; --kernels).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
from machine import cpu_info, executable_missing, isa, pin_to, pinned_cpus, report_missing, torch_missing  # noqa: E402
from wrapper import parse_with_command, work_dir  # noqa: E402

REPO = os.path.dirname(SCRIPTS)
DEFAULT_KERNELS = os.path.join(REPO, "build-bench", "bench", "bench_kernels")
QKV_EXECUTABLES = ("qkv", "bench_train")
TORCH_LIBRARY = "libtorch_cpu"
BLAS_LIBRARY = "libopenblas"

# `perf script -F pid,time,ip,dso`: "  12451 48741.123456:      7fb0ea0716a8 (/usr/lib/.../libopenblasp-r0.3.21.so)"
_SAMPLE = re.compile(r"\s*(\d+)\s+([\d.]+):\s+\S+\s+\((.*)\)\s*$")


def parse_samples(lines):
    """{pid: [(time_s, dso path), ...]} from `perf script -F pid,time,ip,dso` lines, in time order;
    lines of another form are skipped."""
    samples = {}
    for line in lines:
        m = _SAMPLE.match(line)
        if m:
            samples.setdefault(int(m.group(1)), []).append((float(m.group(2)), m.group(3)))
    for s in samples.values():
        s.sort()
    return samples


def blas_share(dsos):
    """The share of samples (dso paths) in OpenBLAS."""
    return sum(os.path.basename(d).startswith(BLAS_LIBRARY) for d in dsos) / max(1, len(dsos))


def side(samples, min_blas=0.1):
    """"qkv", "torch" or None: which framework's training a process ran, by the code its samples
    fall in. None for a process with under `min_blas` of its samples in OpenBLAS, which trains
    nothing (the driver importing torch, `qkv info`), and for one that runs neither framework's
    code (a capacity probe's sgemm loop)."""
    names = {os.path.basename(dso) for _, dso in samples}
    if blas_share([d for _, d in samples]) < min_blas:
        return None
    if any(n in QKV_EXECUTABLES for n in names):
        return "qkv"
    if any(n.startswith(TORCH_LIBRARY) for n in names):
        return "torch"
    return None


def steady_share(samples, min_samples=200):
    """The share of OpenBLAS samples in the middle half (by time) of a process's samples, and how
    many samples that half has; None if it has fewer than `min_samples` (too short to say)."""
    t0, t1 = samples[0][0], samples[-1][0]
    lo, hi = t0 + 0.25 * (t1 - t0), t0 + 0.75 * (t1 - t0)
    window = [dso for t, dso in samples if lo <= t <= hi]
    if len(window) < min_samples:
        return None, len(window)
    return blas_share(window), len(window)


def bound(ratio, qkv_share, torch_share):
    """(PyTorch's OpenBLAS time per step over qkv's, the ceiling ratio): see the module's docstring."""
    return ratio * torch_share / qkv_share, ratio / qkv_share


def fma_bound(ratio, qkv_share, model_gflops, fma_gflops):
    """(the ratio with qkv's products at the core's FMA rate and the rest of its step as it is,
    the same with nothing else in the step): see the module's docstring."""
    at_peak = model_gflops / fma_gflops  # the model's FLOPs at the FMA rate, as a share of qkv's step
    return ratio / (1 - qkv_share + at_peak), ratio / at_peak


def fma_rate(report):
    """(median GFLOP/s, label) of the fma_peak runs in `bench_kernels --benchmark_format=json`
    output; an error if there are none."""
    runs = [b for b in report.get("benchmarks", [])
            if b.get("name", "").startswith("fma_peak") and b.get("run_type", "iteration") == "iteration"]
    if not runs:
        raise ValueError("bench_kernels reported no fma_peak run")
    return statistics.median(b["GFLOP"] for b in runs), runs[0].get("label", "")


def measure_fma(kernels, cpus, repetitions=5):
    """(GFLOP/s, label) of bench_kernels' fma_peak on `cpus` (the comparison's 1-thread CPU)."""
    cmd = [kernels, "--benchmark_filter=^fma_peak", "--benchmark_format=json",
           f"--benchmark_repetitions={repetitions}"]
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin_to(cpus),
                       env={**os.environ, "QKV_BENCH_THREADS": "1"})
    if r.returncode != 0:
        sys.exit(f"blas_bound: {' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()}")
    try:
        return fma_rate(json.loads(r.stdout))
    except (ValueError, KeyError) as e:
        sys.exit(f"blas_bound: {kernels}: {e}")


def one_row(report):
    """The comparison's one row (one thread count, one workload) from its --json; an error naming
    what it found otherwise."""
    rows = report.get("rows", [])
    if len(rows) != 1:
        raise ValueError(f"the comparison reported {len(rows)} rows; give it one thread count and one workload "
                         "(--threads 1, and --workloads W for bench_vs_torch.py)")
    return rows[0]


def option(cmd, name):
    """The value of `--name V` or `--name=V` in an argument list, or None."""
    for i, arg in enumerate(cmd):
        if arg == name and i + 1 < len(cmd):
            return cmd[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def command_problem(cmd):
    """None if `cmd` is a comparison this script can read (bench_lm.py speed, or bench_vs_torch.py
    with one workload; at 1 thread), else what is wrong: checked before the comparison runs, since
    it takes minutes."""
    script = os.path.basename(cmd[0]) if cmd else ""
    if script not in ("bench_lm.py", "bench_vs_torch.py"):
        return "give the comparison after --: tools/bench_lm.py speed ... or tools/bench_vs_torch.py ..."
    if script == "bench_lm.py" and cmd[1:2] != ["speed"]:
        return "of bench_lm.py only `speed` trains: tools/bench_lm.py speed CONFIG ..."
    if script == "bench_vs_torch.py":
        workloads = option(cmd, "--workloads")
        if workloads is None or "," in workloads:
            return f"give {script} one workload (--workloads W): the shares are per process, one row of the table"
    if option(cmd, "--threads") != "1":
        return (f"give {script} --threads 1: at more threads a step's wall-clock time is not the CPU time "
                "perf samples (threads wait for each other), so the bound's formula would not hold")
    return None


def shares_by_side(samples):
    """{"qkv": [share, ...], "torch": [...]}: the steady OpenBLAS share of each training process."""
    out = {"qkv": [], "torch": []}
    for pid in sorted(samples, key=lambda p: samples[p][0][0]):
        who = side(samples[pid])
        if who is None:
            continue
        share, n = steady_share(samples[pid])
        if share is None:
            raise ValueError(f"process {pid} ({who}) has {n} samples in the middle half of its run: too short to "
                             "measure; give the comparison more timed steps or raise --freq")
        out[who].append(share)
    return out


def measure(perf, cmd, freq, work):
    """Runs the comparison under perf record in directory `work`: (its table's row, the shares by side)."""
    data, report_path = os.path.join(work, "perf.data"), os.path.join(work, "bench.json")
    run = [perf, "record", "-q", "-F", str(freq), "-o", data, "--", "/usr/bin/python3", *cmd, "--json", report_path]
    print("$ " + " ".join(run), file=sys.stderr, flush=True)
    if subprocess.run(run).returncode != 0:
        sys.exit("blas_bound: the comparison under perf record failed (see above)")
    script = subprocess.run([perf, "script", "-i", data, "-F", "pid,time,ip,dso"], capture_output=True, text=True)
    if script.returncode != 0:
        sys.exit(f"blas_bound: perf script failed: {script.stderr.strip()}")
    with open(os.path.join(work, "samples.txt"), "w") as f:
        f.write(script.stdout)
    try:
        with open(report_path) as f:
            row = one_row(json.load(f))
        shares = shares_by_side(parse_samples(script.stdout.splitlines()))
    except ValueError as e:
        sys.exit(f"blas_bound: {e}")
    for who in ("qkv", "torch"):
        if not shares[who]:
            sys.exit(f"blas_bound: no {who} training process among the samples")
    return row, shares


def perf_problem(perf, work):
    """None when `perf` (a path, or None when not on PATH) runs and may sample a process of this
    user, else what is wrong and how to mend it: checked before the comparison, which takes minutes."""
    install = "install Debian's linux-perf with scripts/install-deps.sh --dev"
    if not perf:
        return f"blas_bound: `perf` is not installed (not on PATH): {install}"
    try:
        r = subprocess.run([perf, "--version"], capture_output=True, text=True)
    except OSError as e:
        return f"blas_bound: {perf} cannot be run ({e.strerror}): {install}"
    if r.returncode != 0:  # e.g. a wrapper that finds no perf for the running kernel
        said = (r.stderr or r.stdout).strip().splitlines()
        return f"blas_bound: {perf} --version failed ({said[0] if said else f'exit {r.returncode}'}): {install}"
    r = subprocess.run([perf, "record", "-q", "-o", os.path.join(work, "probe.data"), "--", "true"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        try:
            with open("/proc/sys/kernel/perf_event_paranoid") as f:
                paranoid = f.read().strip()
        except OSError:
            paranoid = "unknown"
        said = (r.stderr or r.stdout).strip().splitlines()
        return (f"blas_bound: perf is installed but cannot sample here ({said[0] if said else f'exit {r.returncode}'}); "
                f"kernel.perf_event_paranoid is {paranoid} (a user's own processes need <= 2: sysctl "
                "kernel.perf_event_paranoid=2, or run as root)")
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--freq", type=int, default=999, help="samples per second (perf record -F)")
    ap.add_argument("--keep", help="keep perf.data, the samples (samples.txt: perf script) and the comparison's "
                    "JSON (bench.json) in this directory")
    ap.add_argument("--kernels", default=DEFAULT_KERNELS,
                    help="bench_kernels, for the core's FMA rate (its fma_peak); build it with `make bench`. "
                    "Give the one built like the binary compared (build-avx2/bench/bench_kernels for the AVX2 path)")
    a, cmd = parse_with_command(ap, argv, "the comparison script and its arguments")
    problem = command_problem(cmd)
    if problem:
        ap.error(problem)
    perf = shutil.which("perf")
    with work_dir(a.keep, "blas_bound-") as work:
        if report_missing(perf_problem(perf, work), torch_missing("blas_bound")):
            return 2
        row, shares = measure(perf, cmd, a.freq, work)
    no_kernels = executable_missing("blas_bound", a.kernels, "bench_kernels", "`make bench` or give --kernels")
    fma = None if no_kernels else measure_fma(a.kernels, pinned_cpus(1))
    sq, st = statistics.median(shares["qkv"]), statistics.median(shares["torch"])
    blas_time, ceiling = bound(row["ratio"], sq, st)
    name, flags = cpu_info()
    what = row.get("workload", "the language model")
    print(f"CPU: {name} ({isa(flags)}); {what}, {row['threads']} thread(s); cpu-clock samples at {a.freq} Hz, "
          "the middle half of each training process")
    print("\n| side | processes | OpenBLAS share of the step (median; each process) | tokens/s |")
    print("|---|---|---|---|")
    for who, label in (("qkv", "qkv"), ("torch", "PyTorch")):
        each = ", ".join(f"{s:.3f}" for s in shares[who])
        print(f"| {label} | {len(shares[who])} | {statistics.median(shares[who]):.3f} ({each}) | "
              f"{row[f'{who}_tokens_per_s']:.0f} |")
    print(f"\nqkv / PyTorch tokens/s (the comparison's median ratio): {row['ratio']:.2f}")
    print(f"PyTorch's OpenBLAS time per step / qkv's: {blas_time:.2f}")
    print(f"ceiling (PyTorch's step / qkv's OpenBLAS time per step; qkv with nothing but its BLAS calls): "
          f"{ceiling:.2f}")
    g = row.get("qkv_model_gflops")
    if fma is None:
        print(f"\n(no FMA-rate bound: {no_kernels})")
    elif not g:
        print("\n(no FMA-rate bound: the comparison reported no model FLOPs for qkv)")
    else:
        rest, alone = fma_bound(row["ratio"], sq, g, fma[0])
        print(f"\nqkv's model FLOPs: {g:.1f} GFLOP/s of its step, {g / sq:.1f} GFLOP/s of its OpenBLAS time")
        print(f"the core's FMA rate (bench_kernels fma_peak, 1 thread, {fma[1]}): {fma[0]:.1f} GFLOP/s; qkv's "
              f"OpenBLAS time runs at {g / sq / fma[0]:.2f} of it")
        print(f"products at the FMA rate (no float32 GEMM is faster), the rest of qkv's step as it is: {rest:.2f}")
        print(f"products at the FMA rate and nothing else in qkv's step: {alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
