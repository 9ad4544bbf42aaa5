#!/usr/bin/python3
"""Score every finished run of one or more `qkv sweep` directories on the **test split**, into
one per-run CSV (docs/experiment-method.md): the table the experiment reports are made from.

    score.py SWEEP_DIR... --out RUNS.csv [--heads HEADS.csv] [--prune] [--tolerance 0.01] [--train] [--swap]
             [--checkpoint best.h5|last.h5]
             [--label KEY=VALUE]... [--columns KEY,...] [--keep OLD.csv] [--jobs 2] [--qkv build/qkv]

Per run (a row of SWEEP_DIR/results.csv whose status is steps, target or diverged), with the best
checkpoint by validation token accuracy (`best.h5`; `--checkpoint last.h5`: the last, no early
stopping):
- `qkv eval`: val_loss, val_token_acc, val_seq_acc and test_loss, test_token_acc, test_seq_acc
  (plus *_bits_per_char for text); the validation split chose the checkpoint and the lr, the
  test split is only reported; `--train` adds train_* (`qkv eval --train`: the start of the
  training stream, the fixed set when task.train_size > 0) for train/test gaps;
- `--prune`: `qkv ablate --prune` (Michel et al. 2019: heads removed one at a time, least
  important first, importance measured on the validation split) gives heads_total and
  heads_removable, the most heads removed with test token accuracy within --tolerance of the
  intact model's (for text, test loss within --tolerance bits per char), and their fraction;
- `--swap`: `qkv swap` (recall models: the queried value replaced in the context) gives
  swap_intact, swap_follow and swap_stay;
- `--heads FILE`: `qkv heads` (pattern scores of every head on test examples) into FILE, one row
  per run and head.
`--label arm=compensated` adds a column, `--columns model.heads,model.value_dim` one per config key
(read from each run's resolved config.yaml), right after `run`, so report.py takes them for grid
keys: sweeps whose settings live in `set:` rather than `grid:` can then be pooled with others.
Every row also gets lr (the run's optimizer.lr), commit (the binary's: its name qkv-HASH, else the
repository's HEAD), cpu (vendor, family and model, as `qkv info` names them), isa and blas.
`--keep OLD.csv` adds OLD.csv's rows for the settings and seeds not scored now (runs scored in an
earlier session, whose sweep directories are gone), before the new rows; a run scored now replaces
its old row.
Runs are scored --jobs at a time, each on one thread.
"""
import argparse
import concurrent.futures
import csv
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments import provenance  # noqa: E402

FINISHED = ("steps", "target", "diverged")
EVAL_ROWS = {"loss (nats/token)": "loss", "token accuracy": "token_acc", "sequence accuracy": "seq_acc",
             "bits/char": "bits_per_char", "perplexity": "perplexity",
             # masked models (task.objective masked): the chosen positions only
             "masked loss (nats/token)": "loss", "masked accuracy": "token_acc"}


def run_qkv(binary, *args, threads=True):
    r = subprocess.run([binary, *args, *(["--threads", "1"] if threads else [])], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"qkv {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def parse_eval(out):
    """`qkv eval` prints one row per metric with a validation and a test column ([train,]
    validation, test with --train)."""
    got, prefixes = {}, None
    for line in out.splitlines():
        words = line.split()
        if prefixes is None and words and words[-2:] == ["validation", "test"]:
            prefixes = {"train": "train_", "validation": "val_", "test": "test_"}
            prefixes = [prefixes[w] for w in words]
            continue
        m = re.match(r"\s+(\S.*?)\s{2,}((?:\s*(?:-?[\d.]+|nan)%?)+)\s*$", line)
        if not prefixes or not m or m.group(1) not in EVAL_ROWS:
            continue
        cells = m.group(2).split()
        for prefix, cell in zip(prefixes, cells):
            scale = 0.01 if cell.endswith("%") else 1.0
            got[prefix + EVAL_ROWS[m.group(1)]] = float(cell.rstrip("%")) * scale
    if "test_loss" not in got:
        raise RuntimeError(f"cannot read qkv eval's output:\n{out}")
    return got


def resolved_config(run_dir):
    """{"section.key": "value"} of the run's config.yaml (qkv's resolved config: top-level scalars and
    one level of sections, values as written, strings unquoted)."""
    out, section = {}, ""
    for line in (run_dir / "config.yaml").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip().strip('"')
        if not line.startswith(" "):
            section = key if not value else ""
            if value:
                out[key] = value
        else:
            out[f"{section}.{key}"] = value
    return out


def prune(binary, ck, tolerance, text_task):
    """(heads_total, heads_removable) from `qkv ablate --prune`'s CSV: removed, loss, token_accuracy."""
    rows = csv_of(binary, "ablate", ck, "--prune")
    intact = next(r for r in rows if int(r["removed"]) == 0)
    total = max(int(r["removed"]) for r in rows)
    ok = 0
    for r in sorted(rows, key=lambda r: int(r["removed"])):
        if text_task:
            within = (float(r["loss"]) - float(intact["loss"])) / math.log(2) <= tolerance
        else:
            within = float(r["token_accuracy"]) >= float(intact["token_accuracy"]) - tolerance
        if not within:
            break
        ok = int(r["removed"])
    return total, ok


def score(a, sweep_row, run_dir):
    ck = str(run_dir / a.checkpoint)
    config = resolved_config(run_dir)
    row = {"run": sweep_row["run"], **{k: config[k] for k in a.columns}, **sweep_row}
    row["lr"] = float(config["optimizer.lr"])
    row.update(parse_eval(run_qkv(a.qkv, "eval", ck, *(["--train"] if a.train else []))))
    if a.swap:
        out = run_qkv(a.qkv, "swap", ck)
        for key, label in [("swap_intact", "right before the swap"), ("swap_follow", "follow the new value"),
                           ("swap_stay", "stay with the old value")]:
            row[key] = float(re.search(re.escape(label) + r"\s+([\d.]+)%", out).group(1)) / 100
    heads = []
    if a.prune:
        total, ok = prune(a.qkv, ck, a.tolerance, "test_bits_per_char" in row)
        row.update(heads_total=total, heads_removable=ok, removable_fraction=ok / total if total else math.nan)
    if a.heads:
        settings = {k: v for k, v in sweep_row.items() if k in a.setting_keys}
        for h in csv_of(a.qkv, "heads", ck):
            heads.append({"run": sweep_row["run"], **settings, "lr": row["lr"], **h})
    return row, heads


def csv_of(binary, command, ck, *args):
    """The rows of the CSV that `qkv COMMAND ck ARGS --csv FILE` writes."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "out.csv"
        run_qkv(binary, command, ck, *args, "--csv", str(path))
        return list(csv.DictReader(open(path)))


def keep_rows(path, key_fields, new_rows):
    """The rows of an earlier scoring whose setting and seed (key_fields: run, columns, grid keys,
    seed) none of new_rows has: runs scored before, kept with their own cpu, isa and blas."""
    if not path.exists():
        sys.exit(f"score.py: --keep {path} not found")
    old = list(csv.DictReader(open(path, newline="")))
    missing = [k for k in key_fields + ["cpu"] if old and k not in old[0]]
    if missing:
        sys.exit(f"score.py: --keep {path} has no column {', '.join(missing)} (a score.py CSV of the same sweeps?)")
    seen = {tuple(str(r[k]) for k in key_fields) for r in new_rows}
    return [r for r in old if tuple(r[k] for k in key_fields) not in seen]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--heads", type=Path)
    ap.add_argument("--prune", action="store_true")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--swap", action="store_true")
    ap.add_argument("--checkpoint", default="best.h5", help="best.h5 (default) or last.h5")
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--columns", type=lambda v: [k for k in v.split(",") if k], default=[])
    ap.add_argument("--keep", type=Path, metavar="OLD.csv",
                    help="keep OLD.csv's rows (an earlier scoring, e.g. runs whose sweep directories were on another machine) "
                         "for every setting and seed not scored now; OLD.csv may be --out")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--qkv", default=str(Path(__file__).resolve().parents[2] / "build" / "qkv"))
    a = ap.parse_args()

    work = []
    for sweep in a.sweeps:
        results = sweep / "results.csv"
        if not results.exists():
            sys.exit(f"score.py: {results} not found (a `qkv sweep` directory?)")
        rows = list(csv.DictReader(open(results)))
        labels = dict(item.split("=", 1) for item in a.label)
        rows = [{"run": r["run"], **labels, **{k: v for k, v in r.items() if k != "run"}} for r in rows]
        for r in rows:
            if r["status"] in FINISHED and (sweep / "runs" / r["run"] / "best.h5").exists():
                work.append((r, sweep / "runs" / r["run"]))
            else:
                print(f"score.py: skipping {sweep}/runs/{r['run']} (status {r['status']})", file=sys.stderr)
    if not work:
        sys.exit("score.py: no finished runs")
    keys = list(work[0][0])
    a.setting_keys = set(keys[1:keys.index("seed") + 1]) | set(a.columns)
    if a.keep:  # check OLD.csv before the scoring, which takes minutes
        keep_rows(a.keep, ["run", *sorted(a.setting_keys)], [])

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        scored = list(pool.map(lambda w: score(a, *w), work))

    hw = {"commit": provenance.binary_commit(a.qkv), **provenance.machine_columns(a.qkv)}
    fields = []
    for row, _ in scored:
        fields += [k for k in row if k not in fields]
    new_rows = [{**row, **hw} for row, _ in scored]
    kept = keep_rows(a.keep, fields[:fields.index("seed") + 1], new_rows) if a.keep else []
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields + list(hw), restval="nan", extrasaction="ignore")
        w.writeheader()
        for row in kept + new_rows:
            w.writerow(row)
    print(f"score.py: {len(scored)} runs -> {a.out}" + (f" (and {len(kept)} kept from {a.keep})" if a.keep else ""))
    if a.heads:
        heads = [h for _, hs in scored for h in hs]
        with open(a.heads, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(heads[0]) + list(hw))
            w.writeheader()
            for h in heads:
                w.writerow({**h, **hw})
        print(f"score.py: {len(heads)} heads -> {a.heads}")


if __name__ == "__main__":
    main()
