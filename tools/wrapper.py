"""What the scripts that run another command share (blas_bound.py, omp_regions.py): the command
given after `--`, and a work directory that is kept on request."""
import argparse
import contextlib
import os
import shutil
import tempfile


def parse_with_command(ap, argv, what):
    """Parses argv with `ap` plus a trailing `-- COMMAND ...` (its help: "-- then `what`"):
    (the arguments, the command as a list; empty if none was given)."""
    ap.add_argument("command", nargs=argparse.REMAINDER, help=f"-- then {what}")
    a = ap.parse_args(argv)
    return a, a.command[1:] if a.command[:1] == ["--"] else a.command


@contextlib.contextmanager
def work_dir(keep, prefix):
    """The directory `keep` (created if missing, left in place afterwards), or a new temporary one
    (named prefix...) removed afterwards."""
    work = keep or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(work, exist_ok=True)
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work)
