#!/usr/bin/python3
"""tools/omp_regions.py on a made-up OpenMP program that keeps its own account of its regions:
10 regions in which thread 0 works 20 ms and thread 1 5 ms (idle (2 x 20 - 25) / 40 = 0.375 of
their thread time on an idle machine), then, after a pause, 4 regions of 10 ms on each thread.
The script's idle share and wake-up of each phase must match the program's (a loaded machine
changes both alike). Also the table on made-up totals, the time window, and the errors."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import omp_regions  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "..", "tools", "omp_regions.py")
PROGRAM = r"""
#include <omp.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static void work(double s) { const double end = now() + s; while (now() < end) {} }
/* The program's own account of its regions, to hold the library's against: wall time, each
   thread's time in its work, and how late the second thread started. */
static double wall[2], busy[2], wake[2];
static void region(int phase, double s0, double s1) {
  const double start = now();
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    const double a = now();
    work(t == 0 ? s0 : s1);
#pragma omp atomic
    busy[phase] += now() - a;
    if (t == 1) wake[phase] += a - start;
  }
  wall[phase] += now() - start;
}
static void __attribute__((noinline)) uneven(void) { region(0, 0.020, 0.005); }
static void __attribute__((noinline)) even(void) { region(1, 0.010, 0.010); }
int main(void) {
  const double t0 = now();
  for (int i = 0; i < 10; ++i) uneven();
  while (now() < t0 + 0.6) {}  /* the second phase starts 0.6 s in */
  for (int i = 0; i < 4; ++i) even();
  for (int p = 0; p < 2; ++p)
    fprintf(stderr, "phase %d: idle share %.4f, wake-up %.1f us\n", p, (2 * wall[p] - busy[p]) / (2 * wall[p]),
            1e6 * wake[p] / (p == 0 ? 10 : 4));
  return 0;
}
"""
failures = []


def check(what, ok, detail=""):
    if not ok:
        failures.append(f"{what}{': ' + detail if detail else ''}")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def rows_of(stdout):
    """{function name: (regions, threads, idle share, wake-up us)} from the printed table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[1].isdigit():
            rows[cells[0]] = (int(cells[1]), int(cells[2]), float(cells[5]), float(cells[6]))
    return rows


def find(rows, name):
    """The one row whose function is `name`; None if none or several."""
    hits = [v for k, v in rows.items() if re.match(rf"{name}\b", k)]
    return hits[0] if len(rows) == 1 and len(hits) == 1 else None


# The table on made-up totals: idle = thread wall - busy, worst first, the rest summed.
lines = ["/x/prog 0x10 6 2 0.6 1.2 0.9 0.0006", "/x/prog 0x20 5 2 2.0 4.0 3.9 0.0005",
         "# a comment", "", "/x/prog 0x30 1 2 0.1 0.2 0.25 0.0",
         "/x/prog 0x10 4 1 0.4 0.8 0.6 0.0004"]  # the same function in a second process
totals = omp_regions.parse_totals(lines)
check("three rows parsed, a function's two processes added", len(totals) == 3
      and totals[0]["regions"] == 10 and totals[0]["threads"] == 2 and abs(totals[0]["wall"] - 1.0) < 1e-12,
      str(totals))
check("idle = thread wall - busy", abs(omp_regions.idle(totals[0]) - 0.5) < 1e-12)
check("idle never negative", omp_regions.idle(totals[2]) == 0.0)
for t in totals:
    t["name"] = f"f{t['offset']:x}"
out = omp_regions.table(totals, 4.0, 2)
check("worst idle first", out[2].startswith("| f10 | 10 | 2 | 1.000 | 0.500 | 0.250 | 100.0 |"), out[2])
check("the rest summed", out[4].startswith("| (1 more) | 1 |"), out[4])
check("totals", "all regions: 16, wall 3.100 s, idle 0.600 of 6.200 thread s (0.097)" in out, "\n".join(out))
check("share of the window", "regions' share of the window's wall time: 0.775 (4.0 s)" in out, "\n".join(out))

cc = shutil.which("cc") or shutil.which("gcc")
if not cc:
    print("omp_regions: no C compiler")
    sys.exit(1)
work = tempfile.mkdtemp(prefix="test_omp_regions-")
try:
    prog = os.path.join(work, "waits")
    with open(prog + ".c", "w") as f:
        f.write(PROGRAM)
    subprocess.run([cc, "-O1", "-g", "-fopenmp", "-o", prog, prog + ".c"], check=True)
    whole = run("--keep", os.path.join(work, "keep"), "--", prog)
    check("whole run: exit 0", whole.returncode == 0, whole.stderr)
    row = find(rows_of(whole.stdout), "region")
    check("whole run: one row, the region's function (its name from addr2line), 14 regions of 2 threads",
          row is not None and row[:2] == (14, 2), whole.stdout)
    again = run("--keep", os.path.join(work, "keep"), "--", prog)
    row = find(rows_of(again.stdout), "region")
    check("a second run into the same --keep directory: its own 14 regions only",
          again.returncode == 0 and row is not None and row[0] == 14, again.stdout + again.stderr)
    kept = os.listdir(os.path.join(work, "keep", "regions"))
    check("--keep kept the raw totals, one file of the one process that timed regions",
          len(kept) == 1 and re.fullmatch(r"regions\.\d+\.txt", kept[0]) is not None, str(kept))

    twice = run("--", "/bin/sh", "-c", f"{prog} && {prog}")
    row = find(rows_of(twice.stdout), "region")
    check("a shell running the program twice: both processes' regions added (28)",
          twice.returncode == 0 and row is not None and row[0] == 28, twice.stdout + twice.stderr)

    # Each phase alone, through the window, against the program's own account of the same run.
    for args, phase, regions in ((["--to", "0.45"], 0, 10), (["--from", "0.45"], 1, 4)):
        r = run(*args, "--", prog)
        row = find(rows_of(r.stdout), "region")
        own = re.search(rf"phase {phase}: idle share ([\d.]+), wake-up ([\d.]+) us", r.stderr)
        if r.returncode != 0 or row is None or own is None:
            failures.append(f"{args}: no result\n{r.stdout}{r.stderr}")
            continue
        share, wake = float(own.group(1)), float(own.group(2))
        check(f"{args}: {regions} regions", row[0] == regions, str(row))
        check(f"{args}: idle share as the program counts it", abs(row[2] - share) <= 0.02, f"{row[2]} against {share}")
        check(f"{args}: wake-up as the program counts it", abs(row[3] - wake) <= 20 + 0.2 * wake,
              f"{row[3]} against {wake} us")
        if phase == 0:
            check("the uneven phase waits", share > 0.2, str(share))

    none = run("--", "/bin/true")
    check("a program without parallel regions: exit 1, said so",
          none.returncode == 1 and "no parallel region" in none.stderr, none.stdout + none.stderr)
    missing = run("--", os.path.join(work, "no-such-program"))
    check("a program that is not there: exit 2, said so",
          missing.returncode == 2 and "cannot run" in missing.stderr, missing.stderr)
    failing = run("--", "/bin/false")
    check("the command's failure is passed on", failing.returncode == 1 and "status 1" in failing.stderr,
          failing.stderr)
    for args, says in ((["--"], "no command"), (["--from", "2", "--to", "1", "--", prog], "from < to"),
                       (["--top", "0", "--", prog], "at least 1")):
        bad = run(*args)
        check(f"{args[:-1] or args}: usage error", bad.returncode == 2 and says in bad.stderr, bad.stderr)
finally:
    shutil.rmtree(work)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("omp_regions: all checks passed")
