#!/usr/bin/python3
"""Tables and figures for the experiment report from per-run CSVs (docs/experiment-method.md).

  report.py table RESULTS.csv... --metric SPEC... [--group KEYS] [--select-lr METRIC:min|max]
            [--lr-estimate all|held-out|cross-fit] [--compare BASELINE] [--test mw|perm|welch]
            [--mean-ci t|bootstrap] [--by-step N] [--out MD]
  report.py trend RESULTS.csv... --x KEY --metric SPEC... --alternative greater|less|two-sided
            --stated before|post-hoc [--within KEYS] [--by KEYS] [--select-lr ...] [--out MD]
  report.py plot-curves SWEEP... --metric NAME [--by KEYS] [--label KEY=VALUE:WORDS]... --out PNG
  report.py plot-rate RESULTS.csv... --x KEY --metric NAME:success>=X... [--series KEY] --out PNG
  report.py heatmap ATTENTION.csv [--layer NAME] [--heads 0,1] [--value-offset V] --out PNG

RESULTS.csv is a `qkv sweep` results.csv (columns run, <grid keys>, seed, status, steps,
metrics..., optionally lr, cpu, blas) or a copy of one; several are pooled. SWEEP is a sweep
directory or its results.csv; each run's curves are read from <dir>/runs/<run>/metrics.csv.
Metric SPECs name columns: NAME:mean (t 95 % CI), NAME:median (bootstrap 95 % CI, IQR),
NAME:success>=X (also >, <=, <; rate with Wilson 95 % CI), NAME:time (steps to target, -1 =
never: Kaplan-Meier fraction reached by step N and censored median). --compare 4 (or
model.heads=4) tests every setting against that one; --compare model.scale=0, naming some of the
keys, tests each setting against the one with scale 0 and the same other keys (Holm over all
tests, their number in the caption). Settings are the values of the --group keys (default: the
grid keys, without the learning rate). Only finished runs (status steps, target or diverged)
count. --lr-estimate: every seed of the chosen lr (all), only the seeds that took no part in the
choice (held-out), or each half of the seeds at the lr chosen on the other half (cross-fit): the
last two are free of the winner's curse. trend: Spearman's rho of a metric against an ordered
setting over the runs, permutation p (stratified with --within), Holm over the table's tests, and
the caption says whether the test was stated before the runs. --derive NAME=A*B (also + - /) adds
a column computed from two others (e.g. the query-key width model.heads*model.head_dim) to any
command. plot-rate draws one panel per --metric. Figures print a caption-ready description to stdout.
"""
import argparse
import csv
import math
import os
import re
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from experiments import num  # noqa: E402
from experiments import select as lrsel  # noqa: E402
from experiments import stats  # noqa: E402

FINISHED = ("steps", "target", "diverged")
OPS = {">=": lambda v, x: v >= x, ">": lambda v, x: v > x, "<=": lambda v, x: v <= x, "<": lambda v, x: v < x}
# Axis labels: prefix of a column name -> split, suffix -> quantity (with its unit).
SPLITS = {"val": "validation", "test": "test", "eval": "held-out", "train": "train", "final": "final held-out",
          "best": "best held-out"}
QUANTITIES = {"loss": "loss (nats/token)", "token_acc": "token accuracy (fraction)",
              "seq_acc": "sequence accuracy (fraction)", "bits_per_char": "bits per character",
              "steps_to_target": "steps to target", "wall_s": "wall time (s)", "tokens_per_s": "tokens per second",
              "entropy": "attention entropy (nats)", "max_weight": "largest attention weight",
              "grad_q": "gradient norm of W_q", "grad_k": "gradient norm of W_k", "redundancy": "head redundancy"}


def fail(msg):
    sys.exit(f"report.py: {msg}")


def short(key):
    return key.rsplit(".", 1)[-1]


def fmt(v, spec=".4g"):
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def spec_for(value, *others):
    """A format giving `value` 3 significant digits (e-notation below 1e-3), for it and its interval."""
    finite = [abs(x) for x in (value, *others) if x is not None and math.isfinite(x) and x != 0]
    if not finite:
        return ".4g"
    if max(finite) < 1e-3:
        return ".2e"
    ref = abs(value) if math.isfinite(value) and value else max(finite)
    return f".{min(6, max(0, 2 - math.floor(math.log10(ref))))}f"


def fmt_ci(value, low, high, spec=None):
    spec = spec or spec_for(value, low, high)
    return f"{fmt(value, spec)} [{fmt(low, spec)}, {fmt(high, spec)}]"


def axis_label(name):
    """val_loss -> 'validation loss (nats/token)'; attn.entropy -> 'attention entropy (nats), mean over layers'."""
    if name.startswith("attn.") or name.startswith("attn_"):
        return QUANTITIES.get(name[5:], name) + (", mean over layers" if name[4] == "." else "")
    split, _, rest = name.partition("_")
    if split in SPLITS and rest in QUANTITIES:
        return f"{SPLITS[split]} {QUANTITIES[rest]}"
    return QUANTITIES.get(name, name)


# ---- per-run rows --------------------------------------------------------------------------------

def read_results(paths):
    """Rows of every results.csv (a path or a directory holding one), each with _dir (the sweep
    directory, for runs/<run>/metrics.csv); and the grid keys (columns between run and seed)."""
    rows, keys = [], []
    for path in paths:
        file = os.path.join(path, "results.csv") if os.path.isdir(path) else path
        if not os.path.exists(file):
            fail(f"{file} does not exist (run `qkv sweep` first)")
        with open(file, newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            if "seed" not in header:
                fail(f"{file}: expected a results.csv with a seed column (run, <grid keys>, seed, status, ...); found {header}")
            start = 1 if header[0] == "run" else 0
            keys += [k for k in header[start:header.index("seed")] if k not in keys]
            for r in reader:
                r["_dir"] = os.path.dirname(os.path.abspath(file))
                rows.append(r)
    return rows, keys


DERIVE = re.compile(r"([A-Za-z_][\w.]*)=([A-Za-z_][\w.]*)([-+*/])([A-Za-z_][\w.]*)")


def derive(rows, specs):
    """--derive NAME=A*B (also + - /): a column computed per row from two others, e.g. the
    query-key width model.heads*model.head_dim or a gap test_loss-train_loss. Values print with
    %g (64, not 64.0); a missing or non-numeric operand gives nan."""
    ops = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
           "/": lambda x, y: x / y if y else math.nan}
    for spec in specs or []:
        m = DERIVE.fullmatch(spec.replace(" ", ""))
        if not m:
            fail(f"--derive {spec}: expected NAME=A<op>B with op one of + - * / and A, B columns")
        name, x, op, y = m.groups()
        for col in (x, y):
            need(rows, col, f"--derive {spec}")
        for r in rows:
            r[name] = format(ops[op](num(r.get(x)), num(r.get(y))), "g")
    return rows


def columns(rows):
    """Every column of the rows (files may differ), in first-seen order."""
    return [c for c in dict.fromkeys(c for r in rows for c in r) if c != "_dir"]


def need(rows, name, where):
    if rows and name not in columns(rows):
        fail(f"{where}: no column {name} in the results (columns: {columns(rows)})")


def finished(r):
    return r.get("status", "steps") in FINISHED


def apply_where(rows, specs):
    """Keep rows with KEY=V1|V2 for every spec (values compared as numbers when they are numbers)."""
    for spec in specs or []:
        key, _, vals = spec.partition("=")
        if rows and key not in columns(rows):
            fail(f"--where {spec}: no column {key} (columns: {columns(rows)})")
        allowed = vals.split("|")
        rows = [r for r in rows if any(same(r.get(key), v) for v in allowed)]
    return rows


def same(a, b):
    x, y = num(a), num(b)
    return x == y if not (math.isnan(x) or math.isnan(y)) else str(a) == str(b)


def order(settings):
    return sorted(settings, key=lambda s: tuple((0, num(v), "") if not math.isnan(num(v)) else (1, 0, v) for v in s))


def prepare(a, rows, keys):
    """Filter rows (--where), choose the lr per setting (--select-lr), group by the setting keys.
    Returns (keys, settings in order, runs by setting (finished runs of the kept lr),
    all rows by setting, choices or None, lr column or None)."""
    rows = apply_where(rows, a.where)
    lr_key = lrsel.lr_column(rows, a.lr_column)
    # The learning rate is never part of a default setting (as a column or as the grid key).
    keys = a.group.split(",") if a.group else [k for k in keys if k != "optimizer.lr"]
    keys = [k for k in keys if k != lr_key]
    for k in keys:
        need(rows, k, f"--group/--by {k}")
    choices = None
    if a.select_lr:
        metric, _, direction = a.select_lr.partition(":")
        need(rows, metric, f"--select-lr {a.select_lr}")
        if lr_key is None:
            fail(f"--select-lr: the results have no learning-rate column ({a.lr_column} or optimizer.lr)")
        done = [r for r in rows if finished(r)]
        choices, kept = lrsel.select_lr(done, keys, metric, direction or "min", lr_key)
        estimate = getattr(a, "lr_estimate", "all")
        if estimate == "held-out":  # report only the seeds that took no part in the choice
            tuning = lrsel.tuning_seeds(done, keys, lr_key)
            kept = [r for r in kept if r.get("seed") not in tuning.get(tuple(r.get(k, "") for k in keys), set())]
        elif estimate == "cross-fit":  # each half of the seeds at the lr chosen on the other half
            try:
                a.folds, kept = lrsel.select_lr_crossfit(done, keys, metric, direction or "min", lr_key)
            except ValueError as e:
                fail(f"--lr-estimate cross-fit: {e}")
        # Unfinished runs stay visible (the n column counts them), those of the chosen lr only.
        chosen = {s: c.lr for s, c in choices.items()}
        rows = kept + [r for r in rows if not finished(r) and chosen.get(tuple(r.get(k, "") for k in keys)) == r.get(lr_key)]
    by_setting, everything = {}, {}
    for r in rows:
        s = tuple(r.get(k, "") for k in keys)
        everything.setdefault(s, []).append(r)
        by_setting.setdefault(s, [])
        if finished(r):
            by_setting[s].append(r)
    return keys, order(everything), by_setting, everything, choices, lr_key


class Metric:
    """One --metric SPEC: NAME:mean | NAME:median | NAME:time | NAME:success<op>X."""

    def __init__(self, spec):
        name, _, kind = spec.rpartition(":")
        m = re.fullmatch(r"success(>=|<=|>|<)(-?[0-9.eE+-]+)", kind)
        if not name or not (kind in ("mean", "median", "time") or m):
            fail(f"--metric {spec}: expected NAME:mean, NAME:median, NAME:time or NAME:success>=X (ops >= > <= <)")
        self.name, self.kind = name, "success" if m else kind
        self.op, self.threshold = (m.group(1), float(m.group(2))) if m else (None, None)

    def values(self, runs):
        return [num(r.get(self.name)) for r in runs]

    def successes(self, runs):
        return sum(1 for v in self.values(runs) if not math.isnan(v) and OPS[self.op](v, self.threshold))

    def describe(self):
        return f"{self.name} {self.op} {self.threshold:g}" if self.kind == "success" else self.name


# ---- table ---------------------------------------------------------------------------------------

class Context:
    def __init__(self, a, everything):
        self.a = a
        steps = [num(r.get("steps")) for rs in everything.values() for r in rs if finished(r)]
        steps = [s for s in steps if not math.isnan(s)]
        self.budget = a.budget if a.budget else (max(steps) if steps else math.nan)
        self.by_step = a.by_step if a.by_step else self.budget

    def times(self, metric, runs):
        """(times, reached) for Kaplan-Meier: the step of reaching the target, else the run's last
        step (censored); a diverged run can never reach it, so it is censored at the budget."""
        times, reached = [], []
        for r in runs:
            t = num(r.get(metric.name))
            if t >= 0:
                times.append(t)
                reached.append(True)
            else:
                last = num(r.get("steps"))
                times.append(self.budget if r.get("status") == "diverged" or math.isnan(last) else last)
                reached.append(False)
        return times, reached

    def headers(self, m):
        if m.kind == "success":
            return [f"{m.describe()}: k/n = rate [95% Wilson]"]
        if m.kind == "mean":
            return [f"{m.name}: mean [95% CI]"]
        if m.kind == "median":
            return [f"{m.name}: median [95% CI] (IQR)"]
        return [f"{m.name}: reached by step {self.by_step:g} [95% CI]", f"{m.name}: median (KM)"]

    def cells(self, m, runs):
        if m.kind == "success":
            w = stats.wilson(m.successes(runs), len(runs))
            return [f"{w.k}/{w.n} = {fmt(w.p, '.3f')} [{fmt(w.low, '.3f')}, {fmt(w.high, '.3f')}]"]
        vals = m.values(runs)
        n_ok = sum(1 for v in vals if math.isfinite(v))
        note = f" (n={n_ok})" if n_ok < len(vals) else ""
        if m.kind == "mean":
            e = stats.t_interval(vals) if self.a.mean_ci == "t" else stats.bootstrap_ci(vals, "mean", seed=self.a.seed)
            return [fmt_ci(e.value, e.low, e.high) + note]
        if m.kind == "median":
            e = stats.bootstrap_ci(vals, "median", seed=self.a.seed)
            q = stats.median_iqr(vals)
            spec = spec_for(e.value, e.low, e.high)
            return [f"{fmt_ci(e.value, e.low, e.high, spec)} (IQR {fmt(q.q1, spec)} to {fmt(q.q3, spec)}){note}"]
        times, reached = self.times(m, runs)
        if not times:
            return ["n/a", "n/a"]
        f = stats.fraction_reached(times, reached, self.by_step)
        med = stats.censored_median(times, reached)
        return [f"{fmt(f.fraction, '.3f')} [{fmt(f.low, '.3f')}, {fmt(f.high, '.3f')}]",
                fmt(med.value, ".0f") if med.reached else f"> {fmt(med.value, '.0f')}"]

    def compare(self, m, runs, base):
        """(value, baseline value, test name, p) of one setting against the baseline."""
        if m.kind == "success":
            k1, k0 = m.successes(runs), m.successes(base)
            t = stats.fisher_exact(k1, len(runs) - k1, k0, len(base) - k0)
            return f"{k1}/{len(runs)}", f"{k0}/{len(base)}", "Fisher exact", t.p
        if m.kind == "time":
            (t1, r1), (t0, r0) = self.times(m, runs), self.times(m, base)
            events = [t for t, r in zip(t1 + t0, r1 + r0) if r]
            if any(t < max(events, default=-math.inf) for t, r in zip(t1 + t0, r1 + r0) if not r):
                return "-", "-", "n/a: censored before a reaching time", math.nan
            last = max(t1 + t0) + 1  # never reached: ranked after every run that reached it
            u = stats.mann_whitney([t if r else last for t, r in zip(t1, r1)], [t if r else last for t, r in zip(t0, r0)])
            m1, m0 = stats.censored_median(t1, r1), stats.censored_median(t0, r0)
            show = lambda c: fmt(c.value, ".0f") if c.reached else f"> {fmt(c.value, '.0f')}"  # noqa: E731
            return show(m1), show(m0), f"Mann-Whitney {u.method}, never-reached ranked last", u.p
        x, y = m.values(runs), m.values(base)
        centre = stats.t_interval if m.kind == "mean" else stats.median_iqr
        v1, v0 = centre(x)[0], centre(y)[0]
        if self.a.test == "perm":
            t = stats.permutation_test(x, y, seed=self.a.seed)
            return fmt(v1), fmt(v0), f"permutation ({t.method})", t.p
        if self.a.test == "welch":
            t = stats.welch_t(x, y)
            return fmt(v1), fmt(v0), t.method.replace("welch", "Welch t"), t.p
        t = stats.mann_whitney(x, y)
        return fmt(v1), fmt(v0), f"Mann-Whitney {t.method}", t.p


def parse_baseline(spec, keys):
    if "=" in spec:
        pairs = dict(item.split("=", 1) for item in spec.split(","))
        missing = [k for k in pairs if k not in keys]
        if missing:
            fail(f"--compare {spec}: {missing} are not setting keys ({keys})")
        return [pairs.get(k) for k in keys]
    vals = spec.split(",")
    if len(vals) != len(keys):
        fail(f"--compare {spec}: expected {len(keys)} value(s), one per setting key {keys}")
    return vals


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def setting_label(keys, s):
    return ", ".join(f"{short(k)}={v}" for k, v in zip(keys, s)) or "all"


def hardware(rows):
    parts = []
    for col in ("cpu", "blas"):
        vals = [r[col] for r in rows if r.get(col) not in (None, "", "nan")]
        if vals:
            counts = {v: vals.count(v) for v in dict.fromkeys(vals)}
            parts.append(f"{col}: " + "; ".join(f"{v} ({c} runs)" for v, c in counts.items()))
    return (" Ran on " + "; ".join(parts) + ".") if parts else ""


def cmd_table(a):
    rows, keys = read_results(a.results)
    rows = derive(rows, a.derive)
    keys, settings, runs, everything, choices, lr_key = prepare(a, rows, keys)
    metrics = [Metric(s) for s in a.metric]
    for m in metrics:
        need(rows, m.name, f"--metric {m.name}")
    ctx = Context(a, everything)
    head = [short(k) for k in keys] + ["n"] + (["lr"] if choices else []) + [h for m in metrics for h in ctx.headers(m)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in settings:
        done = runs[s]
        n = f"{len(done)}"
        if len(done) < len(everything[s]):
            n += f" ({len(everything[s]) - len(done)} not finished)"
        div = sum(r.get("status") == "diverged" for r in done)
        if div:
            n += f" ({div} diverged)"
        lr = [lr_cell(a, choices, s)] if choices else []
        cells = [c for m in metrics for c in (ctx.cells(m, done) if done else ["not run"] * len(ctx.headers(m)))]
        lines.append("| " + " | ".join(list(s) + [n] + lr + cells) + " |")
    notes = ["n: finished runs (seeds) per setting."]
    if choices:
        cands = sorted({c.lr for ch in choices.values() for c in ch.candidates}, key=num)
        metric, _, direction = a.select_lr.partition(":")
        notes.append(f"lr: the learning rate with the {'lowest' if direction != 'max' else 'highest'} mean {metric} "
                     "over the seeds every lr of the setting ran, chosen per setting among "
                     f"{', '.join(fmt(num(c), 'g') for c in cands)} "
                     "(ties: the lower lr); every other column is from that lr's runs.")
        estimate = getattr(a, "lr_estimate", "all")
        if estimate == "all":
            notes.append("The lr was chosen on the same seeds that are reported (a winner's curse: the chosen lr's "
                         "rates are biased upwards by the choice; --lr-estimate held-out or cross-fit removes it).")
        elif estimate == "held-out":
            notes.append("Only the seeds that took no part in the choice are reported (the seeds every lr ran chose "
                         "it; a setting where every seed ran every lr has none left and is not listed): an estimate "
                         "free of the winner's curse.")
        else:
            notes.append("Cross-fitted (free of the winner's curse): the seeds of each setting are split into two "
                         "halves by rank (1st, 3rd, ... and 2nd, 4th, ...) and each half is reported at the lr chosen on "
                         "the other half; the lr column reads 'lr of the first half / lr of the second half'.")
    kinds = {m.kind for m in metrics}
    if "success" in kinds:
        notes.append("Success rates: k of n runs, Wilson 95 % score interval.")
    if "mean" in kinds:
        notes.append("Means: " + ("Student t 95 % interval." if a.mean_ci == "t" else
                                  f"percentile bootstrap 95 % interval (10000 resamples, seed {a.seed})."))
    if "median" in kinds:
        notes.append(f"Medians: percentile bootstrap 95 % interval (10000 resamples, seed {a.seed}), IQR in parentheses.")
    if "time" in kinds:
        notes.append(f"Steps to target: Kaplan-Meier; runs that never reach it are censored at their last step "
                     f"(diverged runs at the budget, {ctx.budget:g}); the fraction reached by step {ctx.by_step:g} "
                     "has a Wilson interval when no run was censored before that step (else Greenwood, log-log); "
                     "'> N': fewer than half reached it.")
    title = f"{a.title}. " if a.title else ""
    text = "\n".join(lines) + "\n\n_" + title + " ".join(notes) + hardware([r for rs in runs.values() for r in rs]) + "_\n"
    if a.compare:
        text += "\n" + comparisons(a, ctx, keys, settings, runs, metrics)
    write_text(a, text)


def write_text(a, text):
    """A table's Markdown to --out, or to stdout without it."""
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        print(f"wrote {a.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def lr_cell(a, choices, s):
    if getattr(a, "folds", None) and s in a.folds:
        first, second = a.folds[s]
        return f"{fmt(num(first.lr), 'g')} / {fmt(num(second.lr), 'g')}"
    return fmt(num(choices[s].lr), "g") if s in choices else "-"


def comparisons(a, ctx, keys, settings, runs, metrics):
    """Each setting against its baseline: the one setting matching --compare, or, when --compare
    names only some keys (model.scale=0), the setting with those values and the same other keys."""
    want = parse_baseline(a.compare, keys)
    is_base = [s for s in settings if all(w is None or same(v, w) for v, w in zip(s, want))]
    if not is_base:
        fail(f"--compare {a.compare}: matches no setting (settings: {[setting_label(keys, s) for s in settings]})")

    def baseline_of(s):
        target = [v if w is None else w for v, w in zip(s, want)]
        return next((b for b in is_base if all(same(v, t) for v, t in zip(b, target))), None)

    # One test per column: NAME:mean and NAME:median of one column would repeat the same test.
    tested = []
    for m in metrics:
        if m.describe() not in [t.describe() for t in tested]:
            tested.append(m)
    out = []
    for s in settings:
        base = baseline_of(s)
        if s in is_base or base is None or not runs[s] or not runs[base]:
            continue
        for m in tested:
            out.append([setting_label(keys, s), setting_label(keys, base), m.describe(),
                        *ctx.compare(m, runs[s], runs[base])])
    adjusted = stats.holm([r[6] for r in out])
    lines = ["| setting | baseline | metric | value | baseline value | test | p | Holm p |", "|---|---|---|---|---|---|---|---|"]
    for r, adj in zip(out, adjusted):
        lines.append("| " + " | ".join(r[:6] + [fmt(r[6], ".3g"), fmt(adj, ".3g")]) + " |")
    m_tests = sum(1 for r in out if not math.isnan(r[6]))
    against = (f"the baseline {setting_label(keys, is_base[0])}" if len(is_base) == 1 else
               f"its baseline ({a.compare}, the other keys equal)")
    return ("\n".join(lines) + f"\n\n_Each setting against {against}, two-sided: "
            f"{m_tests} comparisons ({plural(len({r[0] for r in out}), 'setting')} x {plural(len(tested), 'metric')}"
            + (f", {len(out) - m_tests} not testable" if m_tests < len(out) else "")
            + f"); Holm p: Holm-Bonferroni adjusted over all {m_tests}. Values: success counts, means "
            "(NAME:mean) or medians; steps: censored medians._\n")


# ---- trend ---------------------------------------------------------------------------------------

def cmd_trend(a):
    """Spearman trend tests of a metric against an ordered setting, one row per metric (and per
    --by value), permutation p-values, Holm over the rows."""
    rows, keys = read_results(a.results)
    rows = derive(rows, a.derive)
    need(rows, a.x, f"--x {a.x}")
    strata = a.within.split(",") if a.within else []
    by = a.by.split(",") if a.by else []
    a.group = ",".join(dict.fromkeys([a.x] + strata + by))
    keys, settings, runs, _, choices, _ = prepare(a, rows, keys)
    metrics = [Metric(m if ":" in m else m + ":median") for m in a.metric]
    for m in metrics:
        need(rows, m.name, f"--metric {m.name}")
    if any(math.isnan(num(s[0])) for s in settings):
        fail(f"--x {a.x}: the values must be numbers (found {sorted({s[0] for s in settings})})")
    pos = {k: i for i, k in enumerate(keys)}
    groups = list(dict.fromkeys(tuple(s[pos[k]] for k in by) for s in settings))
    out = []
    for g in groups:
        mine = [s for s in settings if tuple(s[pos[k]] for k in by) == g]
        for m in metrics:
            x, y, st = [], [], []
            for s in mine:
                for r in runs[s]:
                    v = (1.0 if m.successes([r]) else 0.0) if m.kind == "success" else num(r.get(m.name))
                    if math.isnan(v):
                        continue
                    x.append(num(s[0]))
                    y.append(v)
                    st.append(tuple(s[pos[k]] for k in strata))
            rho, p = stats.spearman_test(x, y, n_perm=a.n_perm, seed=a.seed, alternative=a.alternative,
                                         strata=st if strata else None)
            per_x = []
            for xv in sorted(set(x)):
                vals = [v for v, xx in zip(y, x) if xx == xv]
                per_x.append(f"{xv:g}: {int(sum(vals))}/{len(vals)}" if m.kind == "success" else
                             f"{xv:g}: {fmt(stats.median_iqr(vals).median, '.3g')}")
            within = ""
            if strata:
                parts = []
                for sv in dict.fromkeys(st):
                    idx = [i for i, t in enumerate(st) if t == sv]
                    r_s = stats.spearman([x[i] for i in idx], [y[i] for i in idx])
                    parts.append(f"{setting_label(strata, sv)}: {fmt(r_s, '.2f')}")
                within = "; ".join(parts)
            out.append([setting_label(by, g) if by else "", m.describe() if m.kind == "success" else m.name,
                        ", ".join(per_x), str(len(x)), fmt(rho, ".3f"), within, p])
    adjusted = stats.holm([r[-1] for r in out])
    head = (["setting"] if by else []) + ["metric", f"by {short(a.x)} ({'k/n' if any(m.kind == 'success' for m in metrics) else 'median'})",
                                          "runs", "Spearman rho"] + ([f"rho within each {', '.join(map(short, strata))}"] if strata else []) \
        + [f"p ({a.alternative})", "Holm p"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r, adj in zip(out, adjusted):
        cells = ([r[0]] if by else []) + r[1:5] + ([r[5]] if strata else []) + [fmt(r[6], ".3g"), fmt(adj, ".3g")]
        lines.append("| " + " | ".join(cells) + " |")
    direction = {"greater": f"rising with {short(a.x)}", "less": f"falling with {short(a.x)}",
                 "two-sided": f"rising or falling with {short(a.x)}"}[a.alternative]
    stated = ("Stated before the runs." if a.stated == "before" else
              "Post hoc: this test was chosen after the runs had been seen, so its p-value describes these data "
              "and is not a confirmatory test.")
    notes = [f"{a.title}." if a.title else "",
             f"Trend test: Spearman's rho between {a.x} and the metric over the runs (one value per run: for "
             "success rates 1 if the run passes the threshold, else 0); alternative: the metric "
             f"{direction}; p from {a.n_perm} random permutations of the metric (seed {a.seed}), the observed order "
             "counted."]
    if strata:
        notes.append(f"Stratified by {', '.join(strata)}: rho is the mean of the within-stratum rhos weighted by "
                     "their runs, and the permutations stay within each stratum.")
    if choices:
        notes.append(f"lr chosen per setting on {a.select_lr.split(':')[0]} (the same seeds are tested).")
    m_tests = sum(1 for r in out if not math.isnan(r[6]))
    notes.append(f"Holm p: Holm-Bonferroni over the {plural(m_tests, 'test')} of this table.")
    notes.append(stated)
    write_text(a, "\n".join(lines) + "\n\n_" + " ".join(n for n in notes if n) +
               hardware([r for rs in runs.values() for r in rs]) + "_\n")


# ---- figures -------------------------------------------------------------------------------------

def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 8, "axes.titlesize": 9, "legend.fontsize": 7})
    return plt


def save(fig, a, caption):
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(a.out, dpi=a.dpi)
    print(f"wrote {a.out}", file=sys.stderr)
    print(caption)


def parse_labels(items):
    """--label KEY=VALUE:WORDS (repeatable) -> {(key, value): words}."""
    out = {}
    for item in items or []:
        m = re.fullmatch(r"([^=]+)=([^:]*):(.+)", item)
        if not m:
            fail(f"--label {item}: expected KEY=VALUE:WORDS, e.g. model.scale=0:scaled")
        out[(m.group(1), m.group(2))] = m.group(3)
    return out


def words(keys, setting, labels):
    parts = []
    for k, v in zip(keys, setting):
        hit = [w for (lk, lv), w in labels.items() if lk == k and same(lv, v)]
        parts.append(hit[0] if hit else f"{short(k)} = {v}")
    return ", ".join(parts) or "all runs"


def colours(plt, n):
    return plt.cm.tab10(range(n)) if n <= 10 else plt.cm.viridis([i / max(1, n - 1) * 0.9 for i in range(n)])


def curve(r, metric):
    """(steps, values) of one run's metrics.csv; attn.<stat> = mean over layers of <layer>.<stat>."""
    path = os.path.join(r["_dir"], "runs", r.get("run", ""), "metrics.csv")
    if not os.path.exists(path):
        return [], []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and metric.startswith("attn."):
        cols = [c for c in rows[0] if c.endswith(metric[4:]) and c != metric]
        vals = [sum(num(r[c]) for c in cols) / len(cols) if cols else math.nan for r in rows]
    elif rows and metric not in rows[0]:
        fail(f"{path}: no column {metric} (columns: {list(rows[0])})")
    else:
        vals = [num(r.get(metric)) for r in rows]
    keep = [(num(r.get("step")), v) for r, v in zip(rows, vals) if not math.isnan(v)]
    return [s for s, _ in keep], [v for _, v in keep]


def plot_runs(ax, curves, colour, label):
    """Each run's curve faint and the median over the runs bold, on ax; curves are (status,
    steps, values). The median is taken at every step any run evaluated; a run that stopped at
    the target (status "target") holds its last value after it stopped. Returns (steps, median)."""
    import numpy as np
    grid = sorted({t for _, steps, _ in curves for t in steps})
    idx = {t: j for j, t in enumerate(grid)}
    table = np.full((len(curves), len(grid)), np.nan)
    for i, (status, steps, vals) in enumerate(curves):
        ax.plot(steps, vals, color=colour, lw=0.6, alpha=0.3)
        for t, v in zip(steps, vals):
            table[i, idx[t]] = v
        if status == "target" and steps:
            table[i, idx[steps[-1]] + 1:] = vals[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # steps where every run is NaN
        med = np.nanmedian(table, axis=0)
    ax.plot(grid, med, color=colour, lw=2.2, label=label)
    return grid, med


def cmd_plot_curves(a):
    plt = pyplot()
    rows, keys = read_results(a.sweeps)
    rows = derive(rows, a.derive)
    a.group = a.by
    keys, settings, runs, _, choices, _ = prepare(a, rows, keys)
    labels = parse_labels(a.label)
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    described, total = [], 0
    for colour, s in zip(colours(plt, len(settings)), settings):
        curves = [(r, *curve(r, a.metric)) for r in runs[s]]
        curves = [c for c in curves if c[1]]
        if not curves:
            continue
        plot_runs(ax, [(r.get("status"), steps, vals) for r, steps, vals in curves], colour,
                  f"{words(keys, s, labels)} (n = {len(curves)})")
        described.append(f"{words(keys, s, labels)}: {len(curves)} runs")
        total += len(curves)
    if not described:
        fail(f"no metrics.csv with {a.metric} under the runs of {a.sweeps}")
    ax.set_xlabel("training step")
    ax.set_ylabel(a.ylabel or axis_label(a.metric))
    if a.logy:
        ax.set_yscale("log")
    title = a.title or f"{axis_label(a.metric).split(' (')[0]} during training"
    ax.set_title(title)
    ax.legend(loc="best", frameon=False)
    lr_note = "; learning rate chosen per setting on the validation split" if choices else ""
    save(fig, a, f"{title}. Faint lines: each run's {a.metric} at every evaluation ({total} runs{lr_note}); "
                 f"bold lines: the median over the runs of a setting at each step (a run that stopped at the "
                 f"target holds its last value). x: training step; y: {a.ylabel or axis_label(a.metric)}. "
                 + "; ".join(described) + ".")


def wrap(text, width_in, fontsize=9):
    """Break a title into lines that fit width_in inches at fontsize points (about 0.55 em per
    character), so that it is never clipped at the figure's edges."""
    import textwrap
    return textwrap.fill(text, max(20, int(width_in * 72 / (fontsize * 0.58))))


def cmd_plot_rate(a):
    plt = pyplot()
    rows, keys = read_results(a.results)
    rows = derive(rows, a.derive)
    metrics = [Metric(m) for m in a.metric]
    for m, spec in zip(metrics, a.metric):
        if m.kind != "success":
            fail(f"plot-rate --metric {spec}: expected NAME:success>=X (or >, <=, <)")
        need(rows, m.name, f"--metric {spec}")
    a.group = ",".join([a.x] + ([a.series] if a.series else []))
    keys, settings, runs, _, choices, _ = prepare(a, rows, keys)
    labels = parse_labels(a.label)
    numeric = all(not math.isnan(num(s[0])) for s in settings)
    xs = sorted({s[0] for s in settings}, key=num) if numeric else list(dict.fromkeys(s[0] for s in settings))
    series = list(dict.fromkeys(s[1] for s in settings)) if a.series else [None]
    panel_w = 4.4
    fig, axes = plt.subplots(1, len(metrics), figsize=(panel_w * len(metrics) + 0.4, 3.5), sharey=True, squeeze=False)
    spacing = min([num(b) - num(a_) for a_, b in zip(xs, xs[1:])] or [1]) if numeric and not a.logx else 1
    described = []
    for ax, metric in zip(axes[0], metrics):
        shown = []
        for i, (colour, g) in enumerate(zip(colours(plt, len(series)), series)):
            px, py, lo, hi = [], [], [], []
            for s in settings:
                if a.series and s[1] != g or not runs[s]:
                    continue
                w = stats.wilson(metric.successes(runs[s]), len(runs[s]))
                offset = (i - (len(series) - 1) / 2) * 0.15  # series side by side, not on top of each other
                if not numeric:
                    x = xs.index(s[0]) + offset
                else:
                    x = num(s[0]) * 2 ** offset if a.logx else num(s[0]) + offset * spacing
                px.append(x)
                py.append(w.p)
                lo.append(w.p - w.low)
                hi.append(w.high - w.p)
                # k/n beside the point, above or below by series so that labels at one x do not overlap
                ax.annotate(f"{w.k}/{w.n}", (x, w.p), textcoords="offset points", xytext=(3, (3, -9, 10)[i % 3]),
                            fontsize=6, color=colour)
                shown.append(f"{short(a.x)} {s[0]}{', ' + words([a.series], [g], labels) if a.series else ''}: "
                             f"{w.k}/{w.n} [{w.low:.2f}, {w.high:.2f}]")
            name = words([a.series], [g], labels) if a.series else None
            ax.errorbar(px, py, yerr=[lo, hi], marker="o", ms=4, lw=1, capsize=3, color=colour, label=name)
        described.append((metric.describe(), shown))
        ax.set_ylim(-0.03, 1.1)
        ax.set_xlabel(a.xlabel or short(a.x))
        if numeric and a.logx:
            ax.set_xscale("log", base=2)
        if numeric:
            ax.set_xticks([num(x) for x in xs])
            ax.set_xticklabels(xs)
            ax.minorticks_off()
        else:
            ax.set_xticks(range(len(xs)))
            ax.set_xticklabels(xs)
        if len(metrics) > 1:
            ax.set_title(wrap(metric.describe(), panel_w))
    axes[0][0].set_ylabel("fraction of runs" if len(metrics) > 1 else f"fraction of runs with {metrics[0].describe()}")
    if a.series:  # outside the last panel: never on top of a point
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    title = a.title or f"runs with {', '.join(m.describe() for m in metrics)}, by {short(a.x)}"
    if len(metrics) > 1:
        fig.suptitle(wrap(title, panel_w * len(metrics)), fontsize=9)
    else:
        axes[0][0].set_title(wrap(title, panel_w * 0.85))
    lr_note = " Learning rate chosen per setting on the validation split." if choices else ""
    what = ("; ".join(f"panel {m}: " + "; ".join(d) for m, d in described) if len(metrics) > 1 else "; ".join(described[0][1]))
    save(fig, a, f"{title}. Points: the fraction of runs of each setting that pass "
                 f"{' / '.join(m for m, _ in described)}{' (one panel each)' if len(metrics) > 1 else ''} (k/n beside "
                 f"each point); bars: Wilson 95 % intervals, which stay within [0, 1].{lr_note} " + what + ".")


def cmd_heatmap(a):
    import numpy as np
    plt = pyplot()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    need = ["layer", "head", "query", "key", "query_token", "key_token", "weight"]
    if not rows or any(c not in rows[0] for c in need):
        fail(f"{a.csv}: expected columns {need} (as `qkv attention --out` writes); found {list(rows[0]) if rows else 'no rows'}")
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    layer = a.layer or layers[-1]
    rows = [r for r in rows if r["layer"] == layer]
    if not rows:
        fail(f"{a.csv} has no layer '{layer}' (layers: {layers})")
    all_heads = sorted({int(r["head"]) for r in rows})
    heads = [int(h) for h in a.heads.split(",")] if a.heads else all_heads
    if any(h not in all_heads for h in heads):
        fail(f"--heads {a.heads}: layer {layer} has heads {all_heads}")
    Tq, Tk = max(int(r["query"]) for r in rows) + 1, max(int(r["key"]) for r in rows) + 1
    w = np.zeros((max(all_heads) + 1, Tq, Tk))
    qtok, ktok = [""] * Tq, [""] * Tk

    def name(t):
        if not a.value_offset:
            return t
        return f"v{int(t) - a.value_offset}" if int(t) >= a.value_offset else f"k{t}"

    for r in rows:
        w[int(r["head"]), int(r["query"]), int(r["key"])] = num(r["weight"])
        qtok[int(r["query"])], ktok[int(r["key"])] = name(r["query_token"]), name(r["key_token"])
    cols = min(len(heads), 4)
    nrows = (len(heads) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(2.4 * cols + 0.9, 2.4 * nrows + 0.5), squeeze=False)
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= len(heads):
            ax.axis("off")
            continue
        image = ax.imshow(w[heads[i]], vmin=0, vmax=1, cmap="magma")
        ax.set_title(f"head {heads[i]}")
        ax.set_xticks(range(Tk))
        ax.set_xticklabels(ktok, rotation=90, fontsize=6)
        ax.set_yticks(range(Tq))
        ax.set_yticklabels(qtok, fontsize=6)
        ax.set_xlabel("key token", fontsize=7)
        if i % cols == 0:
            ax.set_ylabel("query token", fontsize=7)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    title = a.title or f"attention weights of {layer}"
    fig.suptitle(title)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fig.savefig(a.out, dpi=a.dpi, bbox_inches="tight")
    print(f"wrote {a.out}", file=sys.stderr)
    print(f"{title}. Heads {', '.join(map(str, heads))} of {layer}, one example: row i is query position i, "
          f"column j key position j, labelled by their tokens; colour: the softmax weight from 0 (black) to 1 "
          f"(white), see the colour bar; each row sums to 1.")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(c, results_name, out_required=True):
        c.add_argument(results_name, nargs="+")
        c.add_argument("--where", action="append", help="only rows with KEY=V1|V2 (repeatable)")
        c.add_argument("--select-lr", metavar="METRIC:min|max", help="choose the lr per setting on this validation metric")
        c.add_argument("--lr-column", default="lr", help="the learning-rate column (default lr, else optimizer.lr)")
        c.add_argument("--title")
        c.add_argument("--out", required=out_required, help="output file" + ("" if out_required else " (default: stdout)"))
        c.add_argument("--dpi", type=int, default=110)
        c.add_argument("--derive", action="append", metavar="NAME=A*B",
                       help="a column computed from two others (ops + - * /), e.g. qk_width=model.heads*model.head_dim")

    t = sub.add_parser("table", help="Markdown table per setting, optional tests against a baseline")
    common(t, "results", out_required=False)
    t.add_argument("--group", help="setting keys, comma-separated (default: the grid keys)")
    t.add_argument("--metric", action="append", required=True, help="NAME:mean|median|time|success>=X (repeatable)")
    t.add_argument("--compare", metavar="BASELINE", help="VALUE[,VALUE] or KEY=VALUE[,KEY=VALUE]: tests against it")
    t.add_argument("--test", choices=["mw", "perm", "welch"], default="mw",
                   help="continuous metrics: Mann-Whitney U, permutation of the mean difference, or Welch t")
    t.add_argument("--mean-ci", choices=["t", "bootstrap"], default="t")
    t.add_argument("--by-step", type=float, help="N of 'reached by step N' (default: the budget)")
    t.add_argument("--budget", type=float, help="the step budget (default: the largest steps of any finished run)")
    t.add_argument("--seed", type=int, default=0, help="seed of bootstrap and permutation resampling")
    t.add_argument("--lr-estimate", choices=["all", "held-out", "cross-fit"], default="all",
                   help="with --select-lr: report every seed of the chosen lr (all), only the seeds not used to choose "
                        "it (held-out), or each half of the seeds at the lr chosen on the other half (cross-fit)")
    tr = sub.add_parser("trend", help="Spearman trend test of metrics against an ordered setting (permutation p)")
    common(tr, "results", out_required=False)
    tr.add_argument("--x", required=True, help="the ordered setting key (numbers), e.g. model.heads")
    tr.add_argument("--metric", action="append", required=True,
                    help="NAME (the run's value) or NAME:success>=X (1 if the run passes, else 0); repeatable")
    tr.add_argument("--within", help="strata keys: the trend within each (stratified permutation)")
    tr.add_argument("--by", help="keys: one test per value (e.g. arm)")
    tr.add_argument("--alternative", choices=["greater", "less", "two-sided"], required=True,
                    help="greater: the metric rises with x")
    tr.add_argument("--stated", choices=["before", "post-hoc"], required=True,
                    help="whether the test was stated before the runs; the caption says which")
    tr.add_argument("--n-perm", type=int, default=10000)
    tr.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("plot-curves", help="per-seed curves (faint) and their median (bold) per setting")
    common(c, "sweeps")
    c.add_argument("--metric", required=True, help="a metrics.csv column, or attn.<stat>")
    c.add_argument("--by", help="setting keys, comma-separated (default: the grid keys)")
    c.add_argument("--label", action="append", metavar="KEY=VALUE:WORDS", help="legend words for a value")
    c.add_argument("--ylabel")
    c.add_argument("--logy", action="store_true")
    r = sub.add_parser("plot-rate", help="success rate per setting with Wilson intervals")
    common(r, "results")
    r.add_argument("--x", required=True, help="the setting key on the x axis")
    r.add_argument("--series", help="a second key: one line per value")
    r.add_argument("--metric", action="append", required=True,
                   help="NAME:success>=X; repeatable: one panel per metric (e.g. two thresholds, test and validation)")
    r.add_argument("--label", action="append", metavar="KEY=VALUE:WORDS")
    r.add_argument("--xlabel")
    r.add_argument("--logx", action="store_true")
    h = sub.add_parser("heatmap", help="attention maps of one layer from a `qkv attention --out` CSV")
    h.add_argument("csv")
    h.add_argument("--layer", help="default: the last layer in the file")
    h.add_argument("--heads", help="comma-separated head indices (default: all)")
    h.add_argument("--value-offset", type=int, default=0, help="recall: tokens >= V are values (v0..), others keys (k..)")
    h.add_argument("--title")
    h.add_argument("--out", required=True)
    h.add_argument("--dpi", type=int, default=110)
    a = p.parse_args()
    {"table": cmd_table, "trend": cmd_trend, "plot-curves": cmd_plot_curves, "plot-rate": cmd_plot_rate, "heatmap": cmd_heatmap}[a.cmd](a)


if __name__ == "__main__":
    main()
