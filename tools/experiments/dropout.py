#!/usr/bin/python3
"""The dropout figure (experiments/dropout/README.md): test and train bits per char against the
dropout rate p, residual and attention arms, at the best checkpoint (by validation) and at the
last one (no early stopping). Each run's lr is the one its setting chose on validation loss.

    dropout.py DIR --out dropout.png

DIR holds residual_{best,last}.csv and attention_{best,last}.csv (score.py --train). Seeds are
faint points, the mean bold with its t 95% interval.
"""
import argparse
import collections
import csv
import math
import statistics
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def rows_by_setting(path, key):
    """{p: rows of the lr with the lowest mean val_loss at that p}; p = 0 rows have key 0."""
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in csv.DictReader(open(path)):
        by[float(r[key])][float(r["lr"])].append(r)
    out = {}
    for p, lrs in by.items():
        lr = min(sorted(lrs), key=lambda v: statistics.mean(float(r["val_loss"]) for r in lrs[v]))
        out[p] = lrs[lr]
    return out


def mean_ci(values):
    m = statistics.mean(values)
    if len(values) < 2:
        return m, 0.0
    return m, T975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, ck, title in zip(axes, ["best", "last"], ["best checkpoint (early stopping by validation)",
                                                      "last checkpoint (2000 steps, no early stopping)"]):
        residual = rows_by_setting(a.dir / f"residual_{ck}.csv", "model.dropout")
        attention = rows_by_setting(a.dir / f"attention_{ck}.csv", "model.attn_dropout")
        attention[0.0] = residual[0.0]  # p = 0 is one setting: no dropout anywhere
        for arm, data, colour in [("residual dropout", residual, "C0"), ("attention dropout", attention, "C1")]:
            ps = sorted(data)
            for metric, style, word in [("test_bits_per_char", "-", "test"), ("train_bits_per_char", "--", "train")]:
                ms, cis = [], []
                for p in ps:
                    v = [float(r[metric]) for r in data[p]]
                    ax.scatter([p] * len(v), v, color=colour, alpha=0.25, s=12)
                    m, ci = mean_ci(v)
                    ms.append(m), cis.append(ci)
                ax.errorbar(ps, ms, yerr=cis, color=colour, linestyle=style, linewidth=2, capsize=3,
                            label=f"{arm}, {word}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("dropout rate p")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("bits per char (lower is better)")
    axes[1].legend(fontsize=8)
    fig.suptitle("Dropout on a 66,000-character slice of fortunes: test against train (3 seeds, mean and 95% CI)")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"![dropout]({a.out.name})")


if __name__ == "__main__":
    main()
