#!/usr/bin/python3
"""Where each experiment's learning rate sits in the grid it was chosen from (experiments/README.md).

    lr_grid.py [--root .]

For every experiment that chose an lr per setting from its committed per-run CSVs, the choice is
made again exactly as its report makes it (select.py: the same setting keys, metric and direction,
the mean over the seeds every lr ran) and classed: *interior* (a grid value on each side),
*lowest* or *highest* (at an edge of the grid: a better lr may lie beyond it), or *one lr* (no
choice). The experiments with a pilot on tuning seeds (roles, lm_heads, lm_dk, scale_dv, lm_heads_zh,
lm_dk_zh) are read from their lr files, which roles.py select wrote after any extension of the
grid. Prints one markdown table, a row per experiment: its grid and how many settings chose each
position. An experiment whose files are not there yet is listed as "not run yet".
"""
import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments import select as lrsel  # noqa: E402

# (experiment, CSV files, setting keys, metric, direction): as the experiment's report chooses.
CHOSEN_ON_REPORTED_SEEDS = [
    ("induction", ["runs.csv"], ["model.layers"], "val_loss", "min"),
    ("dk_width", ["runs.csv"], ["model.heads", "model.head_dim"], "val_token_acc", "max"),
    ("scale", ["scaled.csv", "unscaled.csv", "compensated.csv"], ["arm", "model.head_dim"], "val_token_acc", "max"),
    ("heads", ["recall.csv"], ["model.heads"], "val_token_acc", "max"),
    ("heads", ["fortunes.csv"], ["model.heads"], "val_loss", "min"),
    ("dropout", ["residual_best.csv", "attention_best.csv"], ["arm", "model.dropout", "model.attn_dropout"],
     "val_loss", "min"),
    ("cross_self", ["decoder.csv", "cross.csv", "encoder.csv"], ["arm"], "val_token_acc", "max"),
    ("mqar_sizes", ["runs.csv"], ["task.length", "task.pairs", "model.d_model"], "val_token_acc", "max"),
]
# Experiments with a pilot on tuning seeds: their lr files (lines "SETTING LR interior|EDGE NEXT").
PILOTED = [
    ("roles", ["lr.txt"]),
    ("lm_heads", ["lr.txt"]),
    ("lm_dk", ["lr.txt"]),
    ("scale_dv", ["lr_scaled.txt", "lr_unscaled.txt"]),
    ("lm_heads_zh", ["lr.txt"]),
    ("lm_dk_zh", ["lr.txt"]),
]
ONE_LR = ["retrieval", "grokking", "scale_exact", "induction_ablation"]


def g(x):
    return f"{float(x):g}"


def position(lr, grid):
    if len(grid) < 2:
        return "one lr"
    if lr == grid[0]:
        return "lowest"
    if lr == grid[-1]:
        return "highest"
    return "interior"


def numeric_first(setting):
    """Sort key of a setting (a tuple of strings): numbers by value, words by name."""
    def key(v):
        try:
            return (0, float(v), "")
        except ValueError:
            return (1, 0.0, v)
    return [key(v) for v in setting]


def summary(positions):
    order = ["interior", "lowest", "highest", "one lr"]
    return ", ".join(f"{positions.count(p)} {p}" for p in order if positions.count(p))


def reported_rows(root):
    rows = []
    for name, files, keys, metric, direction in CHOSEN_ON_REPORTED_SEEDS:
        paths = [root / "experiments" / name / f for f in files]
        if not all(p.exists() for p in paths):
            rows.append((name, ", ".join(files), "not run yet", ""))
            continue
        runs = []
        for p in paths:
            with open(p, newline="") as f:
                runs += [r for r in csv.DictReader(f) if r.get("status") in ("steps", "target", "diverged")]
        choices, _ = lrsel.select_lr(runs, keys, metric=metric, direction=direction)
        grids, positions = set(), []
        for setting in sorted(choices, key=numeric_first):
            c = choices[setting]
            grid = sorted(float(x.lr) for x in c.candidates)
            grids.add(tuple(grid))
            pos = position(float(c.lr), grid)
            positions.append(pos)
        grid_text = "; ".join("{" + ", ".join(g(x) for x in grid) + "}" for grid in sorted(grids))
        rows.append((name, ", ".join(files) + f" ({metric}, {direction})", grid_text, summary(positions)))
    return rows


def piloted_rows(root):
    rows = []
    for name, files in PILOTED:
        paths = [root / "experiments" / name / f for f in files]
        if not all(p.exists() for p in paths):
            rows.append((name, ", ".join(files), "not run yet", ""))
            continue
        positions, lrs = [], set()
        for p in paths:
            for line in p.read_text().split("\n"):
                if not line.strip():
                    continue
                setting, lr, where = line.split()[:3]
                lrs.add(float(lr))
                positions.append("interior" if where == "interior" else "edge")
        chosen = "chosen: " + ", ".join(g(x) for x in sorted(lrs))
        rows.append((name, ", ".join(files) + " (a pilot on tuning seeds; an edge extends the grid)", chosen,
                     summary(positions).replace(" edge", " at an edge after two extensions")))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    a = ap.parse_args()
    root = Path(a.root)
    print("| experiment | chosen from | grid | settings by where their lr sits |")
    print("|---|---|---|---|")
    for row in reported_rows(root) + piloted_rows(root):
        print("| " + " | ".join(row) + " |")
    print(f"| {', '.join(ONE_LR)} | one lr, no choice | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
