"""What every per-run CSV row of an experiment records about where it ran (experiments/README.md):
the commit of the code and the CPU kind by vendor, family and model (two generations of one
vendor's CPUs train to different bits; a model name such as "AMD EPYC" does not tell them apart).
"""
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def git_commit(paths=("src", "include", "tools/experiments")):
    """The repository's HEAD (short), "-dirty" when `paths` have uncommitted changes."""
    try:
        h = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", *paths],
                               capture_output=True, text=True).stdout.strip()
        return (h or "unknown") + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def binary_commit(binary):
    """The commit a frozen binary was built from, from its name qkv-HASH; else the repository's."""
    m = re.search(r"qkv-([0-9a-f]{7,40})$", str(binary or ""))
    return m.group(1) if m else git_commit()


def machine_columns(binary):
    """cpu (`qkv info`'s "GenuineIntel family 6 model 167 (name)"), isa, blas (its kernel)."""
    try:
        info = subprocess.run([str(binary), "info"], capture_output=True, text=True).stdout
    except OSError:
        info = ""
    cpu = re.search(r"^CPU: ([^;\n]+)", info, re.M)
    blas = re.search(r"kernel (\S+)", info)
    name, flags = machine.cpu_info()
    return {"cpu": cpu.group(1).strip() if cpu else name, "isa": machine.isa(flags), "blas": blas.group(1) if blas else "unknown"}


def annotate(rows, binary):
    """rows (dicts of a sweep's results.csv) with the commit of `binary` and the machine's columns."""
    extra = {"commit": binary_commit(binary), **machine_columns(binary)}
    return [{**r, **{k: v for k, v in extra.items() if k not in r}} for r in rows]


if __name__ == "__main__":
    # provenance.py annotate --qkv BINARY < results.csv > annotated.csv: every row with the commit
    # and CPU columns (run.sh's pilot CSVs; the runs ran on this machine with BINARY).
    import argparse
    import csv
    ap = argparse.ArgumentParser(description="annotate a CSV of runs with their commit and CPU")
    ap.add_argument("cmd", choices=["annotate"])
    ap.add_argument("--qkv", required=True)
    a = ap.parse_args()
    rows = list(csv.DictReader(sys.stdin))
    out = annotate(rows, a.qkv)
    if out:
        w = csv.DictWriter(sys.stdout, fieldnames=list(out[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(out)
