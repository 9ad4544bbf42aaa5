#!/usr/bin/python3
"""The cost of calling qkv from Python: run_with_cache against the same forward pass in C++.

    tools/bench_python.py [--qkv build/qkv] [--checkpoint CKPT] [--repeats 200] [--threads 1]
                            [--out bench/results/DATE-CPU-python.md]

On a configs/zh.yaml-shaped model (a decoder of 3 layers, width 128, 4 heads, rotary positions,
5,452-character vocabulary; the checkpoint is trained for 20 steps unless one is given: the
weights do not change the cost) and one 64-token row, in one process:

  C++  model.logits                    the forward pass alone (TaskModel::logits)
  C++  nn::run_with_cache, all points  the forward pass recording every hook point (copies)
  C++  nn::run_with_cache, patterns    recording the hook_pattern points only
  Py   m(x)                            Model.__call__
  Py   m.run_with_cache(x)             every hook point (views of qkv's buffers)
  Py   m.run_with_cache(x, patterns)   names_filter="*.hook_pattern"

C++ and Python alternated call by call (a shared machine changes speed from second to second), and
reports medians, minimums and the median over the pairs of each Python call's time over its C++
twin's, and the memory a cache of the patterns holds: bytes of qkv's pool in use while the cache lives, against the patterns' bytes,
and what Python allocated (tracemalloc) during the call. The C++ side runs inside the module
(Model.time_cxx_forward), the same compiled code without the interpreter in the loop.

OpenBLAS's kernel and idle threads: like the qkv command, the script chooses the kernel from the
CPU and waits passively (tools/machine.py, restart_with_blas_env: it restarts itself with
OPENBLAS_CORETYPE and OMP_WAIT_POLICY set): numpy and qkv share one OpenBLAS, which reads the
variable when numpy is imported.
"""
import argparse
import datetime
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qkv", default=str(ROOT / "build" / "qkv"), help="the qkv command (its build holds the module)")
    p.add_argument("--checkpoint", help="a zh.yaml-shaped checkpoint (default: train one for 20 steps)")
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="write the report here (default: only print it)")
    return p.parse_args(argv)


def cpu_line():
    name, flags = machine.cpu_info()
    family = model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "cpu family" and family == "?":
                family = value.strip()
            elif key.strip() == "model" and model == "?":
                model = value.strip()
    return f"{name} (family {family}, model {model}, {machine.isa(flags)})", flags


def main(argv):
    a = parse(argv)
    cpu, flags = cpu_line()
    core, how = machine.restart_with_blas_env("QKV_BENCH_PYTHON_RESTARTED")
    build = pathlib.Path(a.qkv).resolve().parent
    sys.path.insert(0, str(build / "python"))
    import numpy as np
    import qkv
    from qkv import _qkv

    qkv.set_num_threads(a.threads)
    checkpoint = a.checkpoint
    tmp = None
    if not checkpoint:
        tmp = tempfile.TemporaryDirectory()
        env = dict(os.environ, QKV_BLAS_CORETYPE=core or "")
        subprocess.run([a.qkv, "train", str(ROOT / "configs/zh.yaml"), "--set", "train.steps=20",
                        "--set", "train.eval_every=20", "--set", "schedule.warmup_steps=2", "--set", "task.eval_size=4",
                        "--out", tmp.name, "--quiet"], check=True, env=env, stdout=subprocess.DEVNULL)
        checkpoint = os.path.join(tmp.name, "last.h5")
    m = qkv.load(checkpoint)
    row = m.held_out("validation", 1)
    x = {"inputs": row["inputs"][:, :64]}
    T = x["inputs"].shape[1]
    patterns = [n for n in m.hook_names if n.endswith("hook_pattern")]

    # Pairs of the same work, C++ then Python, alternated call by call so that both see the same
    # machine (a shared machine changes speed from second to second). Each call is timed in wall
    # time and in the calling thread's CPU time, which a busy machine does not inflate by
    # descheduling the process (with 1 thread all the work is on the calling thread).
    def python(f):
        def run():
            w0, c0 = time.perf_counter(), time.thread_time()
            f()
            return time.perf_counter() - w0, time.thread_time() - c0
        return run

    pairs = {
        "forward": (lambda: m._m.time_cxx_forward(x, [], 1)[0], python(lambda: m(x))),
        "all": (lambda: m._m.time_cxx_forward(x, m.hook_names, 1)[0], python(lambda: m.run_with_cache(x))),
        "patterns": (lambda: m._m.time_cxx_forward(x, patterns, 1)[0],
                     python(lambda: m.run_with_cache(x, names_filter="*.hook_pattern"))),
    }
    times = {k: {"cxx": [], "py": []} for k in pairs}  # (wall, cpu) seconds per call
    for cxx, py in pairs.values():  # warm-up: the pool fills
        cxx(), py()
    for _ in range(a.repeats):
        for k, (cxx, py) in pairs.items():
            times[k]["cxx"].append(cxx())
            times[k]["py"].append(py())

    # Memory of a patterns-only cache: the pool bytes it holds, Python's allocations during the call.
    m.run_with_cache(x, names_filter=patterns)
    before = _qkv.pool_stats()["in_use_bytes"]
    tracemalloc.start()
    logits, cache = m.run_with_cache(x, names_filter=patterns)
    _, python_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    held = _qkv.pool_stats()["in_use_bytes"] - before
    shared = all(not v.flags.owndata for v in cache.values())
    pattern_bytes, logit_bytes = cache.nbytes, logits.nbytes
    del logits, cache
    _, full = m.run_with_cache(x)

    info = qkv.info()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)

    def ms(k, side, which):  # median milliseconds, which = 0 wall, 1 CPU
        return 1000 * statistics.median(t[which] for t in times[k][side])

    def ratio(k, which):  # median over the pairs of Python / C++
        return statistics.median(p[which] / c[which] for c, p in zip(times[k]["cxx"], times[k]["py"]))

    def row(label_cxx, label_py, k):
        return [f"| C++ {label_cxx} | {ms(k, 'cxx', 1):.3f} | {ms(k, 'cxx', 0):.3f} | | |",
                f"| Py {label_py} | {ms(k, 'py', 1):.3f} | {ms(k, 'py', 0):.3f} | **{ratio(k, 1):.3f}** | {ratio(k, 0):.3f} |"]

    command = f"tools/bench_python.py --repeats {a.repeats} --threads {a.threads}" + (
        f" --checkpoint {a.checkpoint}" if a.checkpoint else "")
    lines = [
        f"{cpu}, commit {commit.stdout.strip()}: `{command}` ({datetime.date.today()})",
        "",
        "# Calling qkv from Python: run_with_cache against the same forward pass in C++",
        "",
        f"BLAS: {info['blas']} ({how}); {a.threads} thread(s); qkv {info['version']}; load average before the "
        f"run {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores."
        + ("" if a.checkpoint else " The checkpoint: configs/zh.yaml trained 20 steps."),
        f"Model: {m!r}; one row of T = {T} tokens; {a.repeats} pairs per line, C++ and Python alternated call by call.",
        "",
        "| call | CPU ms | wall ms | Python / C++, CPU | Python / C++, wall |",
        "|---|---:|---:|---:|---:|",
        *row("model.logits", "m(x)", "forward"),
        *row(f"nn::run_with_cache, all {len(m.hook_names)} hook points (copies)", "m.run_with_cache(x) (views)", "all"),
        *row(f"nn::run_with_cache, the {len(patterns)} hook_pattern points", "m.run_with_cache(x, names_filter='*.hook_pattern')",
             "patterns"),
        "",
        "Medians of the calls; the ratios are medians over the pairs of the Python call's time over its C++ twin's.",
        f"Recording every hook point against the bare forward pass (CPU): C++ {ms('all', 'cxx', 1) / ms('forward', 'cxx', 1):.3f}x, "
        f"Python {ms('all', 'py', 1) / ms('forward', 'py', 1):.3f}x (the fused attention computes the weights only when "
        "hook_pattern is recorded).",
        "",
        f"A patterns-only cache: {len(patterns)} arrays, {pattern_bytes} bytes, plus the logits {logit_bytes} bytes; "
        f"qkv's pool holds {held} bytes for them while they live (blocks rounded up to 64 bytes and to 1/8 steps "
        f"above 4 KiB); views of qkv's buffers (owndata False): {shared}; Python allocated at most {python_peak} "
        f"bytes during the call (tracemalloc). The full cache: {len(full)} arrays, {full.nbytes} bytes, also views.",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        pathlib.Path(a.out).write_text(text)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
