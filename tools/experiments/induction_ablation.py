#!/usr/bin/python3
"""Single-head and random-head ablations of the induction circuit (experiments/induction_ablation/).

    induction_ablation.py SWEEP_DIR --out DIR [--qkv build/qkv] [--threshold 2.0]

For every finished run of SWEEP_DIR (the best checkpoint): the heads' labels on the test split
(`qkv heads --csv`), the test loss with each head removed alone (`qkv ablate --csv`), without the
labelled previous-token heads (layer 0) and induction heads (layer 1), and without every set of the
same size drawn from all heads (zero ablation throughout). Writes DIR/ablation.csv (one row per run
and kind) and prints results.md: the per-run table, the stated Wilcoxon tests (labelled set against
the mean over random sets, Holm over the two kinds) and the single-head counts above the plateau.
"""
import argparse
import csv
import itertools
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments import stats  # noqa: E402

KINDS = (("previous-token", 0), ("induction", 1))


def run_qkv(qkv, *args):
    r = subprocess.run([qkv, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"induction_ablation.py: {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def loss_without(qkv, ckpt, heads):
    out = run_qkv(qkv, "ablate", ckpt, "--threads", "1", "--heads", ",".join(f"{l}.{h}" for l, h in heads))
    m = re.search(r"^without \S+: loss ([\d.eE+-]+|nan|inf)", out, re.M)
    if not m:
        sys.exit(f"induction_ablation.py: no loss in qkv ablate's output for {ckpt}")
    return float(m.group(1))


def analyse_run(qkv, ckpt, tmp):
    run_qkv(qkv, "heads", ckpt, "--threads", "1", "--csv", f"{tmp}/heads.csv")
    heads = read_csv(f"{tmp}/heads.csv")
    everyone = [(int(r["layer_index"]), int(r["head"])) for r in heads]
    labels = {(int(r["layer_index"]), int(r["head"])): r["label"] for r in heads}
    single_out = run_qkv(qkv, "ablate", ckpt, "--threads", "1", "--csv", f"{tmp}/single.csv")
    intact = float(re.search(r"intact model: loss ([\d.eE+-]+)", single_out).group(1))
    single = {(int(r["layer"]), int(r["head"])): float(r["loss"]) for r in read_csv(f"{tmp}/single.csv")}
    rows = []
    for kind, layer in KINDS:
        labelled = [hd for hd in everyone if hd[0] == layer and labels[hd] == kind]
        row = {"kind": kind, "k": len(labelled), "intact": intact,
               "labelled": " ".join(f"{l}.{h}" for l, h in labelled)}
        if labelled:
            row["without_labelled"] = loss_without(qkv, ckpt, labelled)
            sets = [loss_without(qkv, ckpt, s) for s in itertools.combinations(everyone, len(labelled))]
            row["random_mean"] = sum(sets) / len(sets)
            row["random_sets"] = len(sets)
            row["single_max"] = max(single[hd] for hd in labelled)
        others = [single[hd] for hd in everyone if labels[hd] != kind or hd[0] != layer]
        row["single_other_mean"] = sum(others) / len(others) if others else float("nan")
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--qkv", default="build/qkv")
    ap.add_argument("--threshold", type=float, default=2.0, help="the plateau threshold (nats)")
    a = ap.parse_args()
    results = [r for r in read_csv(a.sweep / "results.csv") if r.get("status") in ("steps", "target")]
    if not results:
        sys.exit(f"induction_ablation.py: no finished run in {a.sweep}/results.csv")
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in sorted(results, key=lambda r: int(r["seed"])):
            for row in analyse_run(a.qkv, str(a.sweep / "runs" / r["run"] / "best.h5"), tmp):
                table.append({"run": r["run"], "seed": int(r["seed"]), **row})
    fields = ["run", "seed", "kind", "k", "labelled", "intact", "without_labelled", "random_mean", "random_sets",
              "single_max", "single_other_mean"]
    a.out.mkdir(parents=True, exist_ok=True)
    with open(a.out / "ablation.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(table)
    print("Test loss (nats/token, test split, zero ablation) per run: intact; without the labelled heads of a kind;\n"
          "the mean over every set of as many heads drawn from all 8; without the most harmful single labelled head.\n")
    print("| seed | kind | labelled heads | intact | without them | random sets of k, mean | worst single labelled |")
    print("|---|---|---|---|---|---|---|")
    for t in table:
        f = (lambda k: f"{t[k]:.3f}" if k in t else "-")
        print(f"| {t['seed']} | {t['kind']} | {t['labelled'] or 'none'} | {t['intact']:.3f} | {f('without_labelled')} | "
              f"{f('random_mean')} | {f('single_max')} |")
    print("\nStated tests (Wilcoxon signed-rank, one-sided greater: without the labelled set minus the random mean):\n")
    ps = []
    for kind, _ in KINDS:
        d = [t["without_labelled"] - t["random_mean"] for t in table if t["kind"] == kind and "without_labelled" in t]
        w, n, p = stats.wilcoxon_signed_rank(d, alternative="greater")
        ps.append(p)
        mean = sum(d) / len(d) if d else float("nan")
        print(f"- {kind}: {n} runs with a labelled head, mean difference {mean:+.3f} nats, W+ = {w:g}, p = {p:.3g}")
    holm = stats.holm(ps)
    print(f"- Holm over the two: {', '.join(f'{kind} {h:.3g}' for (kind, _), h in zip(KINDS, holm))}\n")
    print(f"Single heads (reported without a test): runs in which the most harmful single labelled head leaves the "
          f"loss above the plateau ({a.threshold} nats):\n")
    for kind, _ in KINDS:
        rows = [t for t in table if t["kind"] == kind and "single_max" in t]
        if not rows:
            print(f"- {kind}: no run has a labelled head")
            continue
        above = sum(t["single_max"] > a.threshold for t in rows)
        w = stats.wilson(above, len(rows))
        lab = [t["single_max"] - t["intact"] for t in rows]
        oth = [t["single_other_mean"] - t["intact"] for t in rows]
        print(f"- {kind}: {above}/{len(rows)} [{w.low:.2f}, {w.high:.2f}]; the worst single labelled head adds "
              f"{sum(lab) / max(1, len(lab)):+.3f} nats on average, a head of the other heads {sum(oth) / max(1, len(oth)):+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
