#!/usr/bin/python3
"""The variance of q . k, the quantity the 1/sqrt(d_k) argument is about (experiments/scale/).

    scale.py init-variance --out INIT.csv [--seeds 1,...] [--qkv build/qkv]
    scale.py variance INIT.csv ARM.csv... [--sweeps SWEEPS_DIR --out PNG] [--out-end PNG]
    scale.py exact SCALED.csv EXACT.csv INIT.csv --sweeps SWEEPS_DIR

init-variance: for every d_k in {16, 64, 256, 512}, every seed and every arm (scaled: scale
1/sqrt(d_k), Xavier gain 1 for W_q and W_k; unscaled: scale 1, gain 1; compensated: scale 1, gain
d_k^(-1/4)), one training step of the experiment's
model (configs/experiments/recall.yaml, one head) at lr 1e-12 with an evaluation after it: the
weights are the initial ones to about 1e-12, so the row holds the raw Var(q . k) at
initialisation (train diagnostics, `.qk_var`, mean over the two layers and layer 0 alone, on 64
validation examples).

variance: a markdown table of the softmax's argument variance, scale^2 Var(q . k), per arm and
d_k at initialisation (from INIT.csv; scaled: Var / d_k, unscaled and compensated: Var) and at the end of training (the chosen lr's runs, column attn_qk_var of the
ARM CSVs written by score.py), medians over seeds; --out: a figure of scale^2 Var(q . k) against the
step (metrics.csv of each chosen run in SWEEPS_DIR/<arm>[_dk<d> or _low]/runs/<run>), one faint line per
run and the median bold, one panel per d_k, and a caption naming the arms and d_k whose chosen runs
have no curves there (not drawn without SWEEPS_DIR: an existing figure is then kept); --out-end: a
figure from the CSVs alone, scale^2 Var(q . k) at initialisation and at the end of training against
d_k for every arm (every chosen run a point, medians joined).

exact: the report of the exact reparameterisation control (experiments/scale_exact/README.md) from the
three arms' per-run CSVs (score.py, last checkpoint) and their metrics.csv under
SWEEPS_DIR/<arm>/runs/<run>: per seed, the largest relative difference of the validation loss and
the largest difference of validation token accuracy between the exact and the scaled arm over every
evaluation, each arm's test token accuracy; then solved at test >= 0.99 and >= 0.95 per arm (Wilson
intervals) and the stated Fisher tests.
"""
import argparse
import csv
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments import select as lrsel  # noqa: E402
from experiments import stats  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DKS = (16, 64, 256, 512)
ARMS = ("scaled", "unscaled", "compensated")


def layer_mean(row, column="qk_var"):
    vals = [float(v) for k, v in row.items() if k.endswith("." + column)]
    return sum(vals) / len(vals)


def arm_settings(arm, d):
    """(model.scale, model.qk_init_gain) of an arm at d_k = d."""
    return {"scaled": (0.0, 1.0), "unscaled": (1.0, 1.0), "compensated": (1.0, d ** -0.25)}[arm]


def init_variance(a):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in DKS:
            for arm in ARMS:
                scale, gain = arm_settings(arm, d)
                for seed in a.seeds:
                    out = Path(tmp) / f"d{d}_{arm}_s{seed}"
                    cmd = [a.qkv, "train", str(ROOT / "configs/experiments/recall.yaml"), "--quiet", "--threads", "1",
                           "--set", "model.heads=1", "--set", f"model.head_dim={d}", "--set", f"model.scale={scale!r}",
                           "--set", f"model.qk_init_gain={gain!r}", "--set", "train.steps=1",
                           "--set", "train.eval_every=1", "--set", "schedule.warmup_steps=0",
                           "--set", "optimizer.lr=1e-12", "--set", "schedule.min_lr=0",
                           "--set", f"seed={seed}", "--set", f"run.out={out}"]
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                    if r.returncode != 0:
                        sys.exit(f"scale.py: {' '.join(cmd)} failed: {r.stderr.strip()}")
                    m = next(csv.DictReader(open(out / "metrics.csv")))
                    rows.append({"head_dim": d, "arm": arm, "scale": scale, "qk_init_gain": gain, "seed": seed,
                                 "qk_var": layer_mean(m), "qk_var_layer0": float(m["blocks.0.attn.qk_var"])})
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"scale.py: {len(rows)} rows -> {a.out}", file=sys.stderr)


def scale_sq(arm, d):
    return 1.0 / d if arm == "scaled" else 1.0


def fmt(v):
    return f"{v:.3g}" if math.isfinite(v) else "n/a"


def variance(a):
    init = list(csv.DictReader(open(a.init)))
    chosen = {}
    for path in a.arms:
        rows = [r for r in csv.DictReader(open(path)) if r["status"] in ("steps", "target", "diverged")]
        _, kept = lrsel.select_lr(rows, ["arm", "model.head_dim"], metric="val_token_acc", direction="max")
        for r in kept:
            chosen.setdefault((r["arm"], int(r["model.head_dim"])), []).append(r)
    print("Variance of the softmax's argument, scale^2 Var(q . k), medians over seeds (n per cell); at "
          "initialisation (scale.py init-variance), at the end from the best checkpoint's "
          "last evaluation, for the learning rate chosen on validation:\n")
    print("| d_k | raw Var(q . k) at init, default init | scaled: init / end | unscaled: init / end | "
          "compensated: init / end |")
    print("|---|---|---|---|---|")
    for d in DKS:
        def raw(arm):
            return [float(r["qk_var"]) for r in init if int(r["head_dim"]) == d and r["arm"] == arm]
        if not raw("unscaled"):
            continue
        cells = []
        for arm in ARMS:
            at_init = statistics.median(raw(arm)) * scale_sq(arm, d) if raw(arm) else math.nan
            end = [float(r["attn_qk_var"]) * scale_sq(arm, d) for r in chosen.get((arm, d), [])]
            cells.append(f"{fmt(at_init)} / {fmt(statistics.median(end)) if end else 'n/a'} (n={len(end)})")
        print(f"| {d} | {fmt(statistics.median(raw('unscaled')))} (n={len(raw('unscaled'))}) | " + " | ".join(cells) + " |")
    if a.out_end:
        plot_end(a, init, chosen)
    if a.out is None:
        return
    if a.sweeps is None or not a.sweeps.is_dir():
        print(f"\n{a.out.name} not redrawn: the sweep directories ({a.sweeps}) are not here, and its curves come from "
              "each run's metrics.csv; the existing figure is kept.")
        return
    plot(a, chosen)


def plot_end(a, init, chosen):
    """scale^2 Var(q . k) against d_k, at initialisation (hollow, from INIT.csv) and at the end
    (filled: the chosen lr's runs, attn_qk_var of the ARM CSVs), one colour per arm."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.2, 4.0))
    colours = {"scaled": "tab:blue", "unscaled": "tab:red", "compensated": "tab:green"}
    shift = {"scaled": 0.92, "unscaled": 1.0, "compensated": 1.08}  # arms side by side on the log axis
    for arm in ARMS:
        ends, starts = [], []
        for d in DKS:
            end = [float(r["attn_qk_var"]) * scale_sq(arm, d) for r in chosen.get((arm, d), [])]
            raw = [float(r["qk_var"]) * scale_sq(arm, d) for r in init if int(r["head_dim"]) == d and r["arm"] == arm]
            if end:
                ax.scatter([d * shift[arm]] * len(end), end, s=9, color=colours[arm], alpha=0.35, lw=0)
                ends.append((d * shift[arm], statistics.median(end)))
            if raw:
                starts.append((d * shift[arm], statistics.median(raw)))
        if ends:
            ax.plot(*zip(*ends), color=colours[arm], marker="o", lw=1.6, label=f"{arm}: end of training")
        if starts:
            ax.plot(*zip(*starts), color=colours[arm], marker="o", mfc="white", ls="--", lw=1,
                    label=f"{arm}: initialisation")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(DKS))
    ax.set_xticklabels([str(d) for d in DKS])
    ax.minorticks_off()
    ax.set_xlabel("d_k (log scale)")
    ax.set_ylabel("scale^2 Var(q . k), the softmax's argument")
    ax.set_title(report_wrap("Variance of the attention scores at initialisation and at the end of training, "
                             "every arm and d_k (lr chosen on validation)", 6.2 * 0.85))
    ax.legend(fontsize=6.5, ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(a.out_end, dpi=110)
    print(f"wrote {a.out_end}", file=sys.stderr)
    print(f"\n{a.out_end.name}: scale^2 Var(q . k) against d_k for every arm, from the CSVs alone: hollow points and "
          "dashed lines the median at initialisation (init_variance.csv, one training step at lr 1e-12), small points "
          "each chosen run at the end of training (its best checkpoint's last evaluation, attn_qk_var, mean over the "
          "2 layers) with their median joined; arms drawn side by side at each d_k.")


def report_wrap(text, width_in):
    from experiments import report
    return report.wrap(text, width_in)


def plot(a, chosen):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    missing = []
    dks = [d for d in DKS if any((arm, d) in chosen for arm in ARMS)]
    fig, axes = plt.subplots(1, len(dks), figsize=(4.2 * len(dks), 3.8), squeeze=False)
    colours = {"scaled": "tab:blue", "unscaled": "tab:red", "compensated": "tab:green"}
    words = {"scaled": "scaled", "unscaled": "unscaled", "compensated": "unscaled, init x d_k^(-1/4)"}
    for ax, d in zip(axes[0], dks):
        for arm in ARMS:
            curves = []
            for r in chosen.get((arm, d), []):
                dirs = [f"compensated_dk{d}"] if arm == "compensated" else [arm, f"{arm}_low"]  # *_low: the lr 3e-5 sweep
                path = next((p for p in (a.sweeps / x / "runs" / r["run"] / "metrics.csv" for x in dirs) if p.exists()), None)
                if path is None:  # a run scored in an earlier session: its CSV row, not its curve
                    continue
                metrics = list(csv.DictReader(open(path)))
                x = [int(m["step"]) for m in metrics]
                y = [layer_mean(m) * scale_sq(arm, d) for m in metrics]
                curves.append((x, y))
                ax.plot(x, y, color=colours[arm], alpha=0.2, lw=0.7)
            if chosen.get((arm, d)) and not curves:
                missing.append(f"{arm} at d_k {d}")
            if curves:
                longest = max(curves, key=lambda c: len(c[0]))[0]
                med = [statistics.median(c[1][min(i, len(c[1]) - 1)] for c in curves) for i in range(len(longest))]
                ax.plot(longest, med, color=colours[arm], lw=2, label=f"{words[arm]} (n={len(curves)})")
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel("scale^2 Var(q . k) (softmax argument)")
        ax.set_title(f"d_k = {d}")
        ax.legend(fontsize=7)
    fig.suptitle("Variance of the attention scores the softmax sees, during training (faint: one run; bold: median)")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}", file=sys.stderr)
    print(f"\n{a.out.name}: " + (f"no curves for {', '.join(missing)}: their chosen lr's run directories are not under "
                                 f"{a.sweeps} (runs scored in an earlier session), so only their end values appear "
                                 "(table above)." if missing else "every arm and d_k has its curves."))


def read_rows(path):
    with open(path, newline="") as f:
        return {int(r["seed"]): r for r in csv.DictReader(f)}


def curves(sweeps, arm, run):
    with open(Path(sweeps, arm, "runs", run, "metrics.csv"), newline="") as f:
        return {int(r["step"]): r for r in csv.DictReader(f) if r.get("eval_loss", "") not in ("", "nan")}


def exact(a):
    arms = {"scaled": read_rows(a.scaled), "exact": read_rows(a.exact), "init": read_rows(a.init)}
    seeds = sorted(set.intersection(*(set(r) for r in arms.values())))
    print("| seed | max rel. diff. of val loss, exact vs scaled | max diff. of val token acc | evaluations | "
          "test acc scaled | test acc exact | test acc init |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for s in seeds:
        ref = curves(a.sweeps, "scaled", arms["scaled"][s]["run"])
        got = curves(a.sweeps, "exact", arms["exact"][s]["run"])
        steps = sorted(set(ref) & set(got))
        if len(steps) != len(ref) or len(steps) != len(got):
            sys.exit(f"scale.py exact: seed {s}: the arms were evaluated at different steps")
        rel = max(abs(float(got[t]["eval_loss"]) - float(ref[t]["eval_loss"])) / abs(float(ref[t]["eval_loss"]))
                  for t in steps)
        acc = max(abs(float(got[t]["eval_token_acc"]) - float(ref[t]["eval_token_acc"])) for t in steps)
        worst = max(worst, rel)
        tests = " | ".join(f"{float(arms[k][s]['test_token_acc']):.4f}" for k in ("scaled", "exact", "init"))
        print(f"| {s} | {rel:.2e} | {acc:.4f} | {len(steps)} | {tests} |")
    print(f"\nLargest relative difference of the validation loss over every seed and evaluation: {worst:.2e}.\n")
    print("| arm | solved (test >= 0.99) | solved (test >= 0.95) |")
    print("|---|---|---|")
    solved = {}
    for k, rows in arms.items():
        acc = [float(rows[s]["test_token_acc"]) for s in seeds]
        solved[k] = {t: sum(v >= t for v in acc) for t in (0.99, 0.95)}
        cells = []
        for t in (0.99, 0.95):
            w = stats.wilson(solved[k][t], len(acc))
            cells.append(f"{w.k}/{w.n} [{w.low:.2f}, {w.high:.2f}]")
        print(f"| {k} | {cells[0]} | {cells[1]} |")
    n = len(seeds)
    print("\nStated tests (two-sided Fisher, solved at test >= 0.99, alpha 0.05 each):\n")
    for x, y in (("scaled", "init"), ("exact", "init")):
        f = stats.fisher_exact(solved[x][0.99], n - solved[x][0.99], solved[y][0.99], n - solved[y][0.99])
        print(f"- {x} {solved[x][0.99]}/{n} against {y} {solved[y][0.99]}/{n}: p = {f.p:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init-variance")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=list(range(1, 11)))
    p.add_argument("--qkv", default=str(ROOT / "build" / "qkv"))
    p = sub.add_parser("variance")
    p.add_argument("init", type=Path)
    p.add_argument("arms", type=Path, nargs="+")
    p.add_argument("--sweeps", type=Path, help="the sweeps' parent directory (runs/exp/scale), for the curves")
    p.add_argument("--out", type=Path, help="the figure of the variance during training (needs --sweeps)")
    p.add_argument("--out-end", type=Path, help="the figure of the variance at init and at the end, from the CSVs")
    p = sub.add_parser("exact")
    p.add_argument("scaled", type=Path)
    p.add_argument("exact", type=Path)
    p.add_argument("init", type=Path)
    p.add_argument("--sweeps", type=Path, required=True, help="the sweeps' parent directory (runs/exp/scale_exact)")
    a = ap.parse_args()
    {"init-variance": init_variance, "variance": variance, "exact": exact}[a.cmd](a)


if __name__ == "__main__":
    main()
