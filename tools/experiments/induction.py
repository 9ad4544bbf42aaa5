#!/usr/bin/python3
"""Induction heads forming during training (experiments/induction/README.md).

    induction.py SWEEP_DIR RUNS.csv HEADS.csv OUT_DIR [--qkv build/qkv] [--drop 2.0]

SWEEP_DIR is a `qkv sweep experiments/induction/sweep.yaml` directory; RUNS.csv and HEADS.csv
are what `score.py SWEEP_DIR --out RUNS.csv --heads HEADS.csv` wrote (test-split metrics and the
head scores of every run's best checkpoint). Per setting (model.layers), the learning rate is
chosen on the mean validation loss (select.py); for the chosen lr's runs this writes
OUT_DIR/timeline.csv, one row per run:
- drop_step: the first evaluation step at which the validation loss is below --drop nats (the
  plateau is ln 64 = 4.16: the repeated tokens look random until the circuit forms), -1 if never;
- prev_step / induction_step: the first snapshot step at which some layer-0 head's
  previous-token score reaches 0.5 / some last-layer head's induction score reaches 0.4 (the
  labels' thresholds, docs/instruments.md), -1 if never;
- plateau_loss: the validation loss at the first evaluation at or after --plateau-step (400);
- test_loss and the test loss with every layer-0 head labelled previous-token removed, and with
  every last-layer head labelled induction removed (`qkv ablate --heads`, zero and mean
  ablation), and with the whole first or last layer removed (zero);
and OUT_DIR/curves.png (validation loss and head scores against step, one faint line per run,
the median bold). It prints the report's tables (markdown).
When SWEEP_DIR is not there (a checkout with the committed CSVs only), the tables are made from
RUNS.csv and OUT_DIR/timeline.csv as committed, and curves.png is left as it is.
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
from experiments.stats import wilson  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "scripts"))  # plot_snapshots, a user tool
import plot_snapshots  # noqa: E402

PLATEAU = math.log(64)


def ablate_loss(binary, ck, heads, mode="zero"):
    """Test loss with `heads` (LAYER.HEAD,...) removed together (zero or mean ablation)."""
    if not heads:
        return math.nan
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "a.csv"
        r = subprocess.run([binary, "ablate", ck, "--heads", heads, "--mode", mode, "--csv", str(out), "--threads", "1"],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"induction.py: qkv ablate {ck} --heads {heads} failed: {r.stderr.strip()}")
        return float(next(csv.DictReader(open(out)))["loss"])


def first(steps, values, threshold, below=False):
    for s, v in zip(steps, values):
        if (v < threshold) if below else (v >= threshold):
            return int(s)
    return -1


def median_curve(curves):
    """Median over runs at each step of the longest run; a run that stopped holds its last value."""
    longest = max(curves, key=lambda c: len(c[0]))[0]
    med = []
    for i in range(len(longest)):
        med.append(statistics.median(c[1][min(i, len(c[1]) - 1)] for c in curves))
    return longest, med


def fmt_p(p):
    return f"{p.k}/{p.n} = {p.p:.2f} [{p.low:.2f}, {p.high:.2f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", type=Path)
    ap.add_argument("runs", type=Path)
    ap.add_argument("heads", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--qkv", default=str(Path(__file__).resolve().parents[2] / "build" / "qkv"))
    ap.add_argument("--drop", type=float, default=2.0)
    ap.add_argument("--plateau-step", type=int, default=400)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)

    runs = [r for r in csv.DictReader(open(a.runs)) if r["status"] in ("steps", "target", "diverged")]
    choices, kept = lrsel.select_lr(runs, ["model.layers"], metric="val_loss", direction="min")
    if not a.sweep.is_dir():
        print(f"induction.py: {a.sweep} not found: tables from {a.out / 'timeline.csv'}, curves.png kept", file=sys.stderr)
        print_tables(a, choices, read_timeline(a.out / "timeline.csv"))
        return
    heads = list(csv.DictReader(open(a.heads)))
    timeline = []
    for r in kept:
        run_dir = a.sweep / "runs" / r["run"]
        metrics = list(csv.DictReader(open(run_dir / "metrics.csv")))
        steps = [int(m["step"]) for m in metrics]
        loss = [float(m["eval_loss"]) for m in metrics]
        snap = plot_snapshots.load(str(run_dir / "snapshots.h5"))
        names = snap["score_names"]
        first_layer, last_layer = snap["layers"][0], snap["layers"][-1]
        prev = first_layer["scores"][:, :, names.index("previous_token")].max(axis=1)
        ind = last_layer["scores"][:, :, names.index("induction")].max(axis=1)
        layers = int(r["model.layers"])
        ck = str(run_dir / "best.h5")
        mine = [h for h in heads if h["run"] == r["run"]]
        prev_heads = [f"0.{h['head']}" for h in mine if h["layer_index"] == "0" and h["label"] == "previous-token"]
        ind_heads = [f"{layers - 1}.{h['head']}" for h in mine
                     if h["layer_index"] == str(layers - 1) and h["label"] == "induction"]
        row = {"run": r["run"], "layers": layers, "seed": int(r["seed"]), "lr": float(r["lr"]),
               "status": r["status"], "steps": int(r["steps"]),
               "drop_step": first(steps, loss, a.drop, below=True),
               "prev_step": first(snap["steps"], prev, 0.5), "induction_step": first(snap["steps"], ind, 0.4),
               "test_loss": float(r["test_loss"]), "test_token_acc": float(r["test_token_acc"]),
               "prev_heads": " ".join(prev_heads), "induction_heads": " ".join(ind_heads),
               "plateau_loss": next((v for st, v in zip(steps, loss) if st >= a.plateau_step), math.nan),
               "test_loss_without_prev": ablate_loss(a.qkv, ck, ",".join(prev_heads)),
               "test_loss_without_induction": ablate_loss(a.qkv, ck, ",".join(ind_heads)),
               "test_loss_without_prev_mean": ablate_loss(a.qkv, ck, ",".join(prev_heads), "mean"),
               "test_loss_without_induction_mean": ablate_loss(a.qkv, ck, ",".join(ind_heads), "mean"),
               "test_loss_without_layer0": ablate_loss(a.qkv, ck, "0.*"),
               "test_loss_without_last_layer": ablate_loss(a.qkv, ck, f"{layers - 1}.*"),
               "cpu": r.get("cpu", ""), "isa": r.get("isa", ""), "blas": r.get("blas", "")}
        row["_curves"] = (steps, loss, list(snap["steps"]), list(prev), list(ind))
        timeline.append(row)

    fields = [k for k in timeline[0] if not k.startswith("_")]
    with open(a.out / "timeline.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(timeline)
    plot(timeline, a.out / "curves.png", a.drop)
    print_tables(a, choices, timeline)


INTS = ("layers", "seed", "steps", "drop_step", "prev_step", "induction_step")


def read_timeline(path):
    """timeline.csv as written above, numbers as numbers."""
    rows = []
    for r in csv.DictReader(open(path)):
        t = dict(r)
        for k, v in r.items():
            if k in INTS:
                t[k] = int(v)
            elif k.startswith("test_") or k in ("lr", "plateau_loss"):
                t[k] = float(v) if v not in ("", None) else math.nan
        rows.append(t)
    return rows


def print_tables(a, choices, timeline):
    print("| layers | lr chosen (validation loss, mean over seeds: candidates) | n | validation loss at step "
          f"{a.plateau_step}, median | loss drop (< {a.drop:.1f} nats) by the budget | median drop step "
          "| test loss, median (min to max) | test token accuracy, median (min to max) |")
    print("|---|---|---|---|---|---|---|---|")
    for setting, ch in sorted(choices.items()):
        rows = [t for t in timeline if str(t["layers"]) == setting[0]]
        cands = ", ".join(f"{float(c.lr):g}: {c.score:.3f}" for c in ch.candidates)
        acc = [t["test_token_acc"] for t in rows]
        plateau = [t["plateau_loss"] for t in rows if math.isfinite(t["plateau_loss"])]
        dropped = wilson(sum(t["drop_step"] >= 0 for t in rows), len(rows))
        ds = sorted(t["drop_step"] for t in rows if t["drop_step"] >= 0)
        med = "never" if len(ds) * 2 < len(rows) else str(sorted(
            [t["drop_step"] if t["drop_step"] >= 0 else math.inf for t in rows])[(len(rows) - 1) // 2])
        tl = [t["test_loss"] for t in rows]
        print(f"| {setting[0]} | {float(ch.lr):g} ({cands}) | {len(rows)} | "
              f"{statistics.median(plateau) if plateau else math.nan:.3f} | {fmt_p(dropped)} | {med} | "
              f"{statistics.median(tl):.3f} ({min(tl):.3f} to {max(tl):.3f}) | "
              f"{statistics.median(acc):.4f} ({min(acc):.4f} to {max(acc):.4f}) |")
    print()
    print("Test loss (nats/token) with heads removed: zero ablation / mean ablation (the head's mean output "
          "over the validation set); the heads are those labelled on the test split.\n")
    print("| layers | seed | drop step | previous-token head from | induction head from | test loss | without the "
          "previous-token heads | without the induction heads | without layer 0 (zero) | without the last layer (zero) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in sorted(timeline, key=lambda t: (t["layers"], t["seed"])):
        def s(v):
            return "never" if v < 0 else str(v)

        def l(v, mean, heads):
            return "no such head" if math.isnan(v) else f"{v:.3f} / {mean:.3f} ({heads})"
        print(f"| {t['layers']} | {t['seed']} | {s(t['drop_step'])} | {s(t['prev_step'])} | {s(t['induction_step'])} | "
              f"{t['test_loss']:.3f} | {l(t['test_loss_without_prev'], t['test_loss_without_prev_mean'], t['prev_heads'])} | "
              f"{l(t['test_loss_without_induction'], t['test_loss_without_induction_mean'], t['induction_heads'])} | {t['test_loss_without_layer0']:.3f} | "
              f"{t['test_loss_without_last_layer']:.3f} |")


def plot(timeline, out, drop):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    colours = {1: "tab:orange", 2: "tab:blue"}
    panels = [(0, 1, "validation loss (nats/token)", "validation loss"),
              (2, 3, "largest previous-token score, layer 0", "previous-token score (layer 0)"),
              (2, 4, "largest induction score, last layer", "induction score (last layer)")]
    for ax, (xi, yi, ylabel, title) in zip(axes, panels):
        for layers in sorted({t["layers"] for t in timeline}):
            curves = [(t["_curves"][xi], t["_curves"][yi]) for t in timeline if t["layers"] == layers]
            for x, y in curves:
                ax.plot(x, y, color=colours.get(layers, "grey"), alpha=0.25, lw=0.8)
            x, med = median_curve(curves)
            ax.plot(x, med, color=colours.get(layers, "grey"), lw=2.2,
                    label=f"{layers} layer{'s' if layers > 1 else ''}: median of {len(curves)} runs")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    axes[0].axhline(PLATEAU, color="grey", ls=":", lw=1)
    axes[0].text(0, PLATEAU, "ln 64", va="bottom", color="grey")
    axes[0].axhline(drop, color="grey", ls="--", lw=0.8)
    axes[1].axhline(0.5, color="grey", ls="--", lw=0.8)
    axes[2].axhline(0.4, color="grey", ls="--", lw=0.8)
    axes[0].legend(fontsize=8)
    fig.suptitle("Induction task: faint lines one run each (seed), bold the median; dashed: thresholds")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
