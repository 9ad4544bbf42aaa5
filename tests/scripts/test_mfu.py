#!/usr/bin/python3
"""tools/mfu.py: PaLM's FLOP count for the models qkv trains, the FMA peak of the CPUs a process
ran on, and the table the comparisons' JSON outputs make. (The measurements themselves need
bench_kernels and PyTorch: docs/performance.md has them.)"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import mfu  # noqa: E402

failures = []


def check(what, got, expected):
    if got != expected:
        failures.append(f"{what}: got {got!r}, expected {expected!r}")


# bench_train's count (bench/bench_train.cpp: 3 (L (2 (4 C^2 + 2 C F) + 4 T C) + 2 C V)) is PaLM's
# for the encoder workloads: 6 N with N = L (4 C^2 + 2 C F) + C V, plus 12 L H Q T with H Q = C.
for name, (V, T, C, H, L, F, _) in {"small": (16, 32, 64, 4, 2, 256, 64), "medium": (64, 128, 256, 8, 4, 1024, 32),
                                    "long": (16, 1024, 128, 4, 1, 512, 4)}.items():
    bench_train = 3.0 * (L * (2.0 * (4 * C * C + 2 * C * F) + 4.0 * T * C) + 2.0 * C * V)
    c = mfu.workload_count((V, T, C, H, L, F, 0))
    check(f"{name}: PaLM's count is bench_train's", c["per_token"], bench_train)
    check(f"{name}: N", c["N"], L * (4 * C * C + 2 * C * F) + C * V)
check("medium: 20.55 M FLOPs per token", round(mfu.workload_count((64, 128, 256, 8, 4, 1024, 32))["per_token"] / 1e6, 2),
      20.55)

# A decoder language model: the output layer counts once, tied to the embedding or not; the
# embedding's lookup and the positions do not.
cfg = {"model": {"arch": "decoder", "d_model": 192, "heads": 4, "layers": 3, "d_ff": 768, "positional": "learned"},
       "task": {"name": "text", "length": 128}}
untied = mfu.config_count(cfg, 100)
tied = mfu.config_count({**cfg, "model": {**cfg["model"], "tie_embeddings": True}}, 100)
check("tied and untied embeddings: the same count", tied, untied)
check("fortunes-sized decoder: N", untied["N"], 3 * (4 * 192 * 192 + 2 * 192 * 768) + 192 * 100)
check("attention: 12 L H Q T, all T keys (PaLM's count, causal or not)", untied["attention"], 12.0 * 3 * 4 * 48 * 128)

# A masked language model: the output layer at the scored positions only, round(0.15 T) of T.
masked = {"model": {**cfg["model"], "arch": "encoder"},
          "task": {"name": "text", "length": 128, "objective": "masked", "mask_rate": 0.15}}
check("masked: 19 of 128 positions scored", mfu.scored_share(masked["task"]), 19 / 128)
check("masked: the output layer at 19/128 of the positions", mfu.config_count(masked, 100)["N"],
      3 * (4 * 192 * 192 + 2 * 192 * 768) + 192 * 100 * 19 / 128)
check("causal text: every position scored", mfu.scored_share(cfg["task"]), 1.0)
check("masked: at least one position", mfu.scored_share({"length": 4, "objective": "masked", "mask_rate": 0.01}), 0.25)

# Head widths other than C / H, and blocks without feed-forward.
wide = mfu.config_count({**cfg, "model": {**cfg["model"], "head_dim": 16, "value_dim": 32}}, 100)
check("head_dim 16, value_dim 32: projections", wide["N"],
      3 * (192 * 64 * 2 + 192 * 128 + 128 * 192 + 2 * 192 * 768) + 192 * 100)
check("head_dim 16, value_dim 32: attention", wide["attention"], 6.0 * 3 * 128 * 4 * (16 + 32))
check("attn_only: no feed-forward", mfu.config_count({**cfg, "model": {**cfg["model"], "attn_only": True}}, 100)["N"],
      3 * 4 * 192 * 192 + 192 * 100)
check("seq2seq: not counted", mfu.config_count({**cfg, "model": {**cfg["model"], "arch": "encoder_decoder"}}, 100), None)

# The peak a process is measured against: the CPUs it ran on (the first n, or all of them).
peaks = {0: 240.0, 1: 220.0}
check("1 thread: CPU 0's peak", mfu.peak_for(peaks, 1, {0, 1}), 240.0)
check("2 threads: both CPUs", mfu.peak_for(peaks, 2, {0, 1}), 460.0)
check("MFU", round(mfu.mfu(10000, 20e6, 400.0), 6), 0.5)
check("peaks before and after: their mean", mfu.merge_peaks({0: 200.0}, {0: 220.0})[0], {0: 210.0})

with tempfile.TemporaryDirectory() as tmp:
    fake = os.path.join(tmp, "bench_kernels")  # a stand-in: fma_peak's JSON, the pinning checked
    report = {"benchmarks": [{"name": "fma_peak/real_time", "run_type": "iteration", "GFLOP": g, "label": "16 floats"}
                             for g in (230.0, 240.0, 210.0)]
              + [{"name": "fma_peak/real_time_median", "run_type": "aggregate", "GFLOP": 1.0}]}
    with open(fake, "w") as f:
        f.write("#!/usr/bin/python3\nimport json, os, sys\n"
                "assert '--benchmark_filter=^fma_peak' in sys.argv and os.environ['QKV_BENCH_THREADS'] == '1'\n"
                "assert len(os.sched_getaffinity(0)) == 1\n"
                f"print(json.dumps({report!r}))\n")
    os.chmod(fake, 0o755)
    cpu = sorted(os.sched_getaffinity(0))[0]
    check("fma_peak: the median of the runs, pinned to one CPU", mfu.fma_peak(fake, cpu), (230.0, "16 floats"))
    check("no bench_kernels: no peaks", mfu.measure_peaks(os.path.join(tmp, "missing"), "test"), None)

    # The table from a bench_lm.py speed --json.
    lm = {"workload": "fortunes", "rows": [{"threads": 1, "qkv_tokens_per_s": 15000.0, "torch_tokens_per_s": 10000.0,
                                            "ratio": 1.5, "ratio_range": "1.40-1.60", "qkv_mfu": 0.61, "torch_mfu": 0.41}]}
    path = os.path.join(tmp, "lm.json")
    with open(path, "w") as f:
        json.dump(lm, f)
    check("table rows", mfu.table_rows(lm), [("fortunes", 1, 15000.0, 10000.0, 1.5, "1.40-1.60", 0.61, 0.41)])
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        mfu.main(["table", path])
    check("table: the row with its targets", out.getvalue().splitlines()[-1],
          "| fortunes | 1 | 61% | 41% | 15000 | 10000 | 1.50 | 1.40-1.60 | >= 75%, >= 1.4 |")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("mfu: all checks passed")
