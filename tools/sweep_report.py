#!/usr/bin/python3
"""Turn `qkv sweep` output into Markdown tables and small PNG plots.

Reads only CSV files: <sweep>/results.csv (one row per run: run, grid keys, seed, result.csv
columns) and <sweep>/runs/<run>/metrics.csv (one row per evaluation), and the CSV written by
`qkv attention`. Needs numpy; the plot commands also need matplotlib.

  sweep_report.py table SWEEP [--metrics a,b] [--out FILE]       mean +- std per setting
  sweep_report.py curves SWEEP --metrics a,b --out PNG           held-out curves per setting
  sweep_report.py final SWEEP --x KEY --metrics a,b [--group KEY] --out PNG
                                                                 metric against the swept value
  sweep_report.py attention CSV [--layer NAME] --out PNG         every head of one layer
  sweep_report.py fill README NAME=FILE ...                      replace marked blocks

A metric named attn.<stat> in `curves` is the mean over attention layers of the metrics.csv
columns <layer>.<stat> (entropy, max_weight, grad_q, grad_k, redundancy).
"""
import argparse
import csv
import math
import os
import re
import sys

import warnings

import numpy as np

warnings.filterwarnings("ignore", message="Mean of empty slice")  # all-NaN columns (1 head: no redundancy)

# name -> (column label, multiplier, decimals or a format spec)
METRICS = {
    "final_token_acc": ("held-out token acc %", 100, 1),
    "best_token_acc": ("best held-out token acc %", 100, 1),
    "final_seq_acc": ("held-out seq acc %", 100, 1),
    "best_seq_acc": ("best held-out seq acc %", 100, 1),
    "final_loss": ("held-out loss", 1, 3),
    "train_token_acc": ("train token acc %", 100, 1),
    "steps_to_target": ("steps to 99% (reached)", 1, 0),
    "wall_s": ("wall s", 1, 0),
    "tokens_per_s": ("tokens/s", 1, 0),
    "attn_entropy": ("attn entropy (nats)", 1, 2),
    "attn_max_weight": ("attn max weight", 1, 2),
    "attn_grad_q": ("grad norm W_q", 1, ".1e"),
    "attn_grad_k": ("grad norm W_k", 1, ".1e"),
    "attn_redundancy": ("head redundancy", 1, 2),
    "eval_token_acc": ("held-out token acc", 1, 3),
    "eval_loss": ("held-out loss", 1, 3),
    "eval_seq_acc": ("held-out seq acc", 1, 3),
    "train_loss": ("train loss", 1, 3),
}
DEFAULT_METRICS = "final_token_acc,final_seq_acc,final_loss,steps_to_target,attn_entropy,attn_max_weight"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return math.nan


def short(key):
    return key.rsplit(".", 1)[-1]


class Sweep:
    """results.csv of one sweep: grid keys, and runs grouped by setting (grid values)."""

    def __init__(self, path):
        # SWEEP may join several sweep directories with '+' (same grid keys): their runs are pooled,
        # e.g. the scaled and unscaled arms of one comparison.
        self.keys, self.rows, self.settings, self.runs = None, [], [], {}
        for d in path.split("+"):
            file = os.path.join(d, "results.csv")
            if not os.path.exists(file):
                sys.exit(f"sweep_report: {file} does not exist (run `qkv sweep` first)")
            with open(file, newline="") as f:
                header = next(csv.reader(f))
            if "run" not in header or "seed" not in header:
                sys.exit(f"sweep_report: {file}: expected columns run, <grid keys>, seed, ...; found {header}")
            keys = header[1:header.index("seed")]
            if self.keys is not None and keys != self.keys:
                sys.exit(f"sweep_report: {file}: grid keys {keys} differ from {self.keys}")
            self.keys = keys
            for r in read_csv(file):
                r["_dir"] = d
                self.rows.append(r)
        for r in self.rows:
            s = tuple(r[k] for k in self.keys)
            if s not in self.runs:
                self.settings.append(s)
                self.runs[s] = []
            self.runs[s].append(r)

        def order(setting):
            return tuple(num(v) if not math.isnan(num(v)) else 0 for v in setting)
        self.settings.sort(key=order)

    def where(self, spec):
        """Keep settings matching key=v1|v2 (several specs: all must match)."""
        for item in spec or []:
            key, _, vals = item.partition("=")
            if key not in self.keys:
                sys.exit(f"sweep_report: --where {item}: {key} is not a grid key (keys: {self.keys})")
            i = self.keys.index(key)
            allowed = [num(v) for v in vals.split("|")]
            self.settings = [s for s in self.settings if num(s[i]) in allowed]

    def value(self, run, metric):
        """A result.csv column, or NAME@STEP: metrics.csv column NAME at evaluation step STEP."""
        if "@" not in metric:
            return num(run.get(metric))
        name, _, step = metric.partition("@")
        rows = self.metrics_csv(run)
        for s, v in zip(column(rows, "step"), column(rows, name)):
            if s == float(step):
                return v
        return math.nan

    def label(self, setting):
        return ", ".join(f"{short(k)}={v}" for k, v in zip(self.keys, setting)) or "all"

    def done(self, setting):
        return [r for r in self.runs[setting] if r.get("status") in ("steps", "target", "diverged")]

    def metrics_csv(self, run):
        path = os.path.join(run["_dir"], "runs", run["run"], "metrics.csv")
        return read_csv(path) if os.path.exists(path) else []


def metric_info(metric):
    """(label, multiplier, decimals); NAME@STEP is labelled "NAME at step STEP"."""
    name, _, step = metric.partition("@")
    label, mult, dec = METRICS.get(name, (name, 1, 3))
    if name.startswith("attn."):
        label, mult, dec = METRICS.get("attn_" + name[5:], (name, 1, 3))
    return (f"{label} @ step {step}" if step else label), mult, dec


def mean_std(values):
    v = np.array([x for x in values if not math.isnan(x)])
    if len(v) == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, len(v)


def fmt_cell(metric, values):
    label, mult, dec = metric_info(metric)
    if metric == "steps_to_target":
        reached = [v for v in values if v >= 0]
        if not reached:
            return f"never (0/{len(values)})"
        m, s, n = mean_std(reached)
        return f"{m:.0f} ± {s:.0f} ({n}/{len(values)})"
    m, s, n = mean_std([v * mult for v in values])
    if n == 0:
        return "n/a"
    spec = dec if isinstance(dec, str) else f".{dec}f"
    return f"{m:{spec}} ± {s:{spec}}"


def cmd_table(a):
    sw = Sweep(a.sweep)
    sw.where(a.where)
    metrics = a.metrics.split(",")
    head = [short(k) for k in sw.keys] + ["runs"] + [metric_info(m)[0] for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in sw.settings:
        done = sw.done(s)
        runs = f"{len(done)}/{len(sw.runs[s])}"
        div = sum(r["status"] == "diverged" for r in done)
        if div:
            runs += f" ({div} diverged)"
        cells = [fmt_cell(m, [sw.value(r, m) for r in done]) if done else "not run" for m in metrics]
        lines.append("| " + " | ".join(list(s) + [runs] + cells) + " |")
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 7, "axes.titlesize": 8, "legend.fontsize": 6})
    return plt


def column(rows, name):
    """Values of a metrics.csv column; attn.<stat> = mean over layers of <layer>.<stat>."""
    if name.startswith("attn."):
        stat = name[5:]
        cols = [c for c in rows[0] if c.endswith("." + stat) and c != name] if rows else []
        return [np.nanmean([num(r[c]) for c in cols]) if cols else math.nan for r in rows]
    return [num(r.get(name)) for r in rows]


def save(fig, out):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=a_dpi)
    print(f"wrote {out}")


a_dpi = 90


def finish(fig, a):
    if a.title:
        fig.suptitle(a.title)
    save(fig, a.out)


def cmd_curves(a):
    plt = pyplot()
    sw = Sweep(a.sweep)
    sw.where(a.where)
    metrics = a.metrics.split(",")
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.1 * len(metrics), 2.5), squeeze=False)
    colors = plt.cm.viridis(np.linspace(0, 0.9, max(1, len(sw.settings))))
    for ax, metric in zip(axes[0], metrics):
        for color, s in zip(colors, sw.settings):
            by_step = {}
            done = sw.done(s)
            for r in done:
                rows = sw.metrics_csv(r)
                steps, vals = column(rows, "step"), column(rows, metric)
                if r["status"] == "target" and steps:
                    # Stopped when solved: hold its last value, so the mean is not over survivors only.
                    grid = sorted({t for rr in done for t in column(sw.metrics_csv(rr), "step")})
                    extra = [t for t in grid if t > steps[-1]]
                    steps, vals = steps + extra, vals + [vals[-1]] * len(extra)
                for step, v in zip(steps, vals):
                    by_step.setdefault(step, []).append(v)
            if not by_step:
                continue
            steps = sorted(by_step)
            if metric in a.log.split(","):  # geometric mean, band of +-1 std of log10
                logs = {t: np.log10(np.maximum(by_step[t], 1e-30)) for t in steps}
                m = np.array([10 ** np.nanmean(logs[t]) for t in steps])
                sd = np.array([np.nanstd(logs[t]) for t in steps])
                lo, hi = m / 10 ** sd, m * 10 ** sd
            else:
                m = np.array([np.nanmean(by_step[t]) for t in steps])
                sd = np.array([np.nanstd(by_step[t]) for t in steps])
                lo, hi = m - sd, m + sd
            ax.plot(steps, m, color=color, lw=1, label=sw.label(s))
            if "acc" in metric:  # an accuracy band beyond [0, 1] means nothing
                lo, hi = np.clip(lo, 0, 1), np.clip(hi, 0, 1)
            ax.fill_between(steps, lo, hi, color=color, alpha=0.15, lw=0)
        ax.set_xlabel("step")
        ax.set_title(metric_info(metric)[0].replace(" %", ""))  # curves show fractions
        if metric in a.log.split(","):
            ax.set_yscale("log")
            ax.set_title(ax.get_title() + " (geometric mean)")
    axes[0][-1].legend(loc="best", ncol=1 if len(sw.settings) <= 8 else 2)
    finish(fig, a)


def cmd_final(a):
    plt = pyplot()
    sw = Sweep(a.sweep)
    sw.where(a.where)
    if a.x not in sw.keys:
        sys.exit(f"sweep_report: --x {a.x} is not a grid key of {a.sweep} (keys: {sw.keys})")
    if a.group and a.group not in sw.keys:
        sys.exit(f"sweep_report: --group {a.group} is not a grid key of {a.sweep} (keys: {sw.keys})")
    xi = sw.keys.index(a.x)
    gi = sw.keys.index(a.group) if a.group else None
    metrics = a.metrics.split(",")
    groups = []
    for s in sw.settings:
        g = s[gi] if gi is not None else ""
        if g not in groups:
            groups.append(g)
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.1 * len(metrics), 2.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        label, mult, _ = metric_info(metric)
        for g in groups:
            xs, ms, ss = [], [], []
            for s in sw.settings:
                if gi is not None and s[gi] != g:
                    continue
                vals = [sw.value(r, metric) * mult for r in sw.done(s)]
                if metric == "steps_to_target":
                    vals = [v for v in vals if v >= 0]
                m, sd, n = mean_std(vals)
                if n:
                    xs.append(num(s[xi]))
                    ms.append(m)
                    ss.append(sd)
            name = f"{short(a.group)}={g}" if a.group else None
            if a.group_labels:
                name = dict(x.split("=", 1) for x in a.group_labels.split(",")).get(g, name)
            ax.errorbar(xs, ms, yerr=ss, marker="o", ms=3, lw=1, capsize=2, label=name)
        ax.set_xlabel(short(a.x))
        ax.set_title(label)
        if a.logx:
            ax.set_xscale("log", base=2)
        if a.group:
            ax.legend(loc="best")
    finish(fig, a)


def cmd_attention(a):
    plt = pyplot()
    rows = read_csv(a.csv)
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    layer = a.layer or layers[-1]
    rows = [r for r in rows if r["layer"] == layer]
    if not rows:
        sys.exit(f"sweep_report: {a.csv} has no layer '{layer}' (layers: {layers})")
    H = max(int(r["head"]) for r in rows) + 1
    Tq = max(int(r["query"]) for r in rows) + 1
    Tk = max(int(r["key"]) for r in rows) + 1
    w = np.zeros((H, Tq, Tk))
    qtok, ktok = [""] * Tq, [""] * Tk

    def name(t):
        t = int(t)
        if a.value_offset and t >= a.value_offset:
            return f"v{t - a.value_offset}"
        return f"k{t}" if a.value_offset else str(t)

    for r in rows:
        h, i, j = int(r["head"]), int(r["query"]), int(r["key"])
        w[h, i, j] = num(r["weight"])
        qtok[i], ktok[j] = name(r["query_token"]), name(r["key_token"])
    cols = min(H, 4)
    nrows = (H + cols - 1) // cols
    size = 2.3 if H > 1 else 3.0
    fig, axes = plt.subplots(nrows, cols, figsize=(size * cols + 0.4, size * nrows + 0.3), squeeze=False)
    for h in range(nrows * cols):
        ax = axes[h // cols][h % cols]
        if h >= H:
            ax.axis("off")
            continue
        ax.imshow(w[h], vmin=0, vmax=1, cmap="magma")
        ax.set_title(f"head {h}")
        ax.set_xticks(range(Tk))
        ax.set_xticklabels(ktok, rotation=90, fontsize=6)
        ax.set_yticks(range(Tq))
        ax.set_yticklabels(qtok, fontsize=6)
        ax.tick_params(length=1, pad=1)
    fig.suptitle(a.title or f"{layer}: attention weights (rows: queries, columns: keys)")
    save(fig, a.out)


def cmd_fill(a):
    with open(a.readme) as f:
        text = f.read()
    for item in a.blocks:
        name, _, path = item.partition("=")
        with open(path) as f:
            body = f.read().rstrip("\n")
        pattern = re.compile(r"(<!-- BEGIN %s -->\n).*?(<!-- END %s -->)" % (re.escape(name), re.escape(name)), re.S)
        if not pattern.search(text):
            sys.exit(f"sweep_report: {a.readme} has no block <!-- BEGIN {name} --> ... <!-- END {name} -->")
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    with open(a.readme, "w") as f:
        f.write(text)
    print(f"filled {len(a.blocks)} block(s) of {a.readme}")


def main():
    global a_dpi
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dpi", type=int, default=90)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("sweep")
    t.add_argument("--where", action="append", help="only settings with KEY=V1|V2")
    t.add_argument("--metrics", default=DEFAULT_METRICS)
    t.add_argument("--out")
    c = sub.add_parser("curves")
    c.add_argument("sweep")
    c.add_argument("--where", action="append", help="only settings with KEY=V1|V2")
    c.add_argument("--metrics", default="eval_token_acc,eval_loss")
    c.add_argument("--log", default="", help="metrics drawn on a log y axis")
    c.add_argument("--title")
    c.add_argument("--out", required=True)
    f = sub.add_parser("final")
    f.add_argument("sweep")
    f.add_argument("--where", action="append", help="only settings with KEY=V1|V2")
    f.add_argument("--x", required=True)
    f.add_argument("--group")
    f.add_argument("--group-labels", help="value=label,... for the legend")
    f.add_argument("--metrics", default="final_token_acc")
    f.add_argument("--logx", action="store_true")
    f.add_argument("--title")
    f.add_argument("--out", required=True)
    h = sub.add_parser("attention")
    h.add_argument("csv")
    h.add_argument("--layer")
    h.add_argument("--value-offset", type=int, default=0, help="recall: tokens >= V are values (v0..), others keys")
    h.add_argument("--title")
    h.add_argument("--out", required=True)
    r = sub.add_parser("fill")
    r.add_argument("readme")
    r.add_argument("blocks", nargs="+", metavar="NAME=FILE")
    a = p.parse_args()
    a_dpi = a.dpi
    {"table": cmd_table, "curves": cmd_curves, "final": cmd_final, "attention": cmd_attention, "fill": cmd_fill}[a.cmd](a)


if __name__ == "__main__":
    main()
