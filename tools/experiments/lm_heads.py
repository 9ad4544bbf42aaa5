#!/usr/bin/python3
"""Heads, or the key size, at fixed width on a character LM: the report of experiments/lm_heads/
(--key model.heads, the default), experiments/lm_dk/ (--key model.head_dim, d_v fixed) and
experiments/lm_heads_zh/ and experiments/lm_dk_zh/ (--name lm_heads_zh, lm_dk_zh: the Chinese masked LM,
scored on its masked characters).

    lm_heads.py RUNS.csv SWEEP_DIR... --out DIR [--key model.heads | model.head_dim] [--name NAME]

RUNS.csv is score.py's (--checkpoint last.h5 --columns KEY): test bits per char of every
run at the end of its budget (a masked model's: its masked loss in nats / ln 2, bits per masked
character). SWEEP_DIRs hold the runs' metrics.csv, for the plateau check (plateau.py: over the last
quarter of the schedule's stable phase the validation loss gains less than 1% and ends at most
0.5% above its best so far; the cool-down's gain apart. The first reports of lm_heads and lm_dk used
"less than 2% gain over the last quarter of the budget", which counted a rising loss as a plateau
and the cosine cool-down as progress). Prints the table and the tests stated in the README before
the runs; writes DIR/bits.png.
"""
import argparse
import csv
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments import plateau  # noqa: E402
from experiments import stats  # noqa: E402

MASKED = {"lm_heads_zh", "lm_dk_zh"}  # the experiments on the masked LM: bits per masked character


def bits(row):
    """Test bits per char: the column of a causal LM, or a masked LM's masked loss (nats) / ln 2."""
    if row.get("test_bits_per_char") not in (None, ""):
        return float(row["test_bits_per_char"])
    return float(row["test_loss"]) / math.log(2)


def fmt(est):
    m, lo, hi = est[:3]
    return f"{m:.3f}" if math.isnan(lo) else f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--key", default="model.heads", choices=["model.heads", "model.head_dim"])
    ap.add_argument("--name", help="the experiment (default: lm_heads for model.heads, lm_dk for model.head_dim)")
    a = ap.parse_args()
    key = a.key
    heads = key == "model.heads"
    name, sym = ("lm_heads", "h") if heads else ("lm_dk", "d_k")
    name = a.name or name
    masked = name in MASKED
    unit = "bits/masked char" if masked else "bits/char"
    rows = [r for r in csv.DictReader(open(a.runs, newline=""))
            if r.get("test_bits_per_char") not in (None, "") or (masked and r.get("test_loss") not in (None, ""))]
    run_dirs = {}
    for d in a.sweeps:
        for r in csv.DictReader(open(Path(d) / "results.csv", newline="")):
            run_dirs[(r["run"], r[key])] = Path(d) / "runs" / r["run"]
    hs = sorted({int(r[key]) for r in rows})
    by_h = {h: [r for r in rows if int(r[key]) == h] for h in hs}
    cpus = sorted({r.get("cpu", "") for r in rows} - {""})
    print(f"{len(rows)} runs; CPU: {', '.join(cpus) or 'unknown'}; every number on the test split, at the last step.\n")
    size = "d_k = d_v" if heads else "h, d_v"
    print(f"| {sym} | {size} | lr | test {unit}, mean [t 95%] | n | runs on their plateau (plateau.py) |")
    print("|---|---|---|---|---|---|")
    means = {}
    for h in hs:
        v = [bits(r) for r in by_h[h]]
        means[h] = sum(v) / len(v)
        verdicts = [plateau.check(run_dirs[(r["run"], r[key])])["verdict"] for r in by_h[h] if (r["run"], r[key]) in run_dirs]
        flat = sum(x == "plateau" for x in verdicts)
        print(f"| {h} | {64 // h if heads else '4, 16'} | {by_h[h][0]['lr']} | {fmt(stats.t_interval(v))} | {len(v)} | {flat}/{len(verdicts)} |")
    best = min(means, key=means.get)
    print(f"\nBest mean: {sym} = {best}. Tests stated before the runs (experiments/{name}/README.md):\n")
    # T1: each h against the best one, Holm-corrected permutation tests on the difference of means.
    tests = []
    for h in hs:
        if h == best:
            continue
        x = [bits(r) for r in by_h[h]]
        y = [bits(r) for r in by_h[best]]
        p = stats.permutation_test(x, y)[1] if len(x) > 1 and len(y) > 1 else math.nan
        tests.append((h, stats.welch_interval(x, y), p))
    adjusted = stats.holm([p for _, _, p in tests]) if tests else []
    for (h, diff, p), q in zip(tests, adjusted):
        print(f"- {sym} = {h} vs {sym} = {best}: {diff.value:+.3f} {unit} [Welch 95% {diff.low:+.3f}, {diff.high:+.3f}], "
              f"permutation p = {p:.4f}, Holm-adjusted {q:.4f}")
    if heads:  # T2: more heads beyond 8 add noise: a rising trend of bits/char over h in {8, 16, 32}.
        x = [int(r[key]) for r in rows if int(r[key]) >= 8]
        y = [bits(r) for r in rows if int(r[key]) >= 8]
        if len(set(x)) > 1:
            rho, p = stats.spearman_test(x, y, alternative="greater")
            print(f"- Trend over h = 8, 16, 32 (more heads, more {unit}): Spearman rho = {rho:.3f}, one-sided permutation p = {p:.4f}")
    else:  # T1 of lm_dk: reducing d_k hurts: a falling trend of bits/char over d_k.
        x = [int(r[key]) for r in rows]
        y = [bits(r) for r in rows]
        if len(set(x)) > 1:
            rho, p = stats.spearman_test(x, y, alternative="less")
            print(f"- Trend over d_k (a larger d_k, fewer {unit}): Spearman rho = {rho:.3f}, one-sided permutation p = {p:.4f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for h in hs:
            v = [bits(r) for r in by_h[h]]
            ax.scatter([h] * len(v), v, s=12, color="grey")
        ax.plot(hs, [means[h] for h in hs], marker="o", color="black")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("heads (width 64, d_k = d_v = 64 / h)" if heads else "d_k (width 64, 4 heads, d_v = 16)")
        ax.set_ylabel("test bits per masked char (last step)" if masked else "test bits per char (last step)")
        what = "Heads at fixed width" if heads else "Key size at fixed width and d_v"
        ax.set_title(f"{what}, masked char LM on fortunes-zh" if masked else f"{what}, char LM on fortunes")
        fig.tight_layout()
        fig.savefig(Path(a.out) / "bits.png", dpi=100)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
