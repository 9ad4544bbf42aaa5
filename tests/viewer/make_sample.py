#!/usr/bin/env python3
"""Write a sample page's data (qkv-studio-page, docs/viewer.md) with structured fake attention.

    make_sample.py --tokens N --layers L --heads H [--snapshots S] [--chinese] [--encoding float32|uint8]
                   [--arch encoder|decoder|encoder_decoder] [--causal] [--seed K] --out FILE

Head 0 attends to the previous token, head 1 to the first token, head 2 to itself, the others
are random softmax rows of varied sharpness. decoder (or --causal) masks keys after the query;
encoder_decoder writes L encoder self-attention layers, then per decoder layer a causal
self-attention and a cross-attention (target length about 3/4 of the source). With
--snapshots S the heads "form" over S training steps on a held-out example: each starts near
uniform and sharpens into its final pattern.
"""
import argparse
import base64
import json
import sys
from pathlib import Path

import numpy as np

WORDS = ("the cat sat on a mat and then it saw dog run far away from home , . every small bird "
         "sings when morning light comes over quiet hills").split()
CHINESE = "我爱吃苹果" + "猫喜欢追逐老鼠"


def tokens(n, chinese, rng, offset=0):
    if chinese:
        return [CHINESE[(i + offset) % len(CHINESE)] for i in range(n)]
    out = [WORDS[int(k)] for k in rng.integers(0, len(WORDS), size=n)]
    out[0] = "<s>"
    if n > 2:
        out[n // 2] = " "          # a whitespace token: the page shows it visibly
    if n > 1:
        out[-1] = "</s>"           # contains "</": the page must survive it inside <script>
    return out


def pattern_logits(h, Tq, Tk, kind, rng, layer):
    """(Tq, Tk) logits whose softmax is head h's pattern; strength grows with the layer."""
    L = rng.normal(0.0, 0.6, size=(Tq, Tk))
    i = np.arange(Tq)
    if kind == "cross":                      # a monotonic alignment target -> source
        j = np.minimum(Tk - 1, (i * Tk) // Tq)
        L[i, j] += 5.0 if h % 3 == 0 else 0.0
        if h % 3 == 1:
            L[:, 0] += 4.0
        if h % 3 == 2:
            L[i, np.minimum(Tk - 1, j + 1)] += 4.0
        if h >= 3:
            L = rng.normal(0.0, 1.0 + h % 4, size=(Tq, Tk))
        return L
    if h == 0:                               # previous token (query 0: itself)
        L[i, np.maximum(0, i - 1)] += 6.0
    elif h == 1:                             # first token
        L[:, 0] += 5.0
    elif h == 2:                             # itself
        L[i, np.minimum(i, Tk - 1)] += 5.0 + layer
    else:                                    # random rows, sharper for larger h
        L = rng.normal(0.0, 1.0 + (h + layer) % 4, size=(Tq, Tk))
    return L


def softmax_rows(L, causal):
    L = L.copy()
    if causal:
        Tq, Tk = L.shape
        L[np.triu(np.ones((Tq, Tk), dtype=bool), k=1)] = -np.inf
    L -= L.max(axis=1, keepdims=True)
    P = np.exp(L)
    return P / P.sum(axis=1, keepdims=True)


def scores(P):
    Tq, Tk = P.shape
    i = np.arange(Tq)
    ent = float(np.mean(-np.sum(np.where(P > 0, P * np.log(np.maximum(P, 1e-30)), 0.0), axis=1)))
    s = {"entropy": round(ent, 4), "max_weight": round(float(P.max(axis=1).mean()), 4)}
    if Tq > 1 and Tk > 1:
        s["previous_token"] = round(float(P[i[1:], np.minimum(i[1:] - 1, Tk - 1)].mean()), 4)
    s["first_token"] = round(float(P[:, 0].mean()), 4)
    d = min(Tq, Tk)
    s["self"] = round(float(P[np.arange(d), np.arange(d)].mean()), 4)
    return s


def label(s):
    names = {"previous_token": "previous-token", "first_token": "first-token", "self": "self"}
    best = max(names, key=lambda k: s.get(k, 0.0))
    return names[best] if s.get(best, 0.0) > 0.5 else ""


def b64(P, encoding="float32"):
    """base64 of the little-endian float32 weights, as the studio sends them, or of the bytes
    round(255 w) (qkv view's encoding of large inputs)."""
    if encoding == "uint8":
        return base64.b64encode(np.clip(np.rint(P * 255.0), 0, 255).astype(np.uint8).tobytes()).decode("ascii")
    return base64.b64encode(np.ascontiguousarray(P, dtype="<f4").tobytes()).decode("ascii")


def layer_specs(arch, L, n, causal):
    """(name, kind, Tq, Tk) per attention layer, in model order."""
    m = max(2, (3 * n) // 4)
    if arch == "encoder_decoder":
        specs = [(f"encoder.blocks.{i}.self_attn", "self", n, n) for i in range(L)]
        for i in range(L):
            specs += [(f"decoder.blocks.{i}.self_attn", "causal", m, m),
                      (f"decoder.blocks.{i}.cross_attn", "cross", m, n)]
        return specs
    kind = "causal" if arch == "decoder" or causal else "self"
    return [(f"blocks.{i}.attn", kind, n, n) for i in range(L)]


SCORE_NAMES = ["entropy", "max_weight", "previous_token", "first_token", "self"]


def make(args):
    """A page's data (format qkv-studio-page, docs/viewer.md): the summary /api/models gives, the
    analysis /api/analyze gives (float32 weights), the scores and labels /api/heads gives and, with
    --snapshots S, a run's metrics and the snapshots /api/snapshot gives for each step."""
    rng = np.random.default_rng(args.seed)
    n, H = args.tokens, args.heads
    specs = layer_specs(args.arch, args.layers, n, args.causal)
    src = tokens(n, args.chinese, rng)
    tgt = tokens(max(2, (3 * n) // 4), args.chinese, rng, offset=3)
    layers, finals, heads = [], [], []
    for li, (name, kind, Tq, Tk) in enumerate(specs):
        q = tgt if Tq != n or name.startswith("decoder") else src
        k = src if kind == "cross" else q
        ws, fl = [], []
        for h in range(H):
            logits = pattern_logits(h, Tq, Tk, kind, rng, li)
            P = softmax_rows(logits, kind == "causal")
            s = scores(P)
            ws.append(b64(P, getattr(args, "encoding", "float32")))
            fl.append(logits)
            heads.append(dict({"layer": name, "layer_index": li, "head": h, "kind": kind},
                              **{k2: s.get(k2) for k2 in SCORE_NAMES}, label=label(s)))
        layers.append({"name": name, "kind": kind, "query_tokens": q[:Tq], "key_tokens": k[:Tk],
                       "encoding": getattr(args, "encoding", "float32"), "weights": ws})
        finals.append(fl)
    V = 100
    summary = {"index": 0, "path": "sample.h5", "task": "sample", "arch": args.arch, "d_model": 16 * H,
               "objective": "labels", "text": True, "seq2seq": args.arch == "encoder_decoder", "tokenizer": "word",
               "mask_text": "", "context": n, "input_vocab": V, "classes": V, "with_data": False,
               "data_note": "which a sample does not have", "examples": 0, "test_examples": 0,
               "layers": [{"name": nm, "kind": kd, "heads": H, "head_dim": 16, "value_dim": 16}
                          for nm, kd, _, _ in specs],
               "suggestion": {}, "patch": {}}
    positions = [{"position": i, "prediction": int(rng.integers(0, V)), "token": src[i], "p": 0.5} for i in range(n)]
    doc = {
        "format": "qkv-studio-page", "version": 1,
        "title": args.title or f"sample: {n} tokens, {len(specs)} attention layers x {H} heads (fake patterns)",
        "input": {"text": " ".join(src)},
        "models": {"models": [summary], "run": False},
        "analysis": {"tokens": src, "ids": [int(x) for x in rng.integers(0, V, size=n)], "note": "", "ablated": [],
                     "mode": "zero", "layers": layers,
                     "answer": {"kind": "labels", "positions": positions},
                     "loss": None, "scored": 0, "token_accuracy": None},
        "heads": {"examples": 64, "score_names": SCORE_NAMES, "heads": heads, "baselines": {}, "similarity": None},
        "heads_note": "", "run": None, "snapshots": None,
    }
    if args.snapshots:
        S = args.snapshots
        steps = [int(round(x)) for x in np.linspace(0, 100 * (S - 1) * 5, S)] if S > 1 else [0]
        snaps = [{"index": si, "step": steps[si], "steps": S, "example": 0, "layers": [], "note": ""} for si in range(S)]
        for (name, kind, Tq, Tk), fl in zip(specs, finals):
            # held-out example: same lengths, other tokens
            hq = tokens(Tq, args.chinese, rng, offset=5)
            hk = hq if kind != "cross" else tokens(Tk, args.chinese, rng, offset=7)
            noise = [rng.normal(0.0, 1.0, size=logits.shape) for logits in fl]
            for si in range(S):
                p = si / (S - 1) if S > 1 else 1.0
                Ps = [softmax_rows(p * p * logits + 0.3 * (1 - p) * z, kind == "causal") for logits, z in zip(fl, noise)]
                snaps[si]["layers"].append({"name": name, "kind": kind, "query_tokens": hq, "key_tokens": hk,
                                            "weights": [b64(P) for P in Ps], "scores": [scores(P) for P in Ps]})
        doc["snapshots"] = snaps
        doc["run"] = {"dir": "sample-run", "metrics": {"columns": ["step", "train_loss", "eval_loss"],
                                                        "rows": [[s, 3.0 / (1 + i), 3.2 / (1 + i)] for i, s in enumerate(steps)]},
                      "metrics_note": "", "snapshots": None, "snapshots_note": ""}
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--snapshots", type=int, default=0)
    ap.add_argument("--chinese", action="store_true")
    ap.add_argument("--arch", choices=("encoder", "decoder", "encoder_decoder"), default="encoder")
    ap.add_argument("--causal", action="store_true", help="causal self-attention (implied by --arch decoder)")
    ap.add_argument("--encoding", choices=("float32", "uint8"), default="float32",
                    help="how the input's weights travel (qkv view: uint8 above 4 Mi weights)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--title", default="")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    for f in ("tokens", "layers", "heads"):
        if getattr(a, f) < 1:
            ap.error(f"--{f}: expected a whole number >= 1, found {getattr(a, f)}")
    if a.snapshots < 0:
        ap.error(f"--snapshots: expected a whole number >= 0, found {a.snapshots}")
    doc = make(a)
    a.out.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    print(f"make_sample: wrote {a.out} ({a.out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
