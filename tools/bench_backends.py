#!/usr/bin/python3
"""qkv's training step with its GEMMs on oneDNN where kernels::gemm_backend sends them, against
every product on OpenBLAS: one bench_train binary built with -DQKV_ONEDNN=ON, `--gemm default`
against `--gemm openblas`, interleaved (docs/performance.md, "oneDNN").

    /usr/bin/python3 tools/bench_backends.py [--bench build-bench/bench/bench_train] \\
        [--workloads medium,fortunes,decoder10.8M,mlm] [--threads 1,2] [--rounds 5] [--json out.json]

A round runs every workload and thread count once per backend, the order of the two alternating
from round to round (so a drift of the machine's speed favours neither). Each process: warm-up
steps, then timed steps (bench_train's defaults per workload below), tokens/s. The table gives the
medians, the median of the per-round ratios oneDNN / OpenBLAS with their range, and each side's MFU
(tools/mfu.py: the FMA peak of the CPUs run on, measured with bench_kernels before and after).
Processes with fewer threads than the machine has CPUs are pinned to the first ones (machine.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
import machine  # noqa: E402
import mfu  # noqa: E402

REPO = os.path.dirname(SCRIPTS)
DEFAULT_BENCH = os.path.join(REPO, "build-bench", "bench", "bench_train")
FORTUNES = os.path.join(REPO, "configs", "fortunes.yaml")
# name: (bench_train arguments, timed steps, warm-up steps)
WORKLOADS = {
    "small": (["--workload", "small"], 200, 5),
    "medium": (["--workload", "medium"], 8, 3),
    "long": (["--workload", "long"], 40, 5),
    "fortunes": (["--config", FORTUNES], 20, 5),
    "decoder10.8M": (["--config", FORTUNES] + [x for s in ("model.d_model=384", "model.heads=6", "model.layers=6",
                                                           "model.d_ff=1536") for x in ("--set", s)], 8, 3),
    "mlm": (["--config", os.path.join(REPO, "configs", "mlm.yaml")], 20, 5),
}


def flops_per_token(record):
    """PaLM's count (tools/mfu.py) for a bench_train record."""
    if "config_yaml" in record:
        import yaml
        return mfu.config_count(yaml.safe_load(record["config_yaml"]), record["num_classes"])["per_token"]
    import bench_vs_torch
    return mfu.workload_count(bench_vs_torch.WORKLOADS[record["workload"]])["per_token"]


def run(bench, args, threads, gemm, steps, warmup):
    cmd = [bench, *args, "--threads", str(threads), "--steps", str(steps), "--warmup", str(warmup), "--gemm", gemm]
    r = subprocess.run(cmd, capture_output=True, text=True, env=machine.comparison_env(CORE, "reuse"),
                       preexec_fn=machine.pin_to(machine.pinned_cpus(threads)))
    if r.returncode != 0:
        sys.exit(f"bench_backends: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


CORE = None


def main(argv=None):
    global CORE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--bench", default=DEFAULT_BENCH)
    ap.add_argument("--kernels", default=mfu.DEFAULT_KERNELS)
    ap.add_argument("--workloads", default="medium,fortunes,decoder10.8M,mlm")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    names = a.workloads.split(",")
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload {unknown[0]}; expected some of {', '.join(WORKLOADS)}")
    if machine.report_missing(machine.executable_missing("bench_backends", a.bench, "bench_train",
                                                        "make bench with -DQKV_ONEDNN=ON (or --bench)")):
        return 2
    name, flags = machine.cpu_info()
    CORE, core_source = machine.blas_coretype(flags)
    threads = [int(x) for x in a.threads.split(",")]
    capacity = {"before": machine.parallel_capacity(CORE)}
    peaks_before = mfu.measure_peaks(a.kernels, "bench_backends")
    res = {}
    for r in range(a.rounds):
        order = ("default", "openblas") if r % 2 == 0 else ("openblas", "default")
        for wl in names:
            args, steps, warmup = WORKLOADS[wl]
            for n in threads:
                for gemm in order:
                    rec = run(a.bench, args, n, gemm, steps, warmup)
                    rec.setdefault("workload", wl)
                    res.setdefault((wl, n, gemm), []).append(rec)
                print(f"  round {r + 1} {wl} x{n}: oneDNN {res[(wl, n, 'default')][-1]['tokens_per_s']:.0f}, "
                      f"OpenBLAS {res[(wl, n, 'openblas')][-1]['tokens_per_s']:.0f} tokens/s", file=sys.stderr, flush=True)
    capacity["after"] = machine.parallel_capacity(CORE)
    peaks_after = mfu.measure_peaks(a.kernels, "bench_backends") if peaks_before else None
    peaks = mfu.merge_peaks(peaks_before[0], peaks_after[0])[0] if peaks_before and peaks_after else None
    print(f"CPU: {name} ({machine.isa(flags)}), {os.cpu_count()} cores; OPENBLAS_CORETYPE {CORE or 'unset'} ({core_source})")
    print(f"BLAS with --gemm default: {res[(names[0], threads[0], 'default')][0]['blas']}")
    print("\n".join(machine.run_conditions(capacity, threads, "the rounds")))
    if peaks:
        print(mfu.peak_line(peaks_before[0], peaks_after[0], peaks_before[1]))
    print(f"{a.rounds} rounds, the two backends' order alternating; medians\n")
    print("| workload | threads | oneDNN + OpenBLAS tokens/s | OpenBLAS tokens/s | ratio | per-round range | MFU oneDNN | "
          "MFU OpenBLAS | operator new / pool misses per step |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for wl in names:
        for n in threads:
            d, o = res[(wl, n, "default")], res[(wl, n, "openblas")]
            ratios = [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(d, o)]
            flops = flops_per_token(d[0])
            peak = mfu.peak_for(peaks, n) if peaks else None
            td, to = statistics.median(x["tokens_per_s"] for x in d), statistics.median(x["tokens_per_s"] for x in o)
            row = {"workload": wl, "threads": n, "onednn_tokens_per_s": td, "openblas_tokens_per_s": to,
                   "ratio": statistics.median(ratios), "ratio_range": f"{min(ratios):.2f}-{max(ratios):.2f}",
                   "flops_per_token": flops, "onednn_mfu": mfu.mfu(td, flops, peak) if peak else None,
                   "openblas_mfu": mfu.mfu(to, flops, peak) if peak else None,
                   "new_per_step": max(x["operator_new_per_step"] for x in d + o),
                   "pool_misses_per_step": max(x["pool_system_allocs_per_step"] for x in d + o)}
            rows.append(row)
            pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
            print(f"| {wl} | {n} | {td:.0f} | {to:.0f} | {row['ratio']:.3f} | {row['ratio_range']} | "
                  f"{pct(row['onednn_mfu'])} | {pct(row['openblas_mfu'])} | {row['new_per_step']:.0f} / "
                  f"{row['pool_misses_per_step']:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": name, "rows": rows, "parallel_capacity": capacity, "fma_peaks": [peaks_before, peaks_after],
                       "records": {f"{k[0]} x{k[1]} {k[2]}": v for k, v in res.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
