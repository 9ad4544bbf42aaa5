#!/usr/bin/python3
"""Where a program's OpenMP threads wait: time in each parallel region, busy and idle, per thread
(docs/performance.md, "The 10.8M-parameter decoder at 2 threads").

    /usr/bin/python3 tools/omp_regions.py [--from S] [--to S] [--top N] [--keep DIR] -- \\
        build/qkv train configs/fortunes.yaml --threads 2 --set train.steps=30 ...

Compiles tools/omp_regions.c (cc, -fopenmp) into an LD_PRELOAD library and runs the command
with it. The library times every parallel region GCC's libgomp starts with GOMP_parallel (all of
qkv's): its wall time, each team thread's time inside it (busy) and how late each other thread
entered it (its wake-up). A thread's idle time in a region is wall - busy: waiting to be woken,
then waiting at the closing barrier for a slower thread. The table sums them per parallel region
of the source (one outlined function each, named by addr2line), worst idle first:

    idle share = idle thread time / (wall time x threads)

--from and --to keep only the regions that start within those seconds of the program's start
(e.g. past start-up and the first steps, before a final evaluation). Time outside every region
(one thread working, the others asleep) is not in the table; the last line gives the regions'
share of the window's wall time. Every process the command starts is timed (each writes its own
totals; rows of the same function are added, and the window counts from each process's start),
so a driver script that runs several programs gives one table for all of them. Linux with glibc
and libgomp only (not clang's libomp).
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
from wrapper import parse_with_command, work_dir  # noqa: E402

SOURCE = os.path.join(SCRIPTS, "omp_regions.c")


def parse_totals(lines):
    """[{object, offset, regions, threads, wall, thread_wall, busy, wake}] from the library's
    output lines (comment lines skipped), one row per function: rows of the same function (from
    several processes) are added, their team sizes maxed."""
    rows = {}
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        obj, off, regions, threads, wall, thread_wall, busy, wake = line.split()
        r = rows.setdefault((obj, int(off, 16)), dict(object=obj, offset=int(off, 16), regions=0, threads=0,
                                                      wall=0.0, thread_wall=0.0, busy=0.0, wake=0.0))
        r["regions"] += int(regions)
        r["threads"] = max(r["threads"], int(threads))
        for key, value in (("wall", wall), ("thread_wall", thread_wall), ("busy", busy), ("wake", wake)):
            r[key] += float(value)
    return list(rows.values())


def idle(row):
    """Idle thread time of a row, seconds (never below 0: clock reads are not simultaneous)."""
    return max(0.0, row["thread_wall"] - row["busy"])


def short_name(name, width=100):
    """A demangled name without its return type, cut to `width` characters."""
    if name.startswith("void "):
        name = name[5:]
    return name if len(name) <= width else name[:width - 3] + "..."


def resolve(rows):
    """Adds `name` to each row: the function at object + offset (addr2line), else object+offset."""
    addr2line = shutil.which("addr2line")
    for r in rows:
        r["name"] = f"{os.path.basename(r['object'])}+0x{r['offset']:x}"
        if addr2line and os.path.isfile(r["object"]):
            out = subprocess.run([addr2line, "-f", "-C", "-e", r["object"], f"0x{r['offset']:x}"],
                                 capture_output=True, text=True).stdout.splitlines()
            if out and out[0] != "??":
                r["name"] = f"{short_name(out[0])} [+0x{r['offset']:x}]"
    return rows


def table(rows, window, top):
    """The report lines: one row per parallel region, worst idle first, then the totals."""
    rows = sorted(rows, key=idle, reverse=True)
    lines = ["| parallel region (outlined function) | regions | threads | wall s | idle thread s | idle share "
             "| wake-up us |", "|---|---|---|---|---|---|---|"]
    for r in rows[:top]:
        share = idle(r) / r["thread_wall"] if r["thread_wall"] > 0 else 0.0
        others = r["regions"] * max(r["threads"] - 1, 0)
        wake = 1e6 * r["wake"] / others if others else 0.0
        lines.append(f"| {r['name']} | {r['regions']} | {r['threads']} | {r['wall']:.3f} | {idle(r):.3f} | "
                     f"{share:.3f} | {wake:.1f} |")
    if len(rows) > top:
        lines.append(f"| ({len(rows) - top} more) | {sum(r['regions'] for r in rows[top:])} | | "
                     f"{sum(r['wall'] for r in rows[top:]):.3f} | {sum(idle(r) for r in rows[top:]):.3f} | | |")
    wall = sum(r["wall"] for r in rows)
    thread_wall = sum(r["thread_wall"] for r in rows)
    total_idle = sum(idle(r) for r in rows)
    lines.append("")
    lines.append(f"all regions: {sum(r['regions'] for r in rows)}, wall {wall:.3f} s, idle {total_idle:.3f} of "
                 f"{thread_wall:.3f} thread s ({total_idle / thread_wall if thread_wall else 0:.3f})")
    if window:
        lines.append(f"regions' share of the window's wall time: {wall / window:.3f} ({window:.1f} s)")
    return lines


def compile_library(work):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("omp_regions: no C compiler (cc or gcc) found")
    lib = os.path.join(work, "omp_regions.so")
    subprocess.run([cc, "-std=c11", "-O2", "-fopenmp", "-shared", "-fPIC", "-o", lib, SOURCE, "-ldl"], check=True)
    return lib


def timed_run(cmd, work, start, to):
    """Runs cmd with the library preloaded, writing into work/regions/: (the rows of every process
    that timed regions, the run's wall time in seconds); SystemExit when the command cannot run
    or fails."""
    lib = compile_library(work)
    out = os.path.join(work, "regions")
    shutil.rmtree(out, ignore_errors=True)  # a kept directory's totals of an earlier run
    os.makedirs(out)
    env = dict(os.environ, QKV_REGIONS_OUT=out, QKV_REGIONS_FROM=str(start),
               LD_PRELOAD=" ".join(filter(None, [lib, os.environ.get("LD_PRELOAD")])))
    if to is not None:
        env["QKV_REGIONS_TO"] = str(to)
    t0 = time.monotonic()
    try:
        rc = subprocess.run(cmd, env=env).returncode
    except OSError as e:
        print(f"omp_regions: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        raise SystemExit(2)
    elapsed = time.monotonic() - t0
    if rc != 0:
        print(f"omp_regions: the command exited with status {rc}", file=sys.stderr)
        raise SystemExit(rc if rc > 0 else 1)
    lines = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            lines += f.readlines()
    return parse_totals(lines), elapsed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--from", dest="start", type=float, default=0.0,
                    help="count regions that start this many seconds after the program starts, or later")
    ap.add_argument("--to", type=float, help="... and before this many seconds (default: the end)")
    ap.add_argument("--top", type=int, default=12, help="rows of the table (the rest summed in one)")
    ap.add_argument("--keep", help="keep the library and its raw output (regions/regions.<pid>.txt) in this "
                    "directory")
    a, cmd = parse_with_command(ap, argv, "the program and its arguments")
    if not cmd:
        ap.error("no command: give the program to run after --")
    if a.start < 0 or (a.to is not None and a.to <= a.start):
        ap.error(f"--from {a.start} and --to {a.to}: need 0 <= from < to")
    if a.top < 1:
        ap.error(f"--top {a.top}: need at least 1")
    with work_dir(a.keep, "omp_regions-") as work:
        rows, elapsed = timed_run(cmd, work, a.start, a.to)
    if not rows:
        print("omp_regions: no parallel region started in the window (is the program built with GCC's "
              "OpenMP?)", file=sys.stderr)
        return 1
    window = (min(a.to, elapsed) if a.to is not None else elapsed) - a.start
    print("\n".join(table(resolve(rows), window if window > 0 else 0.0, a.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
