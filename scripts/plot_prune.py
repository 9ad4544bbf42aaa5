#!/usr/bin/python3
"""Draw the pruning curve of `qkv ablate CKPT --prune` (Michel et al. 2019, figure 3 style).

Usage: plot_prune.py CSV PNG CKPT

`qkv ablate CKPT --prune --plot out.png` writes CSV (src/app/instruments.cpp) and then runs this
script. The CSV has the header

    removed,fraction,loss,token_accuracy,sequence_accuracy,heads

and one row per point of the curve: `removed` heads removed so far (0 = the intact model),
`fraction` of all heads, the held-out loss and accuracies (accuracies in [0, 1]), and `heads`,
the removed heads as "layer.head" separated by spaces, in removal order.

The figure: x = fraction of heads removed; token accuracy (and sequence accuracy, dotted) on the
left axis, loss on the right axis; each point is labelled with the head removed last when there
are few enough points to read them. The title names the checkpoint. Headless (matplotlib Agg).

Exit status: 0 on success, 2 when the CSV is missing or malformed (the message names the file
and what was expected), 1 when the PNG cannot be written.
"""
import csv
import math
import os
import sys

HEADER = ["removed", "fraction", "loss", "token_accuracy", "sequence_accuracy", "heads"]
MAX_LABELLED_POINTS = 24


class CsvError(Exception):
    pass


def read_curve(path):
    """The rows of the pruning CSV at `path` as dicts; CsvError naming the file and the problem."""
    if not os.path.exists(path):
        raise CsvError(f"{path}: no such file (expected the CSV that 'qkv ablate --prune' writes)")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CsvError(f"{path}: cannot read it as CSV: {e}")
    if not rows:
        raise CsvError(f"{path}: the file is empty; expected the header {','.join(HEADER)}")
    if [c.strip() for c in rows[0]] != HEADER:
        raise CsvError(f"{path}:1: expected the header {','.join(HEADER)}, found {','.join(rows[0]) or '(an empty line)'}")
    points = []
    for n, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(HEADER):
            raise CsvError(f"{path}:{n}: expected {len(HEADER)} fields ({','.join(HEADER)}), found {len(row)}")
        p = {}
        try:
            p["removed"] = int(row[0])
        except ValueError:
            raise CsvError(f"{path}:{n}: removed: expected a whole number, found '{row[0]}'")
        for i, name in enumerate(HEADER[1:5], start=1):
            try:
                p[name] = float(row[i])
            except ValueError:
                raise CsvError(f"{path}:{n}: {name}: expected a number, found '{row[i]}'")
        if p["removed"] < 0 or not 0.0 <= p["fraction"] <= 1.0:
            raise CsvError(f"{path}:{n}: expected removed >= 0 and fraction in [0, 1], found {row[0]} and {row[1]}")
        for name in ("token_accuracy", "sequence_accuracy"):
            if not (math.isnan(p[name]) or 0.0 <= p[name] <= 1.0):
                raise CsvError(f"{path}:{n}: {name}: expected a share in [0, 1], found {row[HEADER.index(name)]}")
        p["heads"] = row[5].split()
        if len(p["heads"]) != p["removed"]:
            raise CsvError(f"{path}:{n}: heads: expected {p['removed']} heads (the 'removed' column), found {len(p['heads'])}: '{row[5]}'")
        points.append(p)
    if not points:
        raise CsvError(f"{path}: expected at least one row after the header, found none")
    return points


def plot(points, png, checkpoint):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [p["fraction"] for p in points]
    acc = [100 * p["token_accuracy"] for p in points]
    seq = [100 * p["sequence_accuracy"] for p in points]
    loss = [p["loss"] for p in points]
    total = round(points[-1]["removed"] / points[-1]["fraction"]) if points[-1]["fraction"] > 0 else None

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    ax.plot(x, acc, "o-", color="tab:blue", label="token accuracy")
    ax.plot(x, seq, "s:", color="tab:cyan", markersize=4, label="sequence accuracy")
    ax.axhline(acc[0], color="tab:blue", linewidth=0.8, linestyle="--", alpha=0.5)
    ax.set_xlabel("fraction of heads removed" + (f" (of {total})" if total else ""))
    ax.set_ylabel("held-out accuracy (%)", color="tab:blue")
    ax.tick_params(axis="y", labelcolor="tab:blue")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-2, 102)
    ax.grid(True, alpha=0.3)

    ax2 = ax.twinx()
    ax2.plot(x, loss, "^-", color="tab:red", markersize=5, label="loss")
    ax2.set_ylabel("held-out loss", color="tab:red")
    ax2.tick_params(axis="y", labelcolor="tab:red")

    if len(points) <= MAX_LABELLED_POINTS:
        for p, xi, yi in zip(points, x, acc):
            if p["heads"]:
                ax.annotate(p["heads"][-1], (xi, yi), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)

    lines = ax.get_lines()[:2] + ax2.get_lines()
    ax.legend(lines, [l.get_label() for l in lines], loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3,
              fontsize=8, frameon=False)
    ax.set_title(f"Pruning heads by importance (Michel et al. 2019)\n{checkpoint}", fontsize=10)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) != 4:
        print("usage: plot_prune.py CSV PNG CKPT (the CSV of 'qkv ablate CKPT --prune --csv CSV')", file=sys.stderr)
        return 2
    csv_path, png, checkpoint = argv[1:]
    try:
        points = read_curve(csv_path)
    except CsvError as e:
        print(f"plot_prune.py: {e}", file=sys.stderr)
        return 2
    try:
        plot(points, png, checkpoint)
    except OSError as e:
        print(f"plot_prune.py: cannot write {png}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
