#!/usr/bin/python3
"""Train the same encoder model in qkv and in PyTorch, one after the other, and compare tokens/s.

    /usr/bin/python3 tools/bench_vs_torch.py [--bench build-bench/bench/bench_train] \
        [--workloads small,medium,long] [--threads 1,2] [--runs 5] [--steps 20] [--warmup 5] \
        [--malloc reuse|default] [--json out.json]

For every workload and thread count it runs `runs` rounds; a round is one qkv process then one
PyTorch process (interleaved, so that load from other jobs on the machine hits both alike). Each
process does `warmup` untimed steps then `steps` timed steps and reports tokens/s and its peak RSS
(ru_maxrss). The table shows medians over the rounds, the median of the per-round ratios and their range.

The model (qkv's nn::EncoderModel, mirrored here): token embedding N(0, 1) not scaled, plus
sinusoidal positions, dropout; pre-LN encoder layers (torch.nn.TransformerEncoderLayer with
norm_first=True, batch_first=True, GELU, dropout on attention weights, residual branches and the
feed-forward hidden layer); final LayerNorm; Linear head. Init as qkv: nn.Linear defaults, each of
the q/k/v projections Xavier-uniform on its own (C, C) block, zero attention biases. Task: sort
(per-position labels: the sorted input). Step: batch, forward, cross-entropy, backward,
clip_grad_norm_(1.0), AdamW(lr 1e-3, weight decay 0.01), zero_grad.

PyTorch runs with its best settings here: torch.set_num_threads(n), OMP_WAIT_POLICY=passive (what
qkv does by default; see kernels/parallel.hpp), OPENBLAS_NUM_THREADS=n, OPENBLAS_CORETYPE chosen as
qkv chooses its own (tools/machine.py blas_coretype: QKV_BLAS_CORETYPE if set, else from the CPU
features, SkylakeX with AVX-512, Haswell with AVX2 + FMA, an inherited OPENBLAS_CORETYPE kept only if
of the same level) for the OpenBLAS it calls (Debian's torch uses the system libblas), and, with
--malloc reuse (the default), glibc malloc set to keep and reuse freed memory (machine.MALLOC_TUNABLES:
PyTorch allocates every activation with malloc, and where page faults are slow, 14 us each on the
2026-12-04 machine, returning memory to the kernel costs it 1.4-6x). Both processes get the same
environment and the same CPUs: a process with fewer threads than the machine has CPUs is pinned to
the first ones (machine.pinned_cpus: the vCPUs of a VM need not run at the same speed), one with as
many is not pinned. The table's header names the CPU, its ISA, both processes' OpenBLAS kernels, the
malloc setting, the measured cost of a page fault, the CPUs of each thread count and the machine's
parallel capacity before and after the rounds (machine.parallel_capacity: how many CPUs' worth of
single-threaded sgemm work all CPUs do at once, with a warning when it is under 0.8 of their number,
where rows at more than one thread say nothing about either framework's scaling).

MFU (tools/mfu.py: PaLM's FLOP count, 6 N + 12 L H Q T per token, over the FMA peak of the CPUs
each process ran on) is printed per row when bench_kernels is at hand (--kernels): its fma_peak runs
pinned to each CPU before and after the rounds, and the mean of the two is the peak.
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402
import mfu  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BENCH = next((p for p in (os.path.join(REPO, d, "bench", "bench_train") for d in ("build-bench", "build"))
                      if os.path.exists(p)), os.path.join(REPO, "build-bench", "bench", "bench_train"))

# name: (vocab, seq, d_model, heads, layers, d_ff, batch); same table as bench/bench_train.cpp.
WORKLOADS = {
    "small": (16, 32, 64, 4, 2, 256, 64),
    "medium": (64, 128, 256, 8, 4, 1024, 32),
    "long": (16, 1024, 128, 4, 1, 512, 4),
}


def make_torch_model(V, C, H, L, FF, p, max_len, num_classes=None, activation="gelu", norm_first=True,
                     learned_positions=False):
    """qkv's nn::EncoderModel in PyTorch. Parameter names map one to one onto qkv's (see
    tools/bench_parity.py); q/k/v are the three (C, C) blocks of blocks.<i>.self_attn.in_proj_weight."""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(V, C)  # N(0, 1), not scaled
            if learned_positions:
                self.pos = nn.Parameter(torch.randn(max_len, C) * 0.02)
            else:
                t = torch.arange(max_len, dtype=torch.float64)[:, None]
                j = torch.arange(C)
                angle = t * torch.pow(10000.0, -(j - j % 2).double() / C)[None, :]
                self.register_buffer("pe", torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle)).float())
            self.drop = nn.Dropout(p)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(C, H, FF, p, activation=activation, batch_first=True,
                                           norm_first=norm_first) for _ in range(L))
            for blk in self.blocks:
                with torch.no_grad():
                    for k in range(3):
                        nn.init.xavier_uniform_(blk.self_attn.in_proj_weight[k * C:(k + 1) * C])
            self.norm = nn.LayerNorm(C) if norm_first else None
            self.head = nn.Linear(C, num_classes or V)

        def forward(self, x):
            pos = self.pos if learned_positions else self.pe
            h = self.drop(self.tok_emb(x) + pos[: x.shape[1]])
            for blk in self.blocks:
                h = blk(h)
            return self.head(self.norm(h) if self.norm is not None else h)

    return Model()


def torch_worker(args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    baseline_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    V, T, C, H, L, FF, B = WORKLOADS[args.workload]
    p = args.dropout
    torch.manual_seed(args.seed)

    model = make_torch_model(V, C, H, L, FF, p, T)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    params = list(model.parameters())
    loss_value = [0.0]

    def step():
        x = torch.randint(V, (B, T))
        y = torch.sort(x, dim=1).values
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss_value[0] = loss.item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    secs = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    try:  # the OpenBLAS torch calls through libblas.so.3, and the kernel it runs
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        blas = f"OpenBLAS, kernel {lib.openblas_get_corename().decode()}"
    except (OSError, AttributeError):
        blas = "not OpenBLAS"
    print(json.dumps({"framework": "torch", "blas": blas, "workload": args.workload, "threads": args.threads,
                      "steps": args.steps, "warmup": args.warmup,
                      "tokens_per_s": args.steps * B * T / secs, "step_ms": 1e3 * secs / args.steps,
                      "max_rss_mib": rss, "baseline_rss_mib": baseline_rss, "final_loss": loss_value[0],
                      "params": sum(q.numel() for q in params), "torch": torch.__version__,
                      "aten_cpu": machine.torch_cpu_capability(torch.__config__.show())}))


def run_json(cmd, env, cpus=None):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=machine.pin_to(cpus))
    if r.returncode != 0:
        sys.exit(f"bench_vs_torch: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=DEFAULT_BENCH,
                    help="the bench_train binary (default: make bench's build-bench/bench/bench_train, else build/bench/)")
    ap.add_argument("--workloads", default="small,medium,long")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=0, help="timed steps per process (0: per-workload default: small 200, medium 8, long 40)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--malloc", choices=["reuse", "default"], default="reuse",
                    help="glibc malloc of both processes: reuse freed memory (default) or glibc's defaults")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="also write every measurement here")
    ap.add_argument("--kernels", default=mfu.DEFAULT_KERNELS,
                    help="bench_kernels, for the FMA peak of MFU (default: make bench's); without it no MFU")
    ap.add_argument("--only", choices=["qkv", "torch"], default=None, help="run one side only")
    ap.add_argument("--worker", choices=["torch"], help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--threads-n", type=int, dest="threads_n", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        args.threads = args.threads_n
        return torch_worker(args)

    if machine.report_missing(machine.torch_missing("bench_vs_torch") if args.only != "qkv" else None,
                              machine.executable_missing("bench_vs_torch", args.bench, "the benchmark binary",
                                                         "make bench (or pass --bench)") if args.only != "torch" else None):
        return 2

    cpu, flags = machine.cpu_info()
    core, core_source = machine.blas_coretype(flags)
    fault_us = machine.page_fault_us()
    capacity = {"before": machine.parallel_capacity(core)}
    peaks_before = mfu.measure_peaks(args.kernels, "bench_vs_torch")
    # Timed steps: at least about 2 s of qkv's time per process at 1 thread (a window under a
    # second, as 40 small or 8 long steps were, spread qkv's small rounds over 110k-142k tokens/s).
    default_steps = {"small": 200, "medium": 8, "long": 40}
    rows, records = [], []
    for wl in args.workloads.split(","):
        for n in [int(x) for x in args.threads.split(",")]:
            steps = args.steps or default_steps[wl]
            q_env = machine.comparison_env(core, args.malloc)
            t_env = machine.comparison_env(core, args.malloc, threads=n)
            cpus = machine.pinned_cpus(n)
            common = ["--workload", wl, "--steps", str(steps), "--warmup", str(args.warmup),
                      "--dropout", str(args.dropout), "--seed", str(args.seed)]
            q_runs, t_runs = [], []
            for _ in range(args.runs):
                if args.only != "torch":
                    q_runs.append(run_json([args.bench, "--threads", str(n)] + common, q_env, cpus))
                if args.only != "qkv":
                    t_runs.append(run_json([sys.executable, os.path.abspath(__file__), "--worker", "torch",
                                            "--threads-n", str(n)] + common, t_env, cpus))
                last = (q_runs[-1:] + t_runs[-1:])
                print("  " + "  ".join(f"{r['framework']} {r['tokens_per_s']:.0f}" for r in last),
                      file=sys.stderr, flush=True)
            records += q_runs + t_runs
            med = lambda rs, k: statistics.median(r[k] for r in rs) if rs else math.nan
            ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(q_runs, t_runs)]
            lo_hi = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else ""
            row = {"workload": wl, "threads": n, "qkv_tokens_per_s": med(q_runs, "tokens_per_s"),
                   "torch_tokens_per_s": med(t_runs, "tokens_per_s"),
                   "ratio": statistics.median(ratios) if ratios else math.nan, "ratio_range": lo_hi,
                   "qkv_rss_mib": med(q_runs, "max_rss_mib"), "torch_rss_mib": med(t_runs, "max_rss_mib"),
                   "torch_baseline_rss_mib": med(t_runs, "baseline_rss_mib"),
                   "qkv_pool_peak_mib": med(q_runs, "pool_peak_mib"),
                   "qkv_model_gflops": med(q_runs, "model_gflops"),
                   "qkv_new_per_step": med(q_runs, "operator_new_per_step"),
                   "qkv_pool_sys_per_step": med(q_runs, "pool_system_allocs_per_step")}
            rows.append(row)
            print(f"{wl:>6} x{n}: qkv {row['qkv_tokens_per_s']:9.0f} tok/s  torch {row['torch_tokens_per_s']:9.0f} "
                  f"tok/s  ratio {row['ratio']:.2f}  RSS qkv {row['qkv_rss_mib']:.0f} MiB, torch "
                  f"{row['torch_rss_mib']:.0f} MiB (after import {row['torch_baseline_rss_mib']:.0f})",
                  file=sys.stderr, flush=True)

    capacity["after"] = machine.parallel_capacity(core)
    peaks_after = mfu.measure_peaks(args.kernels, "bench_vs_torch") if peaks_before else None
    peaks = mfu.merge_peaks(peaks_before[0], peaks_after[0])[0] if peaks_before and peaks_after else None
    for r in rows:
        flops = mfu.workload_count(WORKLOADS[r["workload"]])["per_token"]
        r["flops_per_token"] = flops
        if peaks:
            r["peak_gflops"] = mfu.peak_for(peaks, r["threads"])
            r["qkv_mfu"] = mfu.mfu(r["qkv_tokens_per_s"], flops, r["peak_gflops"])
            r["torch_mfu"] = mfu.mfu(r["torch_tokens_per_s"], flops, r["peak_gflops"])
    reported = lambda fw, key: next((r[key] for r in records if r["framework"] == fw and key in r), "not run")
    kernel = lambda fw: reported(fw, "blas")
    print(f"CPU: {cpu} ({machine.isa(flags)}), {os.cpu_count()} cores; OPENBLAS_CORETYPE for both: "
          f"{core or 'unset'} ({core_source})")
    print(f"qkv BLAS: {kernel('qkv')}")
    print(f"PyTorch BLAS: {kernel('torch')}; ATen's own CPU kernels: {reported('torch', 'aten_cpu')} (ATEN_CPU_CAPABILITY="
          f"{os.environ.get('ATEN_CPU_CAPABILITY', 'unset')})")
    mismatch = machine.kernel_mismatch(kernel("qkv"), kernel("torch"))
    if mismatch:
        print(mismatch)
    print(f"malloc: {args.malloc}" + (f" (GLIBC_TUNABLES={machine.MALLOC_TUNABLES})" if args.malloc == "reuse" else "")
          + f"; a page fault costs {fault_us:.1f} us here")
    print("\n".join(machine.run_conditions(capacity, [int(x) for x in args.threads.split(",")], "the rounds")))
    if peaks:
        print(mfu.peak_line(peaks_before[0], peaks_after[0], peaks_before[1]))
    print("MFU: tokens/s x model FLOPs per token (tools/mfu.py: 6 N + 12 L H Q T) / FMA peak of the CPUs run on\n")
    pct = lambda r, k: f"{100 * r[k]:.0f}%" if k in r else "-"  # noqa: E731
    print("| workload | threads | qkv tokens/s | PyTorch tokens/s | ratio | per-round range | qkv MFU | PyTorch MFU | "
          "qkv peak RSS MiB | PyTorch peak RSS MiB (after import) | qkv new/step | qkv pool misses/step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['threads']} | {r['qkv_tokens_per_s']:.0f} | {r['torch_tokens_per_s']:.0f} | "
              f"{r['ratio']:.2f} | {r['ratio_range']} | {pct(r, 'qkv_mfu')} | {pct(r, 'torch_mfu')} | "
              f"{r['qkv_rss_mib']:.0f} | {r['torch_rss_mib']:.0f} "
              f"({r['torch_baseline_rss_mib']:.0f}) | {r['qkv_new_per_step']:.0f} | {r['qkv_pool_sys_per_step']:.1f} |")
    for wl in args.workloads.split(","):
        c = mfu.workload_count(WORKLOADS[wl])
        print(f"model FLOPs per token, {wl}: 6 N = {c['parameters'] / 1e6:.3f} M (N = {c['N']:.0f}) + attention "
              f"{c['attention'] / 1e6:.3f} M = {c['per_token'] / 1e6:.3f} M")
    by = {(r["workload"], r["threads"]): r for r in rows}
    for wl in args.workloads.split(","):
        if (wl, 1) in by and (wl, 2) in by:
            for fw in ("qkv", "torch"):
                a, b = by[(wl, 1)][f"{fw}_tokens_per_s"], by[(wl, 2)][f"{fw}_tokens_per_s"]
                print(f"thread scaling {wl} {fw}: 2 threads / 1 thread = {b / a:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "isa": machine.isa(flags), "openblas_coretype": core, "coretype_source": core_source,
                       "malloc": args.malloc, "page_fault_us": fault_us,
                       "parallel_capacity": capacity, "fma_peaks": [peaks_before, peaks_after],
                       "rows": rows, "records": records}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
