#!/usr/bin/python3
"""Model FLOPs utilisation (MFU) of a training step: the model's FLOPs per second over the FMA peak
of the cores it ran on (docs/performance.md).

    /usr/bin/python3 tools/mfu.py flops RUN_DIR          # a qkv train run: its config.yaml and last.h5
    /usr/bin/python3 tools/mfu.py flops --workload medium
    /usr/bin/python3 tools/mfu.py peak [--kernels build-bench/bench/bench_kernels]
    /usr/bin/python3 tools/mfu.py table RESULT.json ... [--targets]

`flops` prints the count below for a run of `qkv train` (the config it resolved, the output
layer's size from its checkpoint) or an encoder workload of tools/bench_vs_torch.py. `peak` runs bench_kernels' fma_peak pinned to each CPU. `table` joins
the --json outputs of bench_vs_torch.py and bench_lm.py speed (which measure the peak in the
same run) into one Markdown table: MFU and the ratio to PyTorch per workload and thread count.

The count is PaLM's (Chowdhery et al. 2022, appendix B): per token of a training step

    6 N + 12 L H Q T

multiply-adds times 2, forward and backward (the backward does two products per forward one).
N counts the weights that multiply activations:
  - per layer the q, k, v projections (C x H Dk twice, C x H Dv), the output projection (H Dv x C)
    and the feed-forward's two matrices (C x d_ff each; none with model.attn_only);
  - the output layer, C x V: a Linear layer of its own (the encoders, an untied decoder) or the
    token embedding read as a matrix (a decoder with model.tie_embeddings). It is the one place
    an embedding counts: it is a product at every scored position.
Not counted: the token embedding's lookup and positional tables (a gather and an addition, no
product), biases and layer-norm gains and shifts (elementwise, under 0.5% of N here), dropout,
softmax and the optimizer. 12 L H Q T is the attention: scores Q K^T and the weighted sum P V over
all T keys, 2 T H (Dk + Dv) multiply-adds per token and layer, times 3 (with Q = Dk = Dv, PaLM's
12 L H Q T). A causal model needs only the keys up to each query, about half; PaLM counts all T,
and so does this, so a causal model's attention term is about twice what it computes.
The output layer counts at the positions the loss scores: every position for the encoders of
bench_vs_torch.py (the sort task labels each) and for a language model (next token everywhere), the
masked positions only for a masked language model (task.objective masked: round(mask_rate T) of T,
as qkv's data draws them). qkv and the PyTorch twin both compute the logits at every position; the
rest is work the model does not need, and MFU leaves it out (PaLM's definition counts the model,
not the implementation).

MFU = tokens/s x FLOPs per token / (sum of the FMA peaks of the CPUs the process ran on), with the
peak of one CPU from bench_kernels' fma_peak (12 independent FMA chains at the build's vector
width, 1 thread pinned to that CPU): a 1-thread process pinned to CPU 0 is measured against CPU 0's
peak, a 2-thread one against CPU 0's plus CPU 1's (machine.pinned_cpus decides the CPUs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
from machine import cpu_info, isa, pin_to, pinned_cpus  # noqa: E402

REPO = os.path.dirname(SCRIPTS)
DEFAULT_KERNELS = os.path.join(REPO, "build-bench", "bench", "bench_kernels")

# The goals of docs/performance.md: MFU at 1 thread, per core at 2, and qkv / PyTorch at 1 and 2.
MFU_TARGETS = {1: 0.75, 2: 0.70}
MFU_WORKLOADS = ("medium", "fortunes", "decoder 10.8M")
RATIO_TARGETS = {"small": (2.5, 2.5), "medium": (1.6, 1.6), "long": (3.0, 3.0), "fortunes": (1.4, 1.8),
                 "decoder 10.8M": (1.25, 1.5), "masked LM": (None, 1.5)}


def count(C, L, H, T, V, d_ff, Dk=None, Dv=None, scored=1.0, attn_only=False):
    """{"N", "parameters", "attention", "per_token"}: PaLM's count (module docstring). C model width,
    L layers, H heads, T context, V output classes, Dk / Dv head widths (default C / H), `scored` the
    share of positions the loss reads (the output layer counts there only)."""
    Dk = Dk or C // H
    Dv = Dv or C // H
    F = 0 if attn_only else d_ff
    layer = C * H * Dk * 2 + C * H * Dv + H * Dv * C + 2 * C * F
    N = L * layer + C * V * scored
    attention = 6.0 * L * T * H * (Dk + Dv)
    return {"N": N, "parameters": 6.0 * N, "attention": attention, "per_token": 6.0 * N + attention}


def scored_share(task):
    """The share of positions a task's loss scores: round(mask_rate T) / T (at least 1) for the masked
    objective, all of them otherwise."""
    if task.get("objective", "causal") != "masked":
        return 1.0
    T = int(task["length"])
    return max(1, min(T, int(round(float(task.get("mask_rate", 0.15)) * T)))) / T


def config_count(cfg, vocab):
    """The count for a resolved config (qkv's config.yaml of a run, or `qkv config`'s output) whose
    output layer has `vocab` classes; None for an architecture it does not cover (seq2seq)."""
    m, task = cfg["model"], cfg["task"]
    if m.get("arch", "encoder") not in ("encoder", "decoder"):
        return None
    C, H = int(m["d_model"]), int(m["heads"])
    return count(C, int(m["layers"]), H, int(task["length"]), int(vocab), int(m["d_ff"]),
                 Dk=int(m.get("head_dim") or 0) or None, Dv=int(m.get("value_dim") or 0) or None,
                 scored=scored_share(task), attn_only=bool(m.get("attn_only")))


# tools/bench_vs_torch.py's encoder workloads (vocab, seq, d_model, heads, layers, d_ff, batch).
def workload_count(w):
    V, T, C, H, L, F, _ = w
    return count(C, L, H, T, V, F)


def fma_peak(kernels, cpu, repetitions=3, benchmark="fma_peak"):
    """(GFLOP/s, label): the median of bench_kernels' fma_peak runs (or `benchmark`'s:
    bf16_gemm_peak, a large bf16 GEMM's rate), 1 thread pinned to `cpu`."""
    cmd = [kernels, f"--benchmark_filter=^{benchmark}", "--benchmark_format=json",
           f"--benchmark_repetitions={repetitions}"]
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin_to([cpu]),
                       env={**os.environ, "QKV_BENCH_THREADS": "1"})
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()}")
    runs = [b for b in json.loads(r.stdout).get("benchmarks", [])
            if b.get("name", "").startswith(benchmark) and b.get("run_type", "iteration") == "iteration"]
    if not runs:
        raise RuntimeError(f"{kernels} reported no {benchmark} run")
    return statistics.median(b["GFLOP"] for b in runs), runs[0].get("label", "")


def fma_peaks(kernels, cpus=None, benchmark="fma_peak"):
    """{cpu: GFLOP/s} of every CPU this process may run on (or `cpus`), and the label of the runs."""
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    peaks, label = {}, ""
    for c in cpus:
        peaks[c], label = fma_peak(kernels, c, benchmark=benchmark)
    return peaks, label


def peak_for(peaks, threads, available=None):
    """The FMA peak (GFLOP/s) of the CPUs a `threads`-thread process runs on (machine.pinned_cpus:
    the first `threads` CPUs, or all of them)."""
    cpus = pinned_cpus(threads, available) or sorted(peaks)
    return sum(peaks[c] for c in cpus[:threads])


def measure_peaks(kernels, what, benchmark="fma_peak"):
    """fma_peaks(kernels) or None with a note on stderr when bench_kernels is missing or fails (the
    comparison runs anyway, without MFU)."""
    if not (os.path.isfile(kernels) and os.access(kernels, os.X_OK)):
        print(f"{what}: no MFU: bench_kernels {kernels} not found (make bench, or --kernels)", file=sys.stderr)
        return None
    try:
        return fma_peaks(kernels, benchmark=benchmark)
    except (RuntimeError, ValueError) as e:
        print(f"{what}: no MFU: {e}", file=sys.stderr)
        return None


def merge_peaks(before, after):
    """The peaks measured before and after a comparison: {cpu: mean}, and their spread as text."""
    cpus = sorted(before)
    mean = {c: (before[c] + after[c]) / 2 for c in cpus}
    text = "; ".join(f"CPU {c} {before[c]:.1f} / {after[c]:.1f}" for c in cpus)
    return mean, text


def peak_line(before, after, label, what="FMA peak per CPU (bench_kernels fma_peak"):
    return (f"{what}, {label}), before / after the rounds, GFLOP/s: "
            + "; ".join(f"CPU {c} {before[c]:.1f} / {after[c]:.1f}" for c in sorted(before)))


def mfu(tokens_per_s, flops_per_token, peak_gflops):
    return tokens_per_s * flops_per_token / (peak_gflops * 1e9)


# ---- the commands ----

def output_classes(tensors):
    """V of the output layer from a checkpoint's tensors ({name: array}): the head's rows, or the
    token embedding's with tied embeddings (no head)."""
    w = tensors.get("head.weight")
    return (w if w is not None else tensors["tok_emb.weight"]).shape[0]


def run_count(run_dir):
    """The count for a `qkv train` run directory (config.yaml and last.h5 or best.h5)."""
    import yaml
    sys.path[:0] = [os.path.join(REPO, "scripts", "pytorch"), os.path.join(REPO, "scripts")]
    import qkv_torch
    with open(os.path.join(run_dir, "config.yaml")) as f:
        cfg = yaml.safe_load(f)
    ckpt = next((os.path.join(run_dir, n) for n in ("last.h5", "best.h5") if os.path.exists(os.path.join(run_dir, n))),
                None)
    if ckpt is None:
        sys.exit(f"mfu flops: no last.h5 or best.h5 in {run_dir}")
    return config_count(cfg, output_classes(qkv_torch.read_checkpoint(ckpt).tensors))


def print_count(c, what):
    print(f"{what}: N = {c['N']:.0f} weights in products; per token 6 N = {c['parameters'] / 1e6:.3f} M, "
          f"attention 12 L H Q T = {c['attention'] / 1e6:.3f} M, total {c['per_token'] / 1e6:.3f} M FLOPs")


def cmd_flops(a):
    if a.workload:
        import bench_vs_torch
        print_count(workload_count(bench_vs_torch.WORKLOADS[a.workload]), a.workload)
        return 0
    c = run_count(a.run_dir)
    if c is None:
        sys.exit("mfu flops: only the encoder and decoder architectures are counted")
    print_count(c, a.run_dir)
    return 0


def cmd_peak(a):
    peaks, label = fma_peaks(a.kernels)
    name, flags = cpu_info()
    print(f"CPU: {name} ({isa(flags)}); bench_kernels fma_peak, {label}")
    for c, p in peaks.items():
        print(f"CPU {c}: {p:.1f} GFLOP/s")
    return 0


def table_rows(report):
    """(workload, threads, qkv tokens/s, twin tokens/s, ratio, range, qkv MFU, twin MFU) from one
    --json of bench_vs_torch.py or bench_lm.py speed."""
    out = []
    for r in report.get("rows", []):
        name = r.get("workload") or report.get("workload", "language model")
        rounds = r.get("ratio_range") or ""
        if not rounds and r.get("qkv_rounds") and r.get("torch_rounds"):
            ratios = [q / t for q, t in zip(r["qkv_rounds"], r["torch_rounds"])]
            rounds = f"{min(ratios):.2f}-{max(ratios):.2f}"
        out.append((name, r["threads"], r["qkv_tokens_per_s"], r["torch_tokens_per_s"], r["ratio"], rounds,
                    r.get("qkv_mfu"), r.get("torch_mfu")))
    return out


def cmd_table(a):
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    print("| workload | threads | qkv MFU | PyTorch MFU | qkv tokens/s | PyTorch tokens/s | qkv / PyTorch | "
          "per-round range | targets (MFU, ratio) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in a.results:
        with open(path) as f:
            report = json.load(f)
        for name, n, q, t, ratio, rounds, qm, tm in table_rows(report):
            ratio_target = RATIO_TARGETS.get(name, (None, None))[min(n, 2) - 1]
            mfu_target = MFU_TARGETS.get(min(n, 2)) if name in MFU_WORKLOADS else None
            target = ", ".join(x for x in ((f">= {100 * mfu_target:.0f}%" if mfu_target else ""),
                                            (f">= {ratio_target}" if ratio_target else "")) if x) or "-"
            print(f"| {name} | {n} | {pct(qm)} | {pct(tm)} | {q:.0f} | {t:.0f} | {ratio:.2f} | {rounds} | {target} |")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("flops", help="FLOPs per token of a run or workload")
    p.add_argument("run_dir", nargs="?", help="a qkv train run directory")
    p.add_argument("--workload", choices=["small", "medium", "long"])
    p.set_defaults(run=cmd_flops)
    p = sub.add_parser("peak", help="the FMA peak of each CPU")
    p.add_argument("--kernels", default=DEFAULT_KERNELS)
    p.set_defaults(run=cmd_peak)
    p = sub.add_parser("table", help="one table from the comparisons' --json outputs")
    p.add_argument("results", nargs="+")
    p.set_defaults(run=cmd_table)
    a = ap.parse_args(argv)
    if a.command == "flops" and not (a.run_dir or a.workload):
        ap.error("flops: give a run directory or --workload")
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
