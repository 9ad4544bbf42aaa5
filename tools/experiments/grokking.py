#!/usr/bin/python3
"""The grokking report (experiments/grokking/README.md): training and validation accuracy against
the step for each weight decay, and per run the step at which each first reaches 99%.

    grokking.py RUNS.csv SWEEP_DIR --out grokking.png [--steps STEPS.csv] > results.md

RUNS.csv is score.py's table of the sweep (test accuracy at the best checkpoint by validation;
with --columns task.vocab the title names the modulus);
each run's curves come from SWEEP_DIR/runs/<run>/metrics.csv (train_token_acc: the training pairs,
eval_token_acc: the validation pairs). Faint lines: one run; bold: the median over the seeds (a
run that stopped at the target holds its last value). A run that never reaches 99% validation
accuracy counts as censored at its last step (Kaplan-Meier median, stats.censored_median).
--steps STEPS.csv: the per-run steps read from the curves (the first step at 99% train and at 99%
validation accuracy, the last step, the evaluation interval) are written there; when SWEEP_DIR is
not there (a checkout with the committed CSVs only) they are read from it instead and the figure
is left as it is. Success is counted three ways, since stopping at 99% validation accuracy is not
the same rule as passing 99% on test: validation >= 99% (the stopping rule), test >= 99% and
test >= 95%.
"""
import argparse
import collections
import csv
import os
import statistics
import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments import report, stats  # noqa: E402

TARGET = 0.99
KEY = "optimizer.weight_decay"


def first_at(steps, values, target=TARGET):
    """The first step whose value is >= target, or None."""
    return next((s for s, v in zip(steps, values) if v >= target), None)


def read_curves(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    steps = [int(float(r["step"])) for r in rows]
    return steps, [float(r["train_token_acc"]) for r in rows], [float(r["eval_token_acc"]) for r in rows]


def fmt_step(s):
    return "never" if s is None else str(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs_csv", type=Path)
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="the figure (PNG)")
    ap.add_argument("--steps", type=Path, help="per-run steps: written from the curves, or read when SWEEP_DIR is absent")
    a = ap.parse_args()

    from_curves = a.sweep.is_dir() or not a.steps
    saved = {}
    if not from_curves:
        if not a.steps.exists():
            sys.exit(f"grokking.py: neither {a.sweep} nor {a.steps} found")
        saved = {r["run"]: r for r in csv.DictReader(open(a.steps, newline=""))}
        print(f"grokking.py: {a.sweep} not found: steps from {a.steps}, {a.out} kept", file=sys.stderr)
    by = collections.defaultdict(list)  # weight decay -> [(row, first train >= 99%, first val >= 99%, last step, curves)]
    every = set()
    for r in csv.DictReader(open(a.runs_csv, newline="")):
        if r["status"] not in ("steps", "target", "diverged"):
            continue
        if from_curves:
            path = a.sweep / "runs" / r["run"] / "metrics.csv"
            if not path.exists():
                sys.exit(f"grokking.py: {path} not found (run {r['run']} of {a.runs_csv})")
            steps, train, val = read_curves(path)
            every |= {s1 - s0 for s0, s1 in zip(steps, steps[1:])}
            by[float(r[KEY])].append((r, first_at(steps, train), first_at(steps, val), steps[-1], (steps, train, val)))
        else:
            if r["run"] not in saved:
                sys.exit(f"grokking.py: run {r['run']} of {a.runs_csv} is not in {a.steps}")
            t = saved[r["run"]]
            step = lambda v: None if v in ("", "never") else int(v)  # noqa: E731
            every |= {int(v) for v in t["eval_every"].split("/") if v}
            by[float(r[KEY])].append((r, step(t["train_99_step"]), step(t["val_99_step"]), int(t["last_step"]), None))
    if not by:
        sys.exit(f"grokking.py: no finished runs in {a.runs_csv}")
    decays = sorted(by, reverse=True)

    if from_curves:
        fig, axes = plt.subplots(1, len(decays), figsize=(5.4 * len(decays), 3.8), sharey=True, squeeze=False)
        for ax, wd in zip(axes[0], decays):
            runs = by[wd]
            for col, (name, colour) in enumerate([("training pairs", "C0"), ("validation pairs", "C3")]):
                report.plot_runs(ax, [(r["status"], c[0], c[1] if col == 0 else c[2]) for r, _, _, _, c in runs],
                                 colour, f"{name}, median of {len(runs)}")
            ax.axhline(TARGET, color="0.6", lw=0.6, ls=":")
            ax.set_title(f"weight decay {wd:g}")
            ax.set_xlabel("training step")
            ax.set_ylim(0, 1.02)
            ax.legend(loc="lower right", frameon=False)
        axes[0][0].set_ylabel("token accuracy (fraction)")
        fig.tight_layout()
        fig.savefig(a.out, dpi=120)
        if a.steps:
            with open(a.steps, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["run", KEY, "seed", "train_99_step", "val_99_step", "last_step", "eval_every"])
                for wd in decays:
                    for r, tt, tv, last, _ in by[wd]:
                        w.writerow([r["run"], r[KEY], r["seed"], fmt_step(tt), fmt_step(tv), last,
                                    "/".join(map(str, sorted(every)))])

    cpus = sorted({f"{r.get('cpu', '?')} ({r.get('blas', '?')})" for runs in by.values() for r, *_ in runs})
    moduli = sorted({r.get("task.vocab", "p") for runs in by.values() for r, *_ in runs})
    every = sorted(every)
    print(f"# Grokking: (a + b) mod {', '.join(moduli)}, test split\n")
    print(f"CPU kind and BLAS kernel of the runs: {'; '.join(cpus)}.\n")
    print("| weight decay | runs | validation >= 99% (Wilson 95%) | median step, train >= 99% | "
          "median step, validation >= 99% (censored) | test accuracy, median [min, max] | test >= 99% | test >= 95% |")
    print("|---|---|---|---|---|---|---|---|")
    per_run, outcome = [], {}
    for wd in decays:
        runs = by[wd]
        t_train, t_val, reached, test = [], [], [], []
        for r, tt, tv, last, _ in runs:
            t_train.append(tt)
            t_val.append(tv if tv is not None else last)
            reached.append(tv is not None)
            test.append(float(r["test_token_acc"]))
            per_run.append((wd, int(r["seed"]), tt, tv, None if tt is None or tv is None else tv - tt,
                            last, float(r["test_token_acc"])))
        k, n = sum(reached), len(runs)
        outcome[wd] = (k, n)
        w = stats.wilson(k, n)
        on_test = [stats.wilson(sum(v >= x for v in test), n) for x in (0.99, 0.95)]
        known = [t for t in t_train if t is not None]
        med_train = f"{statistics.median(known):g}" if len(known) == n else f"{statistics.median(known):g} ({len(known)} runs)" if known else "never"
        m = stats.censored_median(t_val, reached)
        med_val = f"{m.value:g}" if m.reached else f"> {m.value:g}"
        print(f"| {wd:g} | {n} | {k}/{n} [{w.low:.2f}, {w.high:.2f}] | {med_train} | {med_val} | "
              f"{100 * statistics.median(test):.1f}% [{100 * min(test):.1f}, {100 * max(test):.1f}] | "
              + " | ".join(f"{t.k}/{t.n} [{t.low:.2f}, {t.high:.2f}]" for t in on_test) + " |")
    print("\nValidation >= 99% is the stopping rule (a run stops at its first evaluation there), so it is met by "
          "construction at the best checkpoint of every run that stopped; the test columns are the same runs judged on "
          "pairs that neither stopped nor chose anything.")
    if len(decays) == 2:  # the one comparison the experiment makes
        (k1, n1), (k0, n0) = outcome[decays[0]], outcome[decays[1]]
        t = stats.fisher_exact(k1, n1 - k1, k0, n0 - k0)
        print(f"\nValidation >= 99%, weight decay {decays[0]:g} against {decays[1]:g}: {k1}/{n1} against "
              f"{k0}/{n0}, Fisher's exact test two-sided p = {t.p:.2g} (1 comparison).")
    print("\nPer run (steps at which the accuracy on the training and on the validation pairs first "
          "reached 99%, "
          f"evaluated every {'/'.join(map(str, every)) or '?'} steps; the delay is their difference):\n")
    print("| weight decay | seed | train >= 99% | validation >= 99% | delay | steps run | test accuracy |")
    print("|---|---|---|---|---|---|---|")
    for wd, seed, tt, tv, d, last, acc in sorted(per_run, key=lambda t: (-t[0], t[1])):
        print(f"| {wd:g} | {seed} | {fmt_step(tt)} | {fmt_step(tv)} | {'-' if d is None else d} | {last} | {100 * acc:.2f}% |")
    print(f"\n![training and validation accuracy against the step]({a.out.name})")


if __name__ == "__main__":
    main()
