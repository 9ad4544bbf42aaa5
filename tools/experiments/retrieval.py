#!/usr/bin/python3
"""Retrieval heads on MQAR: does a head look at the right key, and is that the head the model
needs? (experiments/retrieval/README.md)

    tools/experiments/retrieval.py SWEEP_DIR OUT_DIR [--qkv build/qkv]

For every run of SWEEP_DIR (a `qkv sweep experiments/retrieval/sweep.yaml` directory) it scores
the best checkpoint on the **test split**: `qkv eval` (token accuracy), `qkv heads --examples 256`
(each head's retrieval score: the share of scored queries whose largest weight is on the key or
its value), `qkv ablate` (each head removed alone, zero ablation) and `qkv ablate --heads 1.*`.
Writes OUT_DIR/runs.csv (one row per run), OUT_DIR/heads.csv (one row per run and head) and
prints the report's tables (markdown) with Wilson 95% intervals for proportions. When SWEEP_DIR is
not there (a checkout with the committed CSVs only), the tables are made from OUT_DIR/runs.csv and
OUT_DIR/heads.csv as they are.
"""
import argparse
import csv
import io
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments.stats import wilson  # noqa: E402
import machine  # noqa: E402


def qkv(binary, *args):
    r = subprocess.run([binary, *args, "--threads", "1"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"retrieval.py: qkv {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def test_accuracy(out):
    m = re.search(r"token accuracy\s+([\d.]+)%\s+([\d.]+)%", out)
    return float(m.group(2)) / 100  # the test column


def fmt(p):
    return f"{p.k}/{p.n} = {p.p:.2f} [{p.low:.2f}, {p.high:.2f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--qkv", default=str(Path(__file__).resolve().parent.parent.parent / "build" / "qkv"))
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.sweep.is_dir():
        print(f"retrieval.py: {a.sweep} not found: tables from {a.out}/runs.csv and heads.csv", file=sys.stderr)
        runs = [{**r, "seed": int(r["seed"]), "steps": int(r["steps"]), "steps_to_target": int(r["steps_to_target"]),
                 "test_token_acc": float(r["test_token_acc"]), "test_acc_without_layer1": float(r["test_acc_without_layer1"])}
                for r in csv.DictReader(open(a.out / "runs.csv"))]
        heads = [{**h, "seed": int(h["seed"]), "head": int(h["head"]), "retrieval": float(h["retrieval"]),
                  "previous_token": float(h["previous_token"]), "test_acc_without": float(h["test_acc_without"]),
                  "acc_change": float(h["acc_change"])} for h in csv.DictReader(open(a.out / "heads.csv"))]
        tables(runs, heads)
        return
    runs, heads = [], []
    for run in sorted((a.sweep / "runs").iterdir(), key=lambda p: int(p.name.split("=")[-1])):
        seed = int(run.name.split("=")[-1])
        ck = str(run / "best.h5")
        result = next(csv.DictReader(open(run / "result.csv")))
        acc = test_accuracy(qkv(a.qkv, "eval", ck))
        scores = list(csv.DictReader(io.StringIO(open(qkv_csv(a.qkv, ck, a.out, seed, "heads")).read())))
        # ablate's CSV names layers by index, heads' by name and index
        ablate = {(r["layer"], r["head"]): r for r in csv.DictReader(open(qkv_csv(a.qkv, ck, a.out, seed, "ablate")))}
        layer1 = next(csv.DictReader(open(qkv_csv(a.qkv, ck, a.out, seed, "layer1"))))
        runs.append({"seed": seed, "status": result["status"], "steps": int(result["steps"]),
                     "steps_to_target": int(result["steps_to_target"]), "test_token_acc": acc,
                     "test_acc_without_layer1": float(layer1["token_accuracy"])})
        for s in scores:
            ab = ablate[(s["layer_index"], s["head"])]
            heads.append({"seed": seed, "layer": s["layer"], "head": int(s["head"]),
                          "retrieval": float(s["retrieval"]) if s["retrieval"] else float("nan"),
                          "previous_token": float(s["previous_token"]),
                          "label": s["label"], "test_acc_without": float(ab["token_accuracy"]),
                          "acc_change": float(ab["accuracy_change"])})
    cpu, flags = machine.cpu_info()
    for name, rows in (("runs", runs), ("heads", heads)):
        with open(a.out / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) + ["cpu", "isa"])
            w.writeheader()
            for r in rows:
                w.writerow({**r, "cpu": cpu, "isa": machine.isa(flags)})

    tables([{**r, "cpu": cpu, "isa": machine.isa(flags)} for r in runs], heads)


def tables(runs, heads):
    n = len(runs)
    solved = wilson(sum(r["test_token_acc"] >= 0.99 for r in runs), n)
    solved95 = wilson(sum(r["test_token_acc"] >= 0.95 for r in runs), n)
    stopped = wilson(sum(r["steps_to_target"] >= 0 for r in runs), n)
    kinds = sorted({f"{r.get('cpu', '?')} ({r.get('isa', '?')})" for r in runs})
    print(f"CPU: {'; '.join(kinds)}; {n} seeds\n")
    print("| seed | steps to 99% (validation) | test token accuracy | without layer 1 | retrieval heads (score) | most harmful head removed (accuracy change; its previous-token score) |")
    print("|---|---|---|---|---|---|")
    top_is_retrieval = 0
    for r in runs:
        hs = [h for h in heads if h["seed"] == r["seed"]]
        ret = [h for h in hs if h["label"] == "retrieval"]
        worst = min(hs, key=lambda h: h["acc_change"])
        best_ret = max(hs, key=lambda h: h["retrieval"])
        top_is_retrieval += worst is best_ret
        print(f"| {r['seed']} | {r['steps_to_target'] if r['steps_to_target'] >= 0 else 'not reached'} | "
              f"{100 * r['test_token_acc']:.2f}% | {100 * r['test_acc_without_layer1']:.2f}% | "
              + (", ".join(f"{h['layer'].split('.')[1]}.{h['head']} ({h['retrieval']:.2f})" for h in ret) or "none")
              + f" | {worst['layer'].split('.')[1]}.{worst['head']} ({100 * worst['acc_change']:+.1f} points; "
              f"prev {worst['previous_token']:.2f}) |")
    with_ret = wilson(sum(any(h["label"] == "retrieval" for h in heads if h["seed"] == r["seed"]) for r in runs), n)
    print(f"\nreached 99% validation token accuracy (the stopping rule): {fmt(stopped)}")
    print(f"solved (test token accuracy >= 99%): {fmt(solved)}")
    print(f"test token accuracy >= 95%: {fmt(solved95)}")
    print(f"runs with at least one head labelled retrieval (score >= 0.5): {fmt(with_ret)}")
    print(f"runs whose most harmful head is the head of highest retrieval score: {fmt(wilson(top_is_retrieval, n))}")
    l0 = [h["retrieval"] for h in heads if h["layer"].endswith(".0.attn")]
    l1 = [h["retrieval"] for h in heads if h["layer"].endswith(".1.attn")]
    print(f"retrieval score, layer 0 heads: median {sorted(l0)[len(l0) // 2]:.2f} (min {min(l0):.2f}, max {max(l0):.2f}); "
          f"layer 1 heads: median {sorted(l1)[len(l1) // 2]:.2f} (min {min(l1):.2f}, max {max(l1):.2f})")


def qkv_csv(binary, ck, out, seed, what):
    path = out / "per_run" / f"seed{seed}_{what}.csv"  # raw outputs (not committed: runs.csv and heads.csv hold them)
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "heads":
        qkv(binary, "heads", ck, "--examples", "256", "--csv", str(path))
    elif what == "ablate":
        qkv(binary, "ablate", ck, "--csv", str(path))
    else:
        qkv(binary, "ablate", ck, "--heads", "1.*", "--csv", str(path))
    return path


if __name__ == "__main__":
    main()
