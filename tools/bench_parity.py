#!/usr/bin/python3
"""Load a qkv checkpoint into the equivalent PyTorch model and check both give the same logits.

    /usr/bin/python3 tools/bench_parity.py [CHECKPOINT] [--qkv build/qkv] [--count 4] [--tol 1e-4]

Without CHECKPOINT it first trains a small sort model for a few steps with `qkv train` (so the
weights are not the initial ones) into a temporary directory. Then:
  1. `qkv logits CHECKPOINT --out FILE` writes the logits of the first held-out examples,
  2. the weights are read with h5py (layout: docs/checkpoint.md) into the PyTorch mirror of
     nn::EncoderModel (tools/bench_vs_torch.py: make_torch_model) in eval mode,
  3. PyTorch computes the logits of the same tokens; the script prints the largest absolute
     difference and exits 1 if it exceeds --tol.
Parameter mapping (qkv -> PyTorch): blocks.<i>.attn.w_{q,k,v}.{weight,bias} -> the three blocks of
blocks.<i>.self_attn.in_proj_{weight,bias}; attn.w_o -> self_attn.out_proj; ff.fc1/fc2 ->
linear1/linear2; norm1/norm2, tok_emb, norm, head keep their names; pos.weight -> pos.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402
from bench_vs_torch import make_torch_model  # noqa: E402


def read_logits(path):
    with open(path) as f:
        N, T, V = (int(x) for x in f.readline().split())
        tokens = np.array([f.readline().split() for _ in range(N)], dtype=np.int64)
        logits = np.array([f.readline().split() for _ in range(N * T)], dtype=np.float64).reshape(N, T, V)
    return tokens, logits


def load_into_torch(ckpt):
    import torch

    with h5py.File(ckpt, "r") as f:
        cfg = yaml.safe_load(f["config"][()].decode())  # a fixed-length string: h5py gives numpy bytes
        w = {name: np.array(ds) for name, ds in f["model"].items()}
    m = cfg["model"]
    if m.get("arch", "encoder") != "encoder":
        sys.exit(f"{ckpt}: only encoder models are supported, found arch {m['arch']}")
    V, C = w["tok_emb.weight"].shape
    num_classes = w["head.weight"].shape[0]
    L = sum(1 for k in w if k.endswith(".attn.w_q.weight"))
    FF = w["blocks.0.ff.fc1.weight"].shape[0]
    learned = m.get("positional", "sinusoidal") == "learned"
    max_len = w["pos.weight"].shape[0] if learned else 4096
    model = make_torch_model(V, C, int(m["heads"]), L, FF, 0.0, max_len, num_classes=num_classes,
                             activation=m.get("activation", "gelu"), norm_first=bool(m.get("norm_first", True)),
                             learned_positions=learned)
    if m.get("head_dim", 0) not in (0, C // int(m["heads"])) or m.get("scale", 0) not in (0, 0.0):
        sys.exit("head_dim / scale overrides have no PyTorch equivalent in TransformerEncoderLayer")

    state = {"tok_emb.weight": w["tok_emb.weight"], "head.weight": w["head.weight"], "head.bias": w["head.bias"]}
    if learned:
        state["pos"] = w["pos.weight"]
    if "norm.weight" in w:
        state["norm.weight"], state["norm.bias"] = w["norm.weight"], w["norm.bias"]
    for i in range(L):
        q = f"blocks.{i}."
        a = q + "attn."
        state[q + "self_attn.in_proj_weight"] = np.concatenate([w[a + f"w_{x}.weight"] for x in "qkv"])
        state[q + "self_attn.in_proj_bias"] = np.concatenate([w[a + f"w_{x}.bias"] for x in "qkv"])
        state[q + "self_attn.out_proj.weight"] = w[a + "w_o.weight"]
        state[q + "self_attn.out_proj.bias"] = w[a + "w_o.bias"]
        for src, dst in (("ff.fc1", "linear1"), ("ff.fc2", "linear2"), ("norm1", "norm1"), ("norm2", "norm2")):
            state[q + dst + ".weight"] = w[q + src + ".weight"]
            state[q + dst + ".bias"] = w[q + src + ".bias"]
    expected = {k for k in model.state_dict() if k != "pe"}
    if set(state) != expected:
        sys.exit(f"parameter mapping mismatch: missing {expected - set(state)}, extra {set(state) - expected}")
    used = {k for k in w}
    mapped = 3 + (1 if learned else 0) + (2 if "norm.weight" in w else 0) + L * 16
    if len(used) != mapped:
        sys.exit(f"{ckpt} has {len(used)} parameters, the mapping uses {mapped}")
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, strict=False)
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", nargs="?")
    ap.add_argument("--qkv", default="build/qkv")
    ap.add_argument("--count", type=int, default=4)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    if machine.report_missing(machine.torch_missing("bench_parity"),
                              machine.executable_missing("bench_parity", args.qkv, "the qkv binary",
                                                         "make build (or pass --qkv)")):
        return 2
    tmp = tempfile.mkdtemp(prefix="qkv_parity_")
    ckpt = args.checkpoint
    if not ckpt:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        subprocess.run([args.qkv, "train", os.path.join(root, "configs/sort.yaml"), "--out", tmp, "--quiet",
                        "--set", "train.steps=30", "--set", "train.eval_every=1000",
                        "--set", "train.checkpoint_every=1000", "--set", "train.diagnostics=false",
                        "--set", "model.dropout=0.1", "--set", "schedule.warmup_steps=5", "--set", "task.eval_size=64"], check=True, stdout=subprocess.DEVNULL)
        ckpt = os.path.join(tmp, "last.h5")
    out = os.path.join(tmp, "logits.txt")
    subprocess.run([args.qkv, "logits", ckpt, "--count", str(args.count), "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    tokens, want = read_logits(out)

    import torch
    model = load_into_torch(ckpt)
    with torch.no_grad():
        got = model(torch.from_numpy(tokens)).double().numpy()
    diff = np.abs(got - want).max()
    print(f"{ckpt}: logits {want.shape}, |qkv - torch| max {diff:.3e} (tolerance {args.tol:g}), "
          f"logit scale {np.abs(want).max():.2f}")
    sys.exit(0 if diff <= args.tol else 1)


if __name__ == "__main__":
    sys.exit(main())
