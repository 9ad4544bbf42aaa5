#!/usr/bin/python3
"""Plot the training snapshots of a qkv run: heads forming during training.

Usage:
  plot_snapshots.py SNAPSHOTS.h5 OUT.png [--example N] [--layer L] [--score NAME]
  plot_snapshots.py SNAPSHOTS.h5 --list

SNAPSHOTS.h5 is the `<run>/snapshots.h5` that `qkv train` writes with `train.snapshot_every` > 0
(layout in docs/snapshots.md; include/qkv/interp/snapshots.hpp). The figure has two parts:

  (a) the attention maps of every head of layer L (an index into /layers, or the layer's dotted
      name such as blocks.0.attn; default 0) on held-out example N (default 0), one row per head,
      at up to 6 recorded steps: the first, the last and evenly spaced ones in between;
  (b) head scores over the training steps, one line per layer.head (every attention layer):
      one panel for --score NAME, else one panel per score that applies to some head (a score
      that is NaN for every head and step, e.g. retrieval outside the recall tasks, is left out).

Maps use one colour scale, weight 0 to 1 (viridis). --list prints the steps, the examples, the
score names and the layers as text, and draws nothing.

Before h5py reads the file, its text header (the 512-byte user block) is checked as qkv checks it:
the first line, the byte count and the CRC-64/XZ of the bytes after the header.

Exit status: 0 on success; 2 for a missing file, a file that is not a qkv snapshots file (no
header, no HDF5, or a root attribute format other than "qkv-snapshots"), a truncated or damaged
file, a malformed layout, an unknown layer, score or example; 1 when the PNG cannot be written.
"""
import argparse
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in scripts/ for the module below
from convert_checkpoint import crc64_xz  # CRC-64/XZ at C speed (through lzma), as qkv computes it

FORMAT = "qkv-snapshots"
VERSION = 1
MAX_STEP_COLUMNS = 6
HEADER_BYTES = 512


class SnapshotsError(Exception):
    pass


def text(value):
    """An HDF5 string attribute or element (h5py gives bytes for fixed-length strings) as str."""
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray) and value.shape == ():
        return text(value[()])
    return str(value)


def check_header(path):
    """The text header in the 512-byte user block: its first line, byte count and CRC-64/XZ of the
    bytes after it (what qkv checks before reading). SnapshotsError when it does not fit."""
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
        if not head.startswith(FORMAT.encode() + b"\n"):
            if head.startswith(b"\x89HDF") or b"qkv-" in head[:16]:
                return  # no user-block header: the root attributes below say what the file is
            raise SnapshotsError(f"{path}: no '{FORMAT}' header in the first {HEADER_BYTES} bytes; expected a qkv "
                                 "snapshots file" + ("" if head else " (the file is empty)"))
        fields = dict(line.split(" ", 1) for line in head.decode("ascii", "replace").split("\n")[1:4] if " " in line)
        try:
            version, size, crc = int(fields["version"]), int(fields["bytes"]), int(fields["crc64-xz"], 16)
        except (KeyError, ValueError):
            raise SnapshotsError(f"{path}: damaged header: expected lines 'version N', 'bytes N', 'crc64-xz X' "
                                 "after the first")
        if version != VERSION:
            raise SnapshotsError(f"{path}: snapshots version {version}, this script reads {VERSION}")
        actual = os.path.getsize(path)
        if actual != size:
            raise SnapshotsError(f"{path}: {'truncated' if actual < size else 'damaged'}: {actual} bytes, the header "
                                 f"says {size}")
        found = crc64_xz(f.read())
        if found != crc:
            raise SnapshotsError(f"{path}: checksum mismatch: the header says {crc:016x}, the bytes after it give "
                                 f"{found:016x} (damaged)")


def strings(dataset):
    return np.array([text(v) for v in dataset[()].ravel()], dtype=object).reshape(dataset.shape)


def load(path):
    """Everything plot and list need, as plain numpy arrays; SnapshotsError naming the file."""
    if not os.path.exists(path):
        raise SnapshotsError(f"{path}: no such file (expected the snapshots.h5 of a run trained with "
                             "--set train.snapshot_every=N)")
    try:
        check_header(path)
    except OSError as e:
        raise SnapshotsError(f"{path}: cannot read it: {e.strerror or e}")
    import h5py
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise SnapshotsError(f"{path}: not an HDF5 file ({e}); expected a qkv snapshots file")
    with f:
        fmt = text(f.attrs["format"]) if "format" in f.attrs else None
        if fmt != FORMAT:
            raise SnapshotsError(f"{path}: root attribute format is {fmt!r}, expected '{FORMAT}'"
                                 + (" (a qkv checkpoint? snapshots are in <run>/snapshots.h5)" if fmt == "qkv-checkpoint" else ""))
        version = int(f.attrs["version"]) if "version" in f.attrs else None
        if version != VERSION:
            raise SnapshotsError(f"{path}: root attribute version is {version}, this script reads {VERSION}")

        def need(name):
            if name not in f:
                raise SnapshotsError(f"{path}: /{name} is missing (expected the layout of docs/snapshots.md)")
            return f[name]

        s = {"path": path}
        s["steps"] = np.asarray(need("steps")[()], dtype=np.int64)
        s["inputs"] = np.asarray(need("examples/inputs")[()])
        s["input_labels"] = strings(need("examples/input_labels"))
        if "examples/decoder_inputs" in f:
            s["decoder_inputs"] = np.asarray(f["examples/decoder_inputs"][()])
            s["decoder_labels"] = strings(need("examples/decoder_labels"))
        s["score_names"] = [text(v) for v in need("score_names")[()]]
        if s["steps"].ndim != 1 or s["inputs"].ndim != 2 or s["inputs"].shape[0] == 0:
            raise SnapshotsError(f"{path}: expected /steps (S) and /examples/inputs (N, T) with N >= 1, found "
                                 f"{s['steps'].shape} and {s['inputs'].shape}")
        S, (N, T) = len(s["steps"]), s["inputs"].shape
        K = len(s["score_names"])
        layers = need("layers")
        s["layers"] = []
        for i in range(len(layers)):
            key = str(i)
            if key not in layers:
                raise SnapshotsError(f"{path}: /layers/{key} is missing (/layers holds {sorted(layers)})")
            g = layers[key]
            w, c = need(f"layers/{key}/weights"), need(f"layers/{key}/scores")
            if w.ndim != 5 or w.shape[:2] != (S, N):
                raise SnapshotsError(f"{path}: /layers/{key}/weights: expected (S, N, H, Tq, Tk) with S = {S}, N = {N}, "
                                     f"found {w.shape}")
            if c.shape != (S, w.shape[2], K):
                raise SnapshotsError(f"{path}: /layers/{key}/scores: expected (S, H, K) = {(S, w.shape[2], K)}, "
                                     f"found {c.shape}")
            s["layers"].append({"index": i, "name": text(g.attrs.get("name", key)), "kind": text(g.attrs.get("kind", "?")),
                                "scores": np.asarray(c[()], dtype=np.float64), "shape": w.shape})
        if not s["layers"]:
            raise SnapshotsError(f"{path}: /layers is empty (expected one group per attention layer)")
        if S == 0:
            raise SnapshotsError(f"{path}: /steps is empty (no snapshot recorded)")
    return s


def find_layer(s, spec):
    """The layer `spec` names: an index into /layers or a dotted name."""
    names = ", ".join(f"{l['index']} ({l['name']})" for l in s["layers"])
    if spec is None:
        return s["layers"][0]
    if spec.lstrip("-").isdigit():
        i = int(spec)
        if 0 <= i < len(s["layers"]):
            return s["layers"][i]
        raise SnapshotsError(f"--layer {spec}: no such layer; the file has {len(s['layers'])}: {names}")
    for l in s["layers"]:
        if l["name"] == spec:
            return l
    raise SnapshotsError(f"--layer {spec}: no layer of that name; the file has {names}")


def token_labels(s, layer, example):
    """(query labels, key labels) of `layer` for `example` (cross: target queries, source keys)."""
    src = list(s["input_labels"][example])
    tgt = list(s["decoder_labels"][example]) if "decoder_labels" in s else None
    if layer["kind"] == "cross" and tgt is not None:
        q, k = tgt, src
    elif layer["kind"] == "causal" and tgt is not None:
        q, k = tgt, tgt
    else:
        q, k = src, src
    _, _, _, Tq, Tk = layer["shape"]
    if len(q) != Tq:
        q = [str(i) for i in range(Tq)]
    if len(k) != Tk:
        k = [str(i) for i in range(Tk)]
    return q, k


def chosen_steps(S):
    """Up to MAX_STEP_COLUMNS snapshot indices: the first, the last and evenly spaced ones."""
    return sorted(set(int(round(x)) for x in np.linspace(0, S - 1, min(S, MAX_STEP_COLUMNS))))


def list_file(s):
    S, (N, T) = len(s["steps"]), s["inputs"].shape
    print(f"{s['path']}: {FORMAT} version {VERSION}")
    print(f"steps ({S}): {' '.join(str(x) for x in s['steps'])}")
    line = f"examples: {N} held-out, input length {T}"
    if "decoder_inputs" in s:
        line += f", decoder input length {s['decoder_inputs'].shape[1]}"
    print(line)
    print(f"scores ({len(s['score_names'])}): {' '.join(s['score_names'])}")
    print(f"layers ({len(s['layers'])}):")
    width = max(len(l["name"]) for l in s["layers"])
    for l in s["layers"]:
        _, _, H, Tq, Tk = l["shape"]
        print(f"  {l['index']}  {l['name']:<{width}}  {l['kind']:<6} {H} heads  Tq x Tk = {Tq} x {Tk}")


def plot(s, out, example, layer, score):
    import h5py
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = s["steps"]
    cols = chosen_steps(len(steps))
    _, _, H, Tq, Tk = layer["shape"]
    qlab, klab = token_labels(s, layer, example)
    with h5py.File(s["path"], "r") as f:  # only the example shown: (S, H, Tq, Tk)
        weights = np.asarray(f[f"layers/{layer['index']}/weights"][:, example], dtype=np.float32)
    names = s["score_names"]
    if score is not None:
        panels = [score]
    else:
        panels = [n for k, n in enumerate(names) if any(np.isfinite(l["scores"][:, :, k]).any() for l in s["layers"])]
    slots = len(panels) + 1  # the last slot holds the legend
    pcols = min(slots, 4)
    prows = -(-slots // pcols)

    cell = 1.8
    map_w, map_h = cell * len(cols) * max(Tk / Tq, 0.5) + 1.2, cell * H + 0.5
    score_w, score_h = 3.2 * pcols, 2.5 * prows + 0.3
    fig = plt.figure(figsize=(max(map_w, score_w), map_h + score_h + 0.6), dpi=100, layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[map_h, score_h])

    axes = top.subplots(H, len(cols), squeeze=False)
    image = None
    for c, si in enumerate(cols):
        for h in range(H):
            ax = axes[h, c]
            image = ax.imshow(weights[si, h], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if h == 0:
                ax.set_title(f"step {steps[si]}", fontsize=9)
            if c == 0:
                ax.set_ylabel(f"head {h}", fontsize=8)
    # Positions (or, for short inputs, the tokens) on the bottom-left map only: ticks on every map
    # would crowd the grid (and triple the layout time).
    corner = axes[-1, 0]
    corner.set_xlabel("key", fontsize=8)
    corner.set_ylabel(f"head {H - 1}\nquery", fontsize=8)
    if max(Tq, Tk) <= 20:
        corner.set_yticks(range(Tq), qlab, fontsize=6)
        corner.set_xticks(range(Tk), klab, fontsize=6, rotation=90)
    else:
        corner.set_yticks(range(0, Tq, max(1, Tq // 4)))
        corner.set_xticks(range(0, Tk, max(1, Tk // 4)))
        corner.tick_params(labelsize=6, length=2)
    top.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    top.suptitle(f"(a) layer {layer['index']} {layer['name']} ({layer['kind']}), every head on held-out example {example}",
                 fontsize=10)

    grid = bottom.subplots(prows, pcols, squeeze=False)
    cmap = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "v", "D", "x"]
    handles = []
    for p, name in enumerate(panels):
        ax = grid[p // pcols, p % pcols]
        k = names.index(name)
        for l in s["layers"]:
            for h in range(l["shape"][2]):
                line, = ax.plot(steps, l["scores"][:, h, k], markersize=2.5, linewidth=1.2,
                                color=cmap(h % 10), linestyle=styles[l["index"] % len(styles)],
                                marker=markers[l["index"] % len(markers)],
                                label=f"{l['index']}.{h} {l['name']}" if h == 0 else f"{l['index']}.{h}")
                if p == 0:
                    handles.append(line)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for p in range(len(panels), prows * pcols):
        grid[p // pcols, p % pcols].axis("off")
    legend_ax = grid[len(panels) // pcols, len(panels) % pcols]
    if handles:
        legend_ax.legend(handles, [h.get_label() for h in handles], title="layer.head", loc="center",
                         fontsize=7, title_fontsize=8, ncol=1 if len(handles) <= 12 else 2, frameon=False)
    bottom.suptitle(f"(b) head scores over training, {len(steps)} snapshots"
                    + ("" if score else " (NaN scores are left out)"), fontsize=10)
    fig.suptitle(s["path"], fontsize=10)
    fig.savefig(out)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(prog="plot_snapshots.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("snapshots", help="the run's snapshots.h5")
    parser.add_argument("out", nargs="?", help="the PNG to write (not with --list)")
    parser.add_argument("--example", type=int, default=0, metavar="N", help="held-out example (row of /examples/inputs; default 0)")
    parser.add_argument("--layer", default=None, metavar="L", help="attention layer: index into /layers or dotted name (default 0)")
    parser.add_argument("--score", default=None, metavar="NAME", help="one score to plot over training (default: every score)")
    parser.add_argument("--list", action="store_true", help="print the layers, steps and score names")
    a = parser.parse_args(argv[1:])  # exits 2 on a usage error
    try:
        if not a.list and not a.out:
            raise SnapshotsError("expected OUT.png (or --list)")
        s = load(a.snapshots)
        if a.list:
            list_file(s)
            return 0
        layer = find_layer(s, a.layer)
        N = s["inputs"].shape[0]
        if not 0 <= a.example < N:
            raise SnapshotsError(f"--example {a.example}: the file holds examples 0 to {N - 1}")
        if a.score is not None and a.score not in s["score_names"]:
            raise SnapshotsError(f"--score {a.score}: unknown score; the file has {', '.join(s['score_names'])}")
    except SnapshotsError as e:
        print(f"plot_snapshots.py: {e}", file=sys.stderr)
        return 2
    try:
        plot(s, a.out, a.example, layer, a.score)
    except OSError as e:
        print(f"plot_snapshots.py: cannot write {a.out}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}")
    if a.score is not None:
        summarise(s, a.score)
    return 0


def summarise(s, score):
    """Per layer: the best head's score at the first and the last snapshot, and the first step at
    which some head of the layer passed the score's label threshold (docs/instruments.md)."""
    k = s["score_names"].index(score)
    threshold = 0.4 if score == "induction" else 0.5
    steps = s["steps"]
    for l in s["layers"]:
        best = np.nanmax(l["scores"][:, :, k], axis=1) if np.isfinite(l["scores"][:, :, k]).any() else None
        if best is None:
            continue
        passed = next((int(steps[i]) for i in range(len(steps)) if best[i] >= threshold), None)
        print(f"layer {l['index']} {l['name']}: best {score} score {best[0]:.2f} at step {int(steps[0])}, "
              f"{best[-1]:.2f} at step {int(steps[-1])}; "
              + (f"first >= {threshold} at step {passed}" if passed is not None else f"never >= {threshold}"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
