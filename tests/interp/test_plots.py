#!/usr/bin/python3
"""Training snapshots and the plotting scripts, end to end.

Usage: test_plots.py --qkv BUILD/qkv --workdir DIR [--full]

Trains the sort task for 60 steps with train.snapshot_every=20 in DIR/snap and checks
  - snapshots.h5: the text header (first line, byte count, CRC-64/XZ of the rest), the layout
    (steps [0, 20, 40, 60], examples, score names, one group per attention layer with weights
    (S, N, H, Tq, Tk) float32 and scores (S, H, K) float64), every weight row summing to 1 within
    1e-4, and the pattern scores recomputed from the stored weights;
  - the same run without snapshots (DIR/plain) ends with bitwise the same parameters and metrics;
  - with --full, also: a run stopped at step 30 and resumed (DIR/resumed) ends with bitwise the
    same snapshots (tests/interp/test_snapshots.cpp checks resuming in C++; this adds 5 s);
  - plot_snapshots.py --list and a plot, qkv ablate --prune --plot (plot_prune.py): valid PNGs
    that are not tiny, and the pruning CSV;
  - the error paths: a missing file, a checkpoint, a damaged file, an unknown --layer or --score
    exit 2 naming the problem; plot_prune.py on a missing or malformed CSV exits 2.
Prints one line per check; exits 0 when all pass, 1 otherwise. Trains with one thread.
"""
import argparse
import csv
import math
import os
import shutil
import struct
import subprocess
import sys
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
sys.path.insert(0, SCRIPTS)
sys.dont_write_bytecode = True  # no __pycache__ in scripts/
from convert_checkpoint import crc64_xz  # noqa: E402  (CRC-64/XZ, as qkv computes it)

PYTHON = "/usr/bin/python3"
SCORE_NAMES = ["entropy", "max_weight", "previous_token", "first_token", "self", "induction", "retrieval"]
TRAIN = ["--quiet", "--threads", "1", "--set", "train.steps=60", "--set", "schedule.warmup_steps=10"]
SNAP = ["--set", "train.snapshot_every=20"]

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


def run(cmd, what):
    t = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    check(p.returncode == 0, f"{what}: exit 0 ({time.time() - t:.1f} s)"
          + ("" if p.returncode == 0 else f", found {p.returncode}: {p.stderr.strip()[-400:]}"))
    return p


def run_error(cmd, what, needles):
    """`cmd` exits 2 and its stderr holds every string of `needles`."""
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    missing = [n for n in needles if n not in p.stderr]
    check(p.returncode == 2 and not missing,
          f"{what}: exit 2 naming {', '.join(repr(n) for n in needles)}"
          + ("" if p.returncode == 2 and not missing else f"; found exit {p.returncode}, stderr {p.stderr.strip()!r}"))


def png_ok(path, what, min_bytes=10000, min_side=300):
    if not check(os.path.exists(path), f"{what}: {path} exists"):
        return
    with open(path, "rb") as f:
        head = f.read(24)
    size = os.path.getsize(path)
    valid = head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    w, h = struct.unpack(">II", head[16:24]) if valid else (0, 0)
    check(valid and size >= min_bytes and min(w, h) >= min_side,
          f"{what}: a PNG (magic bytes, IHDR) of {size} bytes >= {min_bytes}, {w}x{h} pixels, sides >= {min_side}")


def model_tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) and n.startswith("model") else None)
    return out


def metrics_rows(path):
    """metrics.csv without the timing columns (tokens_per_s, elapsed_s)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")} for r in rows]


def check_header(path):
    with open(path, "rb") as f:
        data = f.read()
    lines = data[:512].split(b"\n")
    check(crc64_xz(b"123456789") == 0x995DC9BBDF1939FA, "crc64_xz gives the CRC-64/XZ check value")
    check(lines[0] == b"qkv-snapshots" and lines[1] == b"version 1", "header: 'qkv-snapshots', 'version 1'")
    check(lines[2] == b"bytes %d" % len(data), f"header: {lines[2].decode()!r} is the file size {len(data)}")
    found = crc64_xz(data[512:])
    check(lines[3] == b"crc64-xz %016x" % found, f"header: {lines[3].decode()!r} is the CRC-64/XZ of bytes 512.. ({found:016x})")
    check(data[512:516] == b"\x89HDF", "the HDF5 superblock starts at byte 512")


def check_layout(path):
    with h5py.File(path, "r") as f:
        check(f.userblock_size == 512, f"h5py: user block of 512 bytes, found {f.userblock_size}")
        fmt, version = f.attrs.get("format"), f.attrs.get("version")
        check(fmt == b"qkv-snapshots" and version == 1, f"/ attributes format 'qkv-snapshots', version 1: {fmt!r}, {version!r}")
        steps = f["steps"][()]
        check(steps.dtype == np.int64 and steps.tolist() == [0, 20, 40, 60], f"/steps == [0, 20, 40, 60]: {steps.tolist()}")
        S = len(steps)
        inputs = f["examples/inputs"][()]
        check(inputs.dtype == np.int64 and inputs.shape == (4, 32),
              f"/examples/inputs (N, T) = (4, 32) int64 (train.snapshot_examples 4, sort length 32): {inputs.dtype} {inputs.shape}")
        N, T = inputs.shape
        labels = f["examples/input_labels"].asstr()[()]
        check(labels.shape == (N, T) and all(l != "" for l in labels.ravel()), f"/examples/input_labels (N, T), none empty: {labels.shape}")
        check("examples/decoder_inputs" not in f, "no /examples/decoder_inputs (an encoder)")
        names = list(f["score_names"].asstr()[()])
        check(names == SCORE_NAMES, f"/score_names == {SCORE_NAMES}: {names}")
        K = len(names)
        layers = f["layers"]
        check(sorted(layers) == ["0", "1"], f"/layers holds 0 and 1 (2 attention layers): {sorted(layers)}")
        for key in sorted(layers):
            g = layers[key]
            p = f"/layers/{key}"
            name, kind = g.attrs.get("name"), g.attrs.get("kind")
            check(name == f"blocks.{key}.attn".encode() and kind == b"self", f"{p}: name blocks.{key}.attn, kind self: {name!r}, {kind!r}")
            w, sc = g["weights"], g["scores"]
            check(w.dtype == np.float32 and w.shape == (S, N, 4, T, T), f"{p}/weights (S, N, H, Tq, Tk) = {(S, N, 4, T, T)} float32: {w.dtype} {w.shape}")
            check(sc.dtype == np.float64 and sc.shape == (S, 4, K), f"{p}/scores (S, H, K) = {(S, 4, K)} float64: {sc.dtype} {sc.shape}")
            if w.shape != (S, N, 4, T, T) or sc.shape != (S, 4, K):
                continue
            w, sc = w[()].astype(np.float64), sc[()]
            row_error = float(np.abs(w.sum(-1) - 1).max())
            check(row_error <= 1e-4 and w.min() >= 0 and w.max() <= 1, f"{p}/weights: rows sum to 1 within 1e-4 (max error {row_error:.2e}), in [0, 1]")
            check(not np.array_equal(w[0], w[-1]), f"{p}/weights: step 60 differs from step 0 (the model trained)")
            # The pattern scores over the N examples (head_scores.hpp), from the stored weights.
            logs = np.log(np.where(w > 0, w, 1.0))
            want = {
                "entropy": (-(w * logs).sum(-1)).mean(axis=(1, 3)),
                "max_weight": w.max(-1).mean(axis=(1, 3)),
                "previous_token": np.diagonal(w, offset=-1, axis1=3, axis2=4).mean(axis=(1, 3)),
                "first_token": w[:, :, :, 1:, 0].mean(axis=(1, 3)),
                "self": np.diagonal(w, axis1=3, axis2=4).mean(axis=(1, 3)),
            }
            for n, v in want.items():
                err = float(np.abs(sc[:, :, names.index(n)] - v).max())
                check(err <= 1e-4, f"{p}/scores '{n}' equals its value recomputed from the weights (max error {err:.2e})")
            ind, ret = sc[:, :, names.index("induction")], sc[:, :, names.index("retrieval")]
            check(bool(np.isnan(ind).all()), f"{p}/scores 'induction' NaN (sort does not predict the next token)")
            check(bool(np.isnan(ret).all()), f"{p}/scores 'retrieval' NaN (sort is not a recall task)")


def check_resumed(qkv, config, resumed, h5):
    """A run stopped at step 30 and resumed has the snapshots file of the run `h5` came from."""
    run([qkv, "train", config, "--out", resumed, "--stop-after", "30"] + TRAIN + SNAP, "train with snapshots, stopped after 30 steps")
    with h5py.File(os.path.join(resumed, "snapshots.h5"), "r") as f:
        check(f["steps"][()].tolist() == [0, 20], f"stopped at 30: snapshots of steps [0, 20]: {f['steps'][()].tolist()}")
    run([qkv, "train", config, "--out", resumed, "--resume", os.path.join(resumed, "last.h5")] + TRAIN + SNAP, "resume it to step 60")
    with h5py.File(h5, "r") as f, h5py.File(os.path.join(resumed, "snapshots.h5"), "r") as g:
        same = f["steps"][()].tolist() == g["steps"][()].tolist() and all(
            np.array_equal(f[f"layers/{k}/{d}"][()], g[f"layers/{k}/{d}"][()], equal_nan=True) for k in f["layers"] for d in ("weights", "scores"))
        check(same, "resumed: steps, weights and scores bitwise equal to the uninterrupted run's")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qkv", required=True, help="the qkv binary")
    ap.add_argument("--workdir", required=True, help="a scratch directory (its snap, plain, resumed are replaced)")
    ap.add_argument("--full", action="store_true", help="also stop a run at step 30 and resume it")
    a = ap.parse_args()
    qkv, work = os.path.abspath(a.qkv), os.path.abspath(a.workdir)
    if not os.access(qkv, os.X_OK):
        print(f"test_plots.py: --qkv {qkv}: not an executable file", file=sys.stderr)
        return 2
    os.makedirs(work, exist_ok=True)
    snap, plain, resumed = (os.path.join(work, d) for d in ("snap", "plain", "resumed"))
    for d in (snap, plain, resumed):
        shutil.rmtree(d, ignore_errors=True)
    config = os.path.join(ROOT, "configs", "sort.yaml")
    plot_snap = [PYTHON, os.path.join(SCRIPTS, "plot_snapshots.py")]
    plot_prune = [PYTHON, os.path.join(SCRIPTS, "plot_prune.py")]
    t0 = time.time()

    # A run with snapshots: the file.
    run([qkv, "train", config, "--out", snap] + TRAIN + SNAP, "train sort 60 steps with train.snapshot_every=20")
    h5 = os.path.join(snap, "snapshots.h5")
    if not check(os.path.exists(h5), f"{h5} exists"):
        return 1
    check_header(h5)
    check_layout(h5)

    # Snapshots never change the trajectory; a resumed run continues the file exactly.
    run([qkv, "train", config, "--out", plain] + TRAIN, "train the same without snapshots")
    check(not os.path.exists(os.path.join(plain, "snapshots.h5")), "no snapshots.h5 without train.snapshot_every")
    a_model, b_model = model_tensors(os.path.join(snap, "last.h5")), model_tensors(os.path.join(plain, "last.h5"))
    check(len(a_model) > 0 and a_model.keys() == b_model.keys() and all(np.array_equal(a_model[k], b_model[k]) for k in a_model),
          f"last.h5: the {len(a_model)} model tensors are bitwise equal with and without snapshots")
    check(metrics_rows(os.path.join(snap, "metrics.csv")) == metrics_rows(os.path.join(plain, "metrics.csv")),
          "metrics.csv: equal with and without snapshots (timing columns aside)")
    if a.full:
        check_resumed(qkv, config, resumed, h5)

    # plot_snapshots.py
    p = run(plot_snap + [h5, "--list"], "plot_snapshots.py --list")
    check("steps (4): 0 20 40 60" in p.stdout and "blocks.1.attn" in p.stdout and " ".join(SCORE_NAMES) in p.stdout,
          "--list names the steps, the layers and the scores")
    out = os.path.join(work, "snapshots.png")
    if os.path.exists(out):
        os.remove(out)
    run(plot_snap + [h5, out, "--layer", "blocks.1.attn", "--example", "1"], "plot_snapshots.py --layer blocks.1.attn --example 1")
    png_ok(out, "plot_snapshots.py")

    # qkv ablate --prune --plot (plot_prune.py)
    prune = os.path.join(work, "prune.png")
    table = os.path.join(work, "prune.csv")
    for f in (prune, prune + ".csv", table):
        if os.path.exists(f):
            os.remove(f)
    run([qkv, "ablate", os.path.join(snap, "best.h5"), "--prune", "--plot", prune, "--csv", table, "--examples", "64",
         "--threads", "1"], "qkv ablate best.h5 --prune --plot prune.png --csv prune.csv --examples 64")
    png_ok(prune, "plot_prune.py")
    check(not os.path.exists(prune + ".csv"), "no file written beside the plot that was not asked for (prune.png.csv)")
    if check(os.path.exists(table), "the curve's CSV where --csv says (prune.csv)"):
        with open(table, newline="") as f:
            rows = list(csv.DictReader(f))
        check(len(rows) == 9 and rows[0]["removed"] == "0" and rows[-1]["removed"] == "8" and float(rows[-1]["fraction"]) == 1.0
              and len(rows[-1]["heads"].split()) == 8, f"the CSV has 9 points, 0 to 8 of 8 heads removed: {len(rows)} rows")

    # Error paths.
    missing = os.path.join(work, "no-such-dir", "snapshots.h5")
    run_error(plot_snap + [missing, out], "plot_snapshots.py on a missing file", [missing])
    run_error(plot_snap + [h5, out, "--layer", "7"], "plot_snapshots.py --layer 7", ["--layer 7", "blocks.0.attn"])
    run_error(plot_snap + [h5, out, "--layer", "blocks.9.attn"], "plot_snapshots.py --layer blocks.9.attn", ["blocks.9.attn"])
    run_error(plot_snap + [h5, out, "--score", "nope"], "plot_snapshots.py --score nope", ["--score nope", "previous_token"])
    run_error(plot_snap + [os.path.join(snap, "best.h5"), "--list"], "plot_snapshots.py on a checkpoint", ["format", "qkv-checkpoint"])
    damaged = os.path.join(work, "damaged.h5")
    with open(h5, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF
    with open(damaged, "wb") as f:
        f.write(data)
    run_error(plot_snap + [damaged, "--list"], "plot_snapshots.py on a file with one byte flipped", [damaged, "checksum mismatch"])
    with open(damaged, "wb") as f:
        f.write(data[: len(data) // 2])
    run_error(plot_snap + [damaged, "--list"], "plot_snapshots.py on a truncated file", [damaged, "truncated"])
    run_error(plot_prune + [missing + ".csv", prune, "ckpt"], "plot_prune.py on a missing CSV", [missing + ".csv"])
    bad = os.path.join(work, "bad.csv")
    with open(bad, "w") as f:
        f.write("layer,head,loss\n0,0,1.0\n")
    run_error(plot_prune + [bad, prune, "ckpt"], "plot_prune.py on a CSV with another header", [bad, "removed,fraction,loss"])

    print(f"{'FAILED' if failures else 'passed'}: {len(failures)} of the checks failed ({time.time() - t0:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
