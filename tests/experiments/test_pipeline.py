#!/usr/bin/python3
"""The experiment pipeline end to end, on tiny settings (docs/experiment-method.md).

Usage: test_pipeline.py --qkv BUILD/qkv --workdir DIR

- `qkv sweep --seeds` on a tiny induction sweep (layers 1 and 2, two learning rates, two seeds,
  40 steps with snapshots), then tools/experiments/score.py (test split, heads, pruning):
  one row per run with lr, validation and test metrics that differ, the head and pruning
  columns in range, the CPU and BLAS kernel;
- score.py --train --checkpoint last.h5: the train column of `qkv eval --train`, of the last checkpoints;
- report.py table with --select-lr on those rows, and induction.py: the learning rate it keeps
  per setting is the one of lowest mean validation loss (recomputed here), its timeline has one
  row per seed, and curves.png is a PNG;
- scale.py init-variance: with W_q and W_k drawn d_k^(-1/4) times smaller (model.qk_init_gain),
  Var(q . k) at initialisation is 1/d_k of the scaled arm's (to 1e-4) in both layers, for every d_k;
- scale.py variance on tiny scaled / unscaled / compensated sweeps: a table row per d_k and a PNG;
- score.py on a directory without results.csv exits non-zero naming the file;
- grokking.py on a tiny mod_add sweep: the figure, the tables, the first step at 99% train accuracy;
- score.py --keep: an earlier scoring's rows kept for runs not scored now, replaced for the others.
Prints one line per check; exits 0 when all pass, 1 otherwise.
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S = os.path.join(ROOT, "tools", "experiments")
PY = "/usr/bin/python3"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(*cmd, expect=0):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, cwd=ROOT)
    if expect == 0 and p.returncode != 0:
        sys.exit(f"FAIL {' '.join(map(str, cmd))}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def is_png(path):
    return os.path.exists(path) and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 5000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    w = a.workdir
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    qkv = os.path.abspath(a.qkv)

    # ---- a tiny induction sweep, scored on the test split ----
    with open(f"{w}/induction.yaml", "w") as f:
        f.write(f"base: {ROOT}/configs/induction.yaml\n"
                "set:\n  train.steps: 40\n  train.eval_every: 20\n  train.snapshot_every: 20\n  train.batch_size: 8\n"
                "  task.eval_size: 64\n  schedule.warmup_steps: 5\n"
                "grid:\n  model.layers: [1, 2]\n  optimizer.lr: [0.001, 0.003]\nseeds: [7, 8, 9]\n")
    run(qkv, "sweep", f"{w}/induction.yaml", "--seeds", "1,2", "--out", f"{w}/ind", "--jobs", "2", "--threads", "1")
    sweep_rows = list(csv.DictReader(open(f"{w}/ind/results.csv")))
    check(sorted({r["seed"] for r in sweep_rows}) == ["1", "2"] and len(sweep_rows) == 8,
          "qkv sweep --seeds 1,2 replaces the file's seeds: 8 runs of seeds 1 and 2")
    run(PY, f"{S}/score.py", f"{w}/ind", "--out", f"{w}/runs.csv", "--heads", f"{w}/heads.csv", "--prune",
        "--columns", "model.heads", "--qkv", qkv)
    rows = list(csv.DictReader(open(f"{w}/runs.csv")))
    check(len(rows) == 8, f"score.py: one row per run ({len(rows)})")
    cols = list(rows[0])
    check(cols[:2] == ["run", "model.heads"] and cols.index("seed") > cols.index("optimizer.lr"),
          "score.py: --columns right after run, the grid keys before seed")
    check(all(float(r["lr"]) == float(r["optimizer.lr"]) for r in rows), "score.py: lr is the run's optimizer.lr")
    check(all(math.isfinite(float(r[k])) for r in rows for k in ("val_loss", "test_loss", "val_token_acc", "test_token_acc")),
          "score.py: validation and test metrics are finite")
    check(any(r["val_loss"] != r["test_loss"] for r in rows), "score.py: validation and test are different splits")
    check(all(int(r["heads_total"]) == 4 * int(r["model.layers"]) and 0 <= int(r["heads_removable"]) <= int(r["heads_total"])
              for r in rows), "score.py --prune: heads_total = 4 x layers, 0 <= heads_removable <= heads_total")
    check(all(r["cpu"] and r["isa"] and r["blas"] not in ("", "unknown") for r in rows), "score.py: CPU, ISA and BLAS kernel")
    # The test column is what `qkv eval` prints for that checkpoint.
    one = rows[0]
    out = run(qkv, "eval", f"{w}/ind/runs/{one['run']}/best.h5", "--threads", "1").stdout
    loss_line = next(l for l in out.splitlines() if l.strip().startswith("loss"))
    check(abs(float(loss_line.split()[-1]) - float(one["test_loss"])) < 1e-5, "score.py: test_loss = qkv eval's test column")
    # --train --checkpoint last.h5: the last checkpoints, with the train column of `qkv eval --train`.
    run(PY, f"{S}/score.py", f"{w}/ind", "--out", f"{w}/last.csv", "--train", "--checkpoint", "last.h5",
        "--jobs", "2", "--qkv", qkv)
    last = {r["run"]: r for r in csv.DictReader(open(f"{w}/last.csv"))}
    out = run(qkv, "eval", f"{w}/ind/runs/{one['run']}/last.h5", "--train", "--threads", "1").stdout
    cells = next(l for l in out.splitlines() if l.strip().startswith("loss")).split()[-3:]
    check(len(last) == 8 and all(math.isfinite(float(r["train_loss"])) for r in last.values()) and
          abs(float(cells[0]) - float(last[one["run"]]["train_loss"])) < 1e-5 and
          abs(float(cells[2]) - float(last[one["run"]]["test_loss"])) < 1e-5,
          "score.py --train --checkpoint last.h5: train_loss and test_loss = qkv eval --train's columns of last.h5")
    heads = list(csv.DictReader(open(f"{w}/heads.csv")))
    check(len(heads) == sum(4 * int(r["model.layers"]) for r in rows) and "induction" in heads[0],
          "score.py --heads: one row per run and head, with the induction score")

    p = run(PY, f"{S}/report.py", "table", f"{w}/runs.csv", "--select-lr", "val_loss:min", "--metric", "test_loss:mean")
    check("test" in p.stdout and p.stdout.count("\n|") >= 3, "report.py table on score.py's CSV")

    p = run(PY, f"{S}/induction.py", f"{w}/ind", f"{w}/runs.csv", f"{w}/heads.csv", f"{w}/report", "--qkv", qkv)
    timeline = list(csv.DictReader(open(f"{w}/report/timeline.csv")))
    check(len(timeline) == 4, f"induction.py: one timeline row per setting and seed ({len(timeline)})")
    for layers in ("1", "2"):
        means = {}
        for r in rows:
            if r["model.layers"] == layers:
                means.setdefault(float(r["lr"]), []).append(float(r["val_loss"]))
        best = min(means, key=lambda lr: (sum(means[lr]) / len(means[lr]), lr))
        kept = {float(t["lr"]) for t in timeline if t["layers"] == layers}
        check(kept == {best}, f"induction.py: layers {layers} keeps lr {best} (lowest mean validation loss), kept {kept}")
    check(all(t["test_loss_without_layer0"] != "" and math.isfinite(float(t["test_loss_without_layer0"])) for t in timeline),
          "induction.py: ablated test losses")
    check(is_png(f"{w}/report/curves.png") and "| layers |" in p.stdout, "induction.py: curves.png and the tables")

    # ---- the compensating init, exactly ----
    run(PY, f"{S}/scale.py", "init-variance", "--out", f"{w}/init.csv", "--seeds", "1", "--qkv", qkv)
    init = list(csv.DictReader(open(f"{w}/init.csv")))
    def var(d, arm, col="qk_var"):
        return next(float(r[col]) for r in init if r["head_dim"] == str(d) and r["arm"] == arm)
    for d in (16, 64, 256, 512):
        # The compensated arm computes the scaled arm's function at step 0, so in both layers its raw
        # scores are the scaled arm's times d_k^(-1/2); the unscaled arm shares layer 0's q and k.
        check(abs(var(d, "compensated") * d / var(d, "scaled") - 1) < 1e-4 and
              abs(var(d, "unscaled", "qk_var_layer0") / var(d, "scaled", "qk_var_layer0") - 1) < 1e-6,
              f"qk_init_gain d_k^(-1/4) at d_k {d}: Var(q . k) {var(d, 'compensated'):.4g} = {var(d, 'scaled'):.4g} / {d}")

    # ---- the scale report on tiny sweeps ----
    tiny = ["--seeds", "1", "--set", "train.steps=20", "--set", "train.eval_every=10", "--set", "schedule.warmup_steps=5",
            "--jobs", "2", "--threads", "1"]
    arms = []
    for arm, sweep in (("scaled", "scaled"), ("unscaled", "unscaled"), ("compensated", "compensated_dk16")):
        run(qkv, "sweep", f"{ROOT}/experiments/scale/{sweep}.yaml", "--out", f"{w}/scale/{sweep}", *tiny)
        run(PY, f"{S}/score.py", f"{w}/scale/{sweep}", "--label", f"arm={arm}", "--columns", "model.head_dim",
            "--out", f"{w}/{arm}.csv", "--qkv", qkv)
        arms.append(f"{w}/{arm}.csv")
    p = run(PY, f"{S}/scale.py", "variance", f"{w}/init.csv", *arms, "--sweeps", f"{w}/scale", "--out", f"{w}/variance.png")
    table = [l for l in p.stdout.splitlines() if l.startswith("| ") and l[2].isdigit()]
    check(len(table) == 4 and is_png(f"{w}/variance.png"), f"scale.py variance: 4 rows ({len(table)}) and a PNG")

    p = run(PY, f"{S}/score.py", w, "--out", f"{w}/x.csv", expect=1)
    check(p.returncode != 0 and "results.csv not found" in p.stderr, "score.py without results.csv: an error naming it")

    # ---- grokking.py on a tiny mod_add sweep (p = 11: 60 training pairs, full batch) ----
    with open(f"{w}/grok.yaml", "w") as f:
        f.write(f"base: {ROOT}/configs/mod_add.yaml\n"
                "set:\n  task.vocab: 11\n  task.train_size: 60\n  train.batch_size: 60\n  task.eval_size: 30\n"
                "  train.steps: 200\n  train.eval_every: 20\n  model.d_model: 32\n  model.d_ff: 64\n"
                "grid:\n  optimizer.weight_decay: [1.0, 0.0]\nseeds: [1]\n")
    run(qkv, "sweep", f"{w}/grok.yaml", "--out", f"{w}/grok", "--jobs", "2", "--threads", "1")
    run(PY, f"{S}/score.py", f"{w}/grok", "--columns", "task.vocab", "--out", f"{w}/grok.csv", "--jobs", "2", "--qkv", qkv)
    p = run(PY, f"{S}/grokking.py", f"{w}/grok.csv", f"{w}/grok", "--out", f"{w}/grok.png")
    tables, rows = [], None  # the markdown tables of the report, each a list of data rows
    for l in p.stdout.splitlines():
        if l.startswith("| weight decay |"):
            rows = []
            tables.append(rows)
        elif l.startswith("|---"):
            continue
        elif l.startswith("|") and rows is not None:
            rows.append(l)
        else:
            rows = None
    check(is_png(f"{w}/grok.png") and [len(t) for t in tables] == [2, 2] and "mod 11" in p.stdout,
          f"grokking.py: a PNG, and a summary and a per-run table of 2 rows each ({[len(t) for t in tables]})")
    per_run = tables[1] if len(tables) == 2 else []
    # The per-run "train >= 99%" step is the first evaluation at which metrics.csv says so.
    grok_rows = list(csv.DictReader(open(f"{w}/grok.csv")))
    for r in grok_rows:
        m = list(csv.DictReader(open(f"{w}/grok/runs/{r['run']}/metrics.csv")))
        first = next((row["step"] for row in m if float(row["train_token_acc"]) >= 0.99), "never")
        wd = "1" if float(r["optimizer.weight_decay"]) == 1 else "0"
        line = next((l for l in per_run if l.startswith(f"| {wd} | 1 |")), "")
        check(line.split("|")[3].strip() == first,
              f"grokking.py: weight decay {wd}: train >= 99% at step {first} (report: {line.split('|')[3:4]})")
    # score.py --keep: an earlier scoring's rows for runs not scored now stay, the others are replaced.
    with open(f"{w}/old.csv", "w", newline="") as f:
        old = csv.DictWriter(f, fieldnames=list(grok_rows[0]))
        old.writeheader()
        old.writerow({**grok_rows[0], "test_token_acc": "0.5"})                        # scored again now
        old.writerow({**grok_rows[0], "run": "weight_decay=1.0_seed=9", "seed": "9", "cpu": "Earlier CPU"})
    run(PY, f"{S}/score.py", f"{w}/grok", "--columns", "task.vocab", "--keep", f"{w}/old.csv", "--out", f"{w}/kept.csv",
        "--jobs", "2", "--qkv", qkv)
    kept = list(csv.DictReader(open(f"{w}/kept.csv")))
    check(sorted(r["seed"] for r in kept) == ["1", "1", "9"] and [r["cpu"] for r in kept if r["seed"] == "9"] == ["Earlier CPU"]
          and all(r["test_token_acc"] != "0.5" for r in kept),
          "score.py --keep: the old row of an unscored run kept with its CPU, the rescored run's old row replaced")
    p = run(PY, f"{S}/score.py", f"{w}/grok", "--keep", f"{w}/runs.csv", "--out", f"{w}/bad.csv", "--qkv", qkv, expect=1)
    check(p.returncode != 0 and "has no column" in p.stderr, "score.py --keep with another sweep's CSV: an error naming it")
    os.remove(f"{w}/grok/runs/{grok_rows[0]['run']}/metrics.csv")
    p = run(PY, f"{S}/grokking.py", f"{w}/grok.csv", f"{w}/grok", "--out", f"{w}/grok2.png", expect=1)
    check(p.returncode != 0 and "metrics.csv not found" in p.stderr, "grokking.py without a run's metrics.csv: an error naming it")

    print(f"{'all passed' if not failures else 'FAILED'}: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
