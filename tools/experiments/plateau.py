#!/usr/bin/python3
"""Has a run reached its plateau? A criterion that can certify it (experiments/README.md, the
referee's point 1), and the thinned curves that are committed beside an experiment.

    plateau.py check RUN_DIR...                 one line per run: verdict, gain, rise, cool-down gain
    plateau.py curves SWEEP_DIR... --out FILE.csv.gz [--columns eval_loss,eval_token_acc]
                                                every run's evaluation rows (step and the columns), gzip

The criterion reads a run's validation curve (metrics.csv, the rows with eval_loss) and its
schedule (config.yaml). The schedule's *stable phase* is [W, D): W the warmup's end, D where the
cool-down starts: `step` schedules drop at D = step_size (the experiments use one drop, gamma 0.1,
at 80% of the budget: a constant lr, then a separate cool-down); `constant` has no cool-down (D =
the last step); `cosine` has no stable phase, and D is taken where its lr has fallen half way
(W + (T - W) / 2): the cool-down is then only partly separated, which the verdict says.
With v(s) the validation loss at evaluation s, and the window the last quarter of the stable phase,
[D - (D - W) / 4, D]:

    gain      (v(a) - v(d)) / v(a)       a, d: the evaluations nearest the window's ends
    rise      (v(d) - min_{s <= d} v(s)) / min_{s <= d} v(s)
    cooldown  (v(d) - v(last)) / v(d)    what the cool-down adds (reported, never counted as progress)
    final     (v(last) - min_s v(s)) / min_s v(s)

A run is **on its plateau** when gain < GAIN (1%) and rise <= RISE (0.5%) and final <= RISE: it
no longer improves at its lr, and its validation loss is not rising (a rising loss is not a
plateau: it is reported as "rising"). Otherwise "improving". The verdict needs the stable phase
over ("unfinished" otherwise) and at least three evaluations in it ("too short" otherwise).
"""
import argparse
import csv
import gzip
import math
import sys
from pathlib import Path

GAIN = 0.01
RISE = 0.005


def schedule(run_dir):
    """(name, warmup, decay start D, steps) from a run's resolved config.yaml."""
    import yaml
    c = yaml.safe_load(open(Path(run_dir) / "config.yaml"))
    s, steps = c.get("schedule", {}), int(c["train"]["steps"])
    name, w = s.get("name", "cosine"), int(s.get("warmup_steps", 0))
    if name == "step":
        d = min(int(s.get("step_size", steps)), steps)
    elif name == "constant":
        d = steps
    else:
        d = w + (steps - w) // 2
    return name, w, d, steps


def curve(run_dir, column="eval_loss"):
    """[(step, value)] of the evaluation rows of a run's metrics.csv."""
    out = []
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        for r in csv.DictReader(f):
            v = r.get(column, "")
            if v not in ("", "nan"):
                out.append((int(float(r["step"])), float(v)))
    return out


def nearest(points, step):
    return min(points, key=lambda p: (abs(p[0] - step), p[0]))


def verdict(points, name, w, d):
    """{'verdict', 'gain', 'rise', 'cooldown', 'final', 'separated'} for an evaluation curve."""
    out = {"gain": math.nan, "rise": math.nan, "cooldown": math.nan, "final": math.nan, "separated": name != "cosine"}
    stable = [p for p in points if w <= p[0] <= d]
    if not points or points[-1][0] < d:
        out["verdict"] = "unfinished"  # the stable phase is not over yet
        return out
    if len(stable) < 3:
        out["verdict"] = "too short"
        return out
    a = nearest(stable, d - (d - w) / 4)
    e = stable[-1]
    best_before = min(v for s, v in points if s <= e[0])
    best = min(v for _, v in points)
    last = points[-1]
    out["gain"] = (a[1] - e[1]) / a[1]
    out["rise"] = (e[1] - best_before) / best_before
    out["cooldown"] = (e[1] - last[1]) / e[1]
    out["final"] = (last[1] - best) / best
    if out["rise"] > RISE or out["final"] > RISE:
        out["verdict"] = "rising"
    elif out["gain"] < GAIN:
        out["verdict"] = "plateau"
    else:
        out["verdict"] = "improving"
    return out


def check(run_dir):
    name, w, d, _ = schedule(run_dir)
    return verdict(curve(run_dir), name, w, d)


def cmd_check(a):
    for r in a.runs:
        v = check(r)
        print(f"{r}\t{v['verdict']}\tgain {v['gain']:.4f}\trise {v['rise']:.4f}\tcooldown {v['cooldown']:.4f}"
              f"\tfinal {v['final']:.4f}" + ("" if v["separated"] else "\t(cosine: cool-down partly separated)"))


def cmd_curves(a):
    """Every finished run's evaluation rows, one CSV (gzip): the curves committed beside a report."""
    cols = a.columns.split(",")
    rows = []
    for d in a.sweeps:
        res = Path(d) / "results.csv"
        if not res.exists():
            continue
        for r in csv.DictReader(open(res, newline="")):
            m = Path(d) / "runs" / r["run"] / "metrics.csv"
            if not m.exists():
                continue
            for x in csv.DictReader(open(m, newline="")):
                if x.get("eval_loss", "") in ("", "nan"):
                    continue
                rows.append([Path(d).name, r["run"], x["step"]] + [x.get(c, "") for c in cols])
    with gzip.open(a.out, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sweep", "run", "step"] + cols)
        w.writerows(rows)
    print(f"plateau.py: {len(rows)} evaluation rows into {a.out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("check")
    s.add_argument("runs", nargs="+")
    s = sub.add_parser("curves")
    s.add_argument("sweeps", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--columns", default="eval_loss,eval_token_acc")
    a = ap.parse_args()
    {"check": cmd_check, "curves": cmd_curves}[a.cmd](a)


if __name__ == "__main__":
    main()
