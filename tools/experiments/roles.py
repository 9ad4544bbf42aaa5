#!/usr/bin/python3
"""Who and what heads (experiments/roles/README.md): role scores, head similarity and single-head
ablations of masked grammar encoders with 1 to 32 heads.

    roles.py select PILOT_DIR... [--key model.heads]
                                                   the lr of each head count, or each setting of KEY
                                                   (lowest mean final validation loss over the
                                                   tuning seeds); one line "H LR interior" or
                                                   "H LR EDGE NEXT" per setting, NEXT the
                                                   half-decade lr beyond the edge (1, 3 x 10^k)
    roles.py analyse SWEEP_DIR... --out DIR [--qkv build/qkv] [--examples 256] [--jobs 2]
    roles.py report DIR                            tables (markdown) and figures from DIR's CSVs

analyse writes, per finished run of the sweeps (its last.h5: a fixed budget, no early stopping),
appending rows for runs not yet in the files (so it resumes):
- DIR/runs.csv: run, heads, seed, lr, val/test masked loss and accuracy (`qkv eval`);
- DIR/roles.csv: per run and relation: the best head by role score, its score, the relation's
  best fixed offset (baseline), whether the best head is labelled by the relation (role score
  >= 0.5 and >= baseline + 0.1, `qkv heads`), how many heads are, and the masked accuracy on the
  relation's tokens intact, without the best head, and without a random other head (the mean over
  every other head: the expectation of a uniformly drawn one), from one `qkv ablate --relation R`
  (every head removed alone, zero ablation), all on the test split;
- DIR/pairs.csv: per run and layer, the mean Jensen-Shannon divergence between its heads (bits)
  and the share of head pairs closer than 0.1 bits (near copies), from `qkv heads --similarity`.
The tests are stated in the README before the runs; report prints them.
"""
import argparse
import concurrent.futures
import csv
import math
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments import select as lrsel  # noqa: E402
from experiments import stats  # noqa: E402
import machine  # noqa: E402

ARGUMENT_RELATIONS = ["verb->subject", "verb->object", "subject->verb", "object->verb"]
NEAR_COPY_BITS = 0.1


def fail(msg):
    print(f"roles.py: {msg}", file=sys.stderr)
    sys.exit(2)


def qkv(binary, *args):
    r = subprocess.run([binary, *args, "--threads", "1"], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"qkv {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def sweep_rows(dirs):
    rows = []
    for d in dirs:
        file = Path(d) / "results.csv"
        if not file.exists():
            fail(f"{file} does not exist (run the sweep first)")
        for r in read_csv(file):
            r["_dir"] = str(d)
            rows.append(r)
    return rows


# ---- select ----

def half_decade(lr, up):
    """The next lr of the ladder 1, 3, 10, 30 ... x 10^k above (up) or below lr."""
    k = math.floor(math.log10(lr) + 1e-9)
    ladder = [m * 10.0 ** e for e in (k - 1, k, k + 1) for m in (1, 3)]
    return min(v for v in ladder if v > lr * 1.01) if up else max(v for v in ladder if v < lr / 1.01)


def cmd_select(a):
    rows = [r for r in sweep_rows(a.pilot) if r.get("status") in ("steps", "target", "diverged")]
    for r in rows:
        r["lr"] = r["optimizer.lr"]
    choices, _ = lrsel.select_lr(rows, [a.key], metric="final_loss", direction="min")
    for setting in sorted(choices, key=lambda s: float(s[0])):
        c = choices[setting]
        lrs = sorted(float(x.lr) for x in c.candidates)
        lr = float(c.lr)
        if lrs and lrs[0] < lr < lrs[-1]:
            print(f"{setting[0]} {c.lr} interior")
        else:
            print(f"{setting[0]} {c.lr} EDGE {half_decade(lr, up=lr >= lrs[-1]):g}")


# ---- analyse ----

def config_lr(run_dir):
    """optimizer.lr of a run's resolved config.yaml (a sweep given --set optimizer.lr has no column of it)."""
    section = ""
    for line in open(run_dir / "config.yaml"):
        if line and not line[0].isspace():
            section = line.split(":")[0]
        elif section == "optimizer" and line.strip().startswith("lr:"):
            return line.split(":", 1)[1].strip()
    fail(f"{run_dir / 'config.yaml'}: no optimizer.lr")


def analyse_run(a, row):
    run_dir = Path(row["_dir"]) / "runs" / row["run"]
    ck = str(run_dir / "last.h5")
    heads, seed = int(row["model.heads"]), int(row["seed"])
    out = {"runs": [], "roles": [], "pairs": []}
    ev = qkv(a.qkv, "eval", ck)
    vals = {}
    for line in ev.splitlines():
        parts = line.split()
        if line.strip().startswith("masked loss"):
            vals["val_loss"], vals["test_loss"] = float(parts[-2]), float(parts[-1])
        if line.strip().startswith("masked accuracy"):
            vals["val_acc"], vals["test_acc"] = float(parts[-2].rstrip("%")) / 100, float(parts[-1].rstrip("%")) / 100
    out["runs"].append({"run": row["run"], "heads": heads, "seed": seed, "lr": row.get("optimizer.lr") or config_lr(run_dir), **vals})
    with tempfile.TemporaryDirectory() as d:
        scores, sim = Path(d) / "heads.csv", Path(d) / "sim.csv"
        qkv(a.qkv, "heads", ck, "--examples", str(a.examples), "--csv", str(scores), "--similarity", str(sim))
        head_rows = read_csv(scores)
        sim_rows = read_csv(sim)
        baseline = next(r for r in head_rows if r["layer"] == "baseline")
        head_rows = [r for r in head_rows if r["layer"] != "baseline"]
        for relation in [k for k in baseline if "->" in k and "@" not in k]:  # the every-token scores (v1)
            scored = [(float(r[relation]), f"{r['layer_index']}.{r['head']}", r["label"]) for r in head_rows if r[relation] != ""]
            if not scored:
                continue
            best_score, best, best_label = max(scored, key=lambda x: x[0])
            ablation = Path(d) / "ablate.csv"
            qkv(a.qkv, "ablate", ck, "--relation", relation, "--examples", str(a.examples), "--csv", str(ablation))
            abl = read_csv(ablation)
            acc = {f"{r['layer']}.{r['head']}": float(r["token_accuracy"]) for r in abl}
            intact = float(abl[0]["token_accuracy"]) - float(abl[0]["accuracy_change"])
            others = [v for k, v in acc.items() if k != best]
            out["roles"].append({
                "run": row["run"], "heads": heads, "seed": seed, "relation": relation, "best_head": best,
                "best_score": best_score, "baseline": float(baseline[relation]),
                "labelled": int(best_label == relation), "heads_labelled": sum(r["label"] == relation for r in head_rows),
                "intact_acc": intact, "best_ablated_acc": acc[best],
                "random_ablated_acc": sum(others) / len(others) if others else math.nan})
        by_layer = defaultdict(list)
        for r in sim_rows:
            by_layer[r["layer"]].append(float(r["js_bits"]))
        for layer, js in by_layer.items():
            out["pairs"].append({"run": row["run"], "heads": heads, "seed": seed, "layer": layer,
                                 "mean_js_bits": sum(js) / len(js), "near_copies": sum(v < NEAR_COPY_BITS for v in js) / len(js)})
    return out


def append(path, rows):
    if not rows:
        return
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        if new:
            w.writeheader()
        w.writerows(rows)


def cmd_analyse(a):
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    done = {r["run"] + "@" + str(r["heads"]) for r in read_csv(out / "runs.csv")} if (out / "runs.csv").exists() else set()
    rows = [r for r in sweep_rows(a.sweeps) if r.get("status") in ("steps", "target")]
    todo = [r for r in rows if r["run"] + "@" + r["model.heads"] not in done]
    print(f"roles.py: {len(rows)} finished runs, {len(todo)} to analyse", file=sys.stderr)
    name, flags = machine.cpu_info()
    cpu = f"{name} ({machine.isa(flags)})"
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for result in pool.map(lambda r: analyse_run(a, r), todo):
            for r in result["runs"]:
                r["cpu"] = cpu
            # Roles and pairs before runs: a run is done once its runs.csv row is written.
            append(out / "roles.csv", result["roles"])
            append(out / "pairs.csv", result["pairs"])
            append(out / "runs.csv", result["runs"])


# ---- report ----

def mean_ci(values):
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return "-"
    if len(v) < 2:
        return f"{v[0]:.3f}"
    m, lo, hi = stats.t_interval(v)[:3]
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]"


def cmd_report(a):
    d = Path(a.dir)
    runs, roles, pairs = read_csv(d / "runs.csv"), read_csv(d / "roles.csv"), read_csv(d / "pairs.csv")
    done = {r["run"] + "@" + r["heads"] for r in runs}
    roles = [r for r in roles if r["run"] + "@" + r["heads"] in done]
    pairs = [r for r in pairs if r["run"] + "@" + r["heads"] in done]
    hs = sorted({int(r["heads"]) for r in runs})
    cpus = sorted({r.get("cpu", "") for r in runs} - {""})
    counts = ", ".join(f"h = {h}: {sum(int(r['heads']) == h for r in runs)}" for h in hs)
    print(f"{len(runs)} runs ({counts})"
          + (f"; CPU: {', '.join(cpus)}" if cpus else ""))
    print()
    # Per run: how many argument relations have a labelled head, and the near-copy share.
    labelled = defaultdict(int)
    for r in roles:
        if r["relation"] in ARGUMENT_RELATIONS:
            labelled[r["run"] + "@" + r["heads"]] += int(r["labelled"])
    copies = defaultdict(list)
    for r in pairs:
        copies[r["run"] + "@" + r["heads"]].append(float(r["near_copies"]))
    print("| h | lr | test masked accuracy | argument relations with a labelled head (of 4) | "
          + " | ".join(f"best {rel} score" for rel in ARGUMENT_RELATIONS) + " | near-copy pairs (JS < 0.1 bit) |")
    print("|---" * (5 + len(ARGUMENT_RELATIONS)) + "|")
    for h in hs:
        rs = [r for r in runs if int(r["heads"]) == h]
        keys = [r["run"] + "@" + r["heads"] for r in rs]
        cells = [str(h), rs[0]["lr"], mean_ci([float(r["test_acc"]) for r in rs]), mean_ci([labelled[k] for k in keys])]
        for rel in ARGUMENT_RELATIONS:
            cells.append(mean_ci([float(r["best_score"]) for r in roles if int(r["heads"]) == h and r["relation"] == rel]))
        cells.append(mean_ci([sum(copies[k]) / len(copies[k]) for k in keys if copies[k]]) if h > 1 else "-")
        print("| " + " | ".join(cells) + " |")
    base = {rel: mean_ci([float(r["baseline"]) for r in roles if r["relation"] == rel]) for rel in ARGUMENT_RELATIONS}
    print("\nBest fixed offset (baseline) per relation, mean over runs: "
          + ", ".join(f"{rel} {v}" for rel, v in base.items()) + ". Mean [t 95%] over seeds.\n")

    # T1: more heads, more relations with a head of their own.
    x = [int(r["heads"]) for r in runs]
    y = [labelled[r["run"] + "@" + r["heads"]] for r in runs]
    rho, p = stats.spearman_test(x, y, alternative="greater")
    print(f"- **T1** (more heads give more relations a head of their own): Spearman rho(h, relations labelled) = "
          f"{rho:.3f}, one-sided permutation p = {p:.4f} (n = {len(x)} runs).")
    # T2: more heads, more near copies.
    xs = [int(r["heads"]) for r in runs if int(r["heads"]) > 1 and copies[r["run"] + "@" + r["heads"]]]
    ys = [sum(copies[r["run"] + "@" + r["heads"]]) / len(copies[r["run"] + "@" + r["heads"]])
          for r in runs if int(r["heads"]) > 1 and copies[r["run"] + "@" + r["heads"]]]
    rho2, p2 = stats.spearman_test(xs, ys, alternative="greater")
    print(f"- **T2** (more heads give more copies): Spearman rho(h, share of near-copy head pairs) = {rho2:.3f}, "
          f"one-sided permutation p = {p2:.4f} (n = {len(xs)} runs with h >= 2).")
    # T3: removing a relation's labelled head hurts that relation's tokens more than a random head.
    diffs = [float(r["random_ablated_acc"]) - float(r["best_ablated_acc"]) for r in roles
             if int(r["labelled"]) and not math.isnan(float(r["random_ablated_acc"]))]
    w, n, p3 = stats.wilcoxon_signed_rank(diffs, alternative="greater")
    if diffs:
        m, lo, hi = stats.bootstrap_ci(diffs, n_boot=10000, seed=0)[:3]
        print(f"- **T3** (a relation's labelled head matters more for that relation's tokens than a random head): "
              f"accuracy without a random other head minus without the labelled head, mean {100 * m:.2f} points "
              f"[bootstrap 95% {100 * lo:.2f}, {100 * hi:.2f}] over {len(diffs)} (run, relation) pairs; Wilcoxon "
              f"signed-rank W+ = {w:.1f}, n = {n}, one-sided p = {p3:.4g}.")
        print()
        print("| relation | pairs | intact | without the labelled head | without a random head |")
        print("|---|---|---|---|---|")
        for rel in sorted({r["relation"] for r in roles}):
            sel = [r for r in roles if r["relation"] == rel and int(r["labelled"])]
            if sel:
                print(f"| {rel} | {len(sel)} | {mean_ci([float(r['intact_acc']) for r in sel])} | "
                      f"{mean_ci([float(r['best_ablated_acc']) for r in sel])} | "
                      f"{mean_ci([float(r['random_ablated_acc']) for r in sel])} |")
    else:
        print("- **T3**: no (run, relation) pair has a labelled head; nothing to test.")
    if a.plot:
        plot(d, hs, runs, roles, copies)


def plot(d, hs, runs, roles, copies):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for rel in ARGUMENT_RELATIONS:
        means = [sum(float(r["best_score"]) for r in roles if int(r["heads"]) == h and r["relation"] == rel) /
                 max(1, sum(1 for r in roles if int(r["heads"]) == h and r["relation"] == rel)) for h in hs]
        axes[0].plot(hs, means, marker="o", label=rel)
        base = [float(r["baseline"]) for r in roles if r["relation"] == rel]
        axes[0].axhline(sum(base) / len(base), linestyle=":", linewidth=0.8, color=axes[0].lines[-1].get_color())
    axes[0].set_xscale("log", base=2)
    axes[0].set_xlabel("heads per layer (width 64)")
    axes[0].set_ylabel("best head's role score (dotted: best fixed offset)")
    axes[0].legend(fontsize=8)
    share = [[sum(copies[r["run"] + "@" + r["heads"]]) / len(copies[r["run"] + "@" + r["heads"]])
              for r in runs if int(r["heads"]) == h and copies[r["run"] + "@" + r["heads"]]] for h in hs if h > 1]
    axes[1].boxplot(share, labels=[str(h) for h in hs if h > 1])
    axes[1].set_xlabel("heads per layer")
    axes[1].set_ylabel("share of head pairs closer than 0.1 bit")
    fig.suptitle("Who / what heads in masked grammar encoders (test split)")
    fig.tight_layout()
    fig.savefig(d / "roles.png", dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("select")
    s.add_argument("pilot", nargs="+")
    s.add_argument("--key", default="model.heads", help="the setting each lr is chosen for (a sweep column)")
    s = sub.add_parser("analyse")
    s.add_argument("sweeps", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--qkv", default="build/qkv")
    s.add_argument("--examples", type=int, default=256)
    s.add_argument("--jobs", type=int, default=2)
    s = sub.add_parser("report")
    s.add_argument("dir")
    s.add_argument("--plot", action="store_true")
    a = ap.parse_args()
    {"select": cmd_select, "analyse": cmd_analyse, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
