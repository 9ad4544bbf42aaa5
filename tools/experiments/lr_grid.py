#!/usr/bin/python3
"""Where each experiment's learning rate sits in the grid it was chosen from (experiments/README.md).

    lr_grid.py [--root .]

For every experiment that chose an lr per setting from its committed per-run CSVs, the choice is
made again exactly as its report makes it (select.py: the same setting keys, metric and direction,
the mean over the seeds every lr ran) and classed: *interior* (a grid value on each side),
*lowest* or *highest* (at an edge of the grid: a better lr may lie beyond it), or *one lr* (no
choice). The experiments with a pilot on tuning seeds (roles, roles_v2, lm_heads, lm_dk, scale_dv,
lm_heads_zh, lm_dk_zh) are chosen again from their committed pilot CSVs (every run of the pilot and
of its extensions: the lowest mean final validation loss over the tuning seeds, as roles.py select
chooses) and the choice is checked against the lr file the runs used; where no pilot CSV was
committed, the lr file's word is shown and marked as not checkable. Prints one markdown table, a
row per experiment: its grid and how many settings chose each position. An experiment whose files
are not there yet is listed as "not run yet".
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
# Experiments with a pilot on tuning seeds: (name, [(pilot CSV, lr file)], setting key). The pilot
# CSVs hold every pilot run (results.csv rows: the setting key, optimizer.lr, seed, final_loss).
PILOTED = [
    ("roles", [("pilot.csv", "lr.txt")], "model.heads"),
    ("roles_v2/width_L2", [("pilot.csv", "lr.txt")], "model.heads"),
    ("roles_v2/headsize_L2", [("pilot.csv", "lr.txt")], "model.heads"),
    ("roles_v2/width_L4", [("pilot.csv", "lr.txt")], "model.heads"),
    ("roles_v2/headsize_L4", [("pilot.csv", "lr.txt")], "model.heads"),
    ("lm_heads", [("pilot.csv", "lr.txt")], "model.heads"),
    ("lm_dk", [("pilot.csv", "lr.txt")], "model.head_dim"),
    ("scale_dv", [("pilot_scaled.csv", "lr_scaled.txt"), ("pilot_unscaled.csv", "lr_unscaled.txt")], "model.head_dim"),
    ("lm_heads_zh", [("pilot.csv", "lr.txt")], "model.heads"),
    ("lm_dk_zh", [("pilot.csv", "lr.txt")], "model.head_dim"),
] + [(f"scale_init/{arm}_dk{dk}", [("pilot.csv", "lr.txt")], "model.head_dim")
     for arm in ("scaled", "unscaled") for dk in (16, 64, 256, 1024)]
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


def lr_file(path):
    """{setting: (lr, word)} of an lr file (lines "SETTING LR interior|EDGE NEXT")."""
    out = {}
    for line in path.read_text().split("\n"):
        if line.strip():
            setting, lr, where = line.split()[:3]
            out[setting] = (float(lr), where)
    return out


def piloted_rows(root):
    rows = []
    for name, files, key in PILOTED:
        d = root / "experiments" / name
        lrs = [d / f for _, f in files]
        pilots = [d / p for p, _ in files]
        if not all(p.exists() for p in lrs):
            rows.append((name, ", ".join(f for _, f in files), "not run yet", ""))
            continue
        if not all(p.exists() for p in pilots):
            # No pilot committed: the lr files' word, which nothing here can check.
            positions, chosen = [], set()
            for p in lrs:
                for lr, where in lr_file(p).values():
                    chosen.add(lr)
                    positions.append("interior" if where == "interior" else "edge")
            rows.append((name, ", ".join(f for _, f in files) + " (no pilot CSV committed: the file's word, not checkable)",
                         "chosen: " + ", ".join(g(x) for x in sorted(chosen)),
                         summary(positions).replace(" edge", " at an edge") + " (as the lr file says)"))
            continue
        positions, grids, disagree = [], set(), []
        for (pilot, lrs_name), path in zip(files, pilots):
            with open(path, newline="") as f:
                runs = [r for r in csv.DictReader(f) if r.get("status") in ("steps", "target", "diverged")]
            for r in runs:
                r["lr"] = r["optimizer.lr"]
            choices, _ = lrsel.select_lr(runs, [key], metric="final_loss", direction="min")
            used = lr_file(d / lrs_name)
            for setting in sorted(choices, key=numeric_first):
                c = choices[setting]
                grid = sorted(float(x.lr) for x in c.candidates)
                grids.add(tuple(grid))
                positions.append(position(float(c.lr), grid))
                if setting[0] not in used or abs(used[setting[0]][0] / float(c.lr) - 1) > 1e-9:
                    disagree.append(f"{key} {setting[0]}")
        grid_text = "; ".join("{" + ", ".join(g(x) for x in grid) + "}" for grid in sorted(grids))
        note = f"; the lr file disagrees for {', '.join(disagree)}" if disagree else "; the lr files agree"
        rows.append((name, ", ".join(p for p, _ in files) + " (final validation loss, min, over the tuning seeds)",
                     grid_text, summary(positions) + note))
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
