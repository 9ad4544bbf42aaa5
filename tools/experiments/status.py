#!/usr/bin/python3
"""What an experiment has done and what is left, with an estimate.

    status.py NAME RUNS_DIR [--jobs 2] [--qkv build/qkv]

Planned runs: those of every sweep file experiments/NAME/**/*.yaml (`qkv sweep FILE --dry-run`);
finished: the run directories under RUNS_DIR/NAME holding result.csv; the estimate: the left runs
times the mean wall time of the finished ones, divided by --jobs (runs at a time).
"""
import argparse
import csv
import subprocess
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("runs")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--qkv", default="build/qkv")
    a = ap.parse_args()
    planned = 0
    for f in sorted(Path("experiments", a.name).rglob("*.yaml")):
        r = subprocess.run([a.qkv, "sweep", str(f), "--dry-run"], capture_output=True, text=True)
        if r.returncode == 0:
            planned += max(0, len(r.stdout.strip().splitlines()) - 1)
    walls = []
    for result in Path(a.runs, a.name).rglob("result.csv"):
        try:
            row = next(csv.DictReader(open(result, newline="")))
            walls.append(float(row["wall_s"]))
        except (StopIteration, KeyError, ValueError):
            continue
    left = max(0, planned - len(walls))
    mean = sum(walls) / len(walls) if walls else float("nan")
    eta = left * mean / max(1, a.jobs) / 3600 if walls else float("nan")
    print(f"{a.name}: {len(walls)} of {planned} planned runs finished, {left} left"
          + (f", about {eta:.1f} h at {a.jobs} at a time ({mean:.0f} s a run)" if walls and left else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
