#!/usr/bin/python3
"""Every kind of qkv model rebuilt from docs/models.md alone, in float64 numpy, and compared with
qkv's own numbers.

    rebuild_from_docs.py --qkv BUILD/qkv [--workdir DIR]

The model below is written from the page, not from the sources: the forward passes, the keys each
query may attend, the sizes and parameter names, the loss and its reductions, the accuracies, and
the random draws. It trains tiny models of every kind with the build's `qkv train` (seconds each),
reads their checkpoints with h5py, and checks, for each model:

- the parameter names and shapes against the page's tables (and their order, through `import qkv`);
- the logits of the validation set against `import qkv` (all rows) and `qkv logits` (the first
  rows), to LOGIT_TOL;
- every layer's attention weights against the `hook_pattern` points and `qkv attention`'s CSV
  (whose token columns are ids), to PATTERN_TOL;
- the held-out loss against `m.evaluate` and `qkv eval`, to LOSS_TOL (plus `qkv eval`'s rounding);
- token and sequence accuracy: exactly from qkv's logits, within ACC_TOL from the rebuilt ones
  (float32 and float64 may break a near tie differently);
- the validation batches of the sort, seq2seq and text models regenerated from the seed and the
  documented draws, bit for bit, masks of the masked text model included;
- the grammar's masks: each held-out row's masks found at exactly one offset of the row's generator
  (the page says they follow the row's sentence draws; mask_rate 0.4 makes a chance match
  impossible in practice);
- a training step's loss with label smoothing and its token accuracy against metrics.csv;
- the rows of typed text (docs/tasks.md, "Rows from text") against `m.to_tokens`, and `qkv fill`'s
  output line by line (docs/instruments.md) from the rebuilt model.

It also checks that it can fail: the grammar encoder rebuilt without its pad-key masking misses
qkv's logits by far more than LOGIT_TOL. Where a number cannot be reproduced from the page, the page
is incomplete: fix the page, not this test.

Needs /usr/bin/python3 with numpy and h5py, and the Python module (BUILD/python). Without the
module it prints "[qkv] SKIPPED: ..." and exits 0, except under CI=true, where it fails.
"""
import argparse
import json
import math
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

SOURCE = pathlib.Path(__file__).resolve().parents[2]
LOGIT_TOL = 2e-5     # float32 (qkv) against float64 (here), absolute, on logits of size ~1-10 (seen: 1e-6)
PATTERN_TOL = 1e-5   # attention weights, absolute (seen: 7e-7, qkv attention prints 6 digits)
LOSS_TOL = 2e-6      # held-out and training losses, absolute (seen: 2e-7)
ACC_TOL = 0.02       # accuracies from the rebuilt logits (near ties may break the other way)
IGNORE = -100


# ---------------------------------------------------------------------------------------------
# Random draws (docs/models.md, "Random draws")

MASK64 = (1 << 64) - 1


def hash64(s, c):
    z = (s * 0x9E3779B97F4A7C15 + c * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def hash64_many(s, c):
    """hash64(s, c) for an array c of uint64 counters."""
    u = np.uint64
    with np.errstate(over="ignore"):
        z = u(s) * u(0x9E3779B97F4A7C15) + c * u(0xD1B54A32D192ED03) + u(0x632BE59BD9B4E019)
        z = (z ^ (z >> u(30))) * u(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> u(27))) * u(0x94D049BB133111EB)
        return z ^ (z >> u(31))


class Generator:
    def __init__(self, seed, offset=0):
        self.seed, self.offset = seed, offset

    def draw(self):
        v = hash64(self.seed, self.offset)
        self.offset += 1
        return v

    def randint(self, n):
        return self.draw() % n

    def uniform(self):
        return (self.draw() >> 40) / float(1 << 24)


def example_generator(seed, stream, k):
    """Example k of stream 0 (training), 1 (validation) or 2 (test)."""
    return Generator(hash64(hash64(seed, stream), k))


def round_half_away(x):
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def mask_tokens(gen, tokens, rate, mask_id, n_random):
    n = len(tokens)
    m = min(n, max(1, round_half_away(rate * n)))
    order = list(range(n))
    target = [IGNORE] * n
    for i in range(m):
        j = i + gen.randint(n - i)
        order[i], order[j] = order[j], order[i]
        p = order[i]
        target[p] = tokens[p]
        u = gen.uniform()
        if u < 0.8:
            tokens[p] = mask_id
        elif u < 0.9:
            tokens[p] = gen.randint(n_random)
    return target


def mask_offsets(seed, inputs, targets, n, rate, mask_id, n_random, limit):
    """Every offset o < limit of Generator(seed) from which mask_tokens turns the row's original
    tokens (targets where chosen, inputs elsewhere) into `inputs` and `targets`: mask_tokens run
    on all offsets at once, keeping the offsets that agree with the row after each choice."""
    m = min(n, max(1, round_half_away(rate * n)))
    chosen = targets[:n] != IGNORE
    assert int(chosen.sum()) == m, f"{int(chosen.sum())} positions chosen among {n} tokens, the page says {m}"
    original = np.where(chosen, targets[:n], inputs[:n])
    u64 = np.uint64
    start = np.arange(limit, dtype=u64)
    at = start.copy()
    order = np.tile(np.arange(n, dtype=np.int32), (limit, 1))
    for i in range(m):
        j = i + (hash64_many(seed, at) % u64(n - i)).astype(np.int64)
        rows = np.arange(len(at))
        held = order[rows, i].copy()
        order[rows, i] = order[rows, j]
        order[rows, j] = held
        p = order[:, i]
        u = (hash64_many(seed, at + u64(1)) >> u64(40)).astype(np.float64) / float(1 << 24)
        at = at + u64(2)
        drawn = (hash64_many(seed, at) % u64(n_random)).astype(np.int64)
        random_id = (u >= 0.8) & (u < 0.9)
        expected = np.where(u < 0.8, mask_id, np.where(random_id, drawn, original[p]))
        at = at + random_id.astype(u64)
        keep = chosen[p] & (inputs[p] == expected)
        start, at, order = start[keep], at[keep], order[keep]
    return start


# ---------------------------------------------------------------------------------------------
# The model (docs/models.md, "The pieces" and one section per kind)

_erf = np.vectorize(math.erf, otypes=[np.float64])


class Rebuilt:
    """A checkpoint's model in float64, as the page describes it."""

    def __init__(self, path):
        with h5py.File(path, "r") as f:
            self.cfg = parse_config(f["config"][()].decode())
            self.W = {}
            f["model"].visititems(lambda name, d: self.W.__setitem__(name, d[()].astype(np.float64))
                                  if isinstance(d, h5py.Dataset) else None)
            self.tokenizer = f["data"].attrs["tokenizer"].decode() if "data" in f else None
            self.vocab = f["data/vocab"][()] if "data" in f else None
        m, t = self.cfg["model"], self.cfg["task"]
        self.arch, self.C, self.H = m["arch"], m["d_model"], m["heads"]
        self.D = m["head_dim"] or self.C // self.H
        self.Dv = m["value_dim"] or self.D
        self.scale = m["scale"] or 1.0 / math.sqrt(self.D)
        self.pre_ln = m["norm_first"]
        self.attn_only, self.tied = m["attn_only"], m["tie_embeddings"]
        self.positional, self.act = m["positional"], m["activation"]
        self.L = m["layers"]
        self.task = t["name"]
        self.sizes = task_sizes(self.cfg, self.vocab, self.tokenizer)
        self.mask_pads = True

    # pieces
    def ln(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * self.W[name + ".weight"] + self.W[name + ".bias"]

    def linear(self, x, name, bias=True):
        y = x @ self.W[name + ".weight"].T
        return y + self.W[name + ".bias"] if bias else y

    def ff(self, x, name):
        h = self.linear(x, name + ".fc1")
        h = 0.5 * h * (1 + _erf(h / math.sqrt(2))) if self.act == "gelu" else np.maximum(h, 0)
        return self.linear(h, name + ".fc2")

    def positions(self, name, T):
        if self.positional == "learned":
            return self.W[name][:T]
        if self.positional == "sinusoidal":
            t = np.arange(T)[:, None].astype(np.float64)
            j = np.arange(self.C)[None, :]
            angle = t * 10000.0 ** (-(j - j % 2) / self.C)
            return np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
        return 0.0

    def rope(self, x):
        D, T = x.shape[-1], x.shape[-2]
        theta = 10000.0 ** (-2.0 * np.arange(D // 2) / D)
        angle = np.arange(T)[:, None] * theta[None, :]
        cos, sin = np.cos(angle), np.sin(angle)
        a, b = x[..., : D // 2], x[..., D // 2:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    def attention(self, name, x, mem, allowed, rotary=False):
        B, Tq, Tk, H = x.shape[0], x.shape[1], mem.shape[1], self.H
        q = self.linear(x, name + ".w_q").reshape(B, Tq, H, self.D).transpose(0, 2, 1, 3)
        k = self.linear(mem, name + ".w_k").reshape(B, Tk, H, self.D).transpose(0, 2, 1, 3)
        v = self.linear(mem, name + ".w_v").reshape(B, Tk, H, self.Dv).transpose(0, 2, 1, 3)
        if rotary:
            q, k = self.rope(q), self.rope(k)
        S = self.scale * (q @ k.transpose(0, 1, 3, 2))
        allowed = np.broadcast_to(allowed, S.shape)
        S = np.where(allowed, S, -np.inf)
        top = S.max(-1, keepdims=True)
        e = np.where(allowed, np.exp(S - np.where(np.isfinite(top), top, 0.0)), 0.0)
        total = e.sum(-1, keepdims=True)
        P = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
        z = (P @ v).transpose(0, 2, 1, 3).reshape(B, Tq, H * self.Dv)
        self.patterns[name] = P
        return self.linear(z, name + ".w_o")

    def encoder_block(self, p, h, allowed, rotary=False):
        a = lambda x: self.attention(p + "attn", x, x, allowed, rotary)
        if self.pre_ln:
            h = h + a(self.ln(h, p + "norm1"))
            return h if self.attn_only else h + self.ff(self.ln(h, p + "norm2"), p + "ff")
        h = self.ln(h + a(h), p + "norm1")
        return h if self.attn_only else self.ln(h + self.ff(h, p + "ff"), p + "norm2")

    def decoder_block(self, p, h, memory, causal):
        everything = np.ones((1, 1, h.shape[1], memory.shape[1]), bool)
        sa = lambda x: self.attention(p + "self_attn", x, x, causal)
        ca = lambda x: self.attention(p + "cross_attn", x, memory, everything)
        if self.pre_ln:
            h = h + sa(self.ln(h, p + "norm1"))
            h = h + ca(self.ln(h, p + "norm2"))
            return h + self.ff(self.ln(h, p + "norm3"), p + "ff")
        h = self.ln(h + sa(h), p + "norm1")
        h = self.ln(h + ca(h), p + "norm2")
        return self.ln(h + self.ff(h, p + "ff"), p + "norm3")

    # the three kinds
    def logits(self, batch):
        """(B, T, columns) for a batch dict; self.patterns: every layer's weights by layer name."""
        self.patterns = {}
        x = np.asarray(batch["inputs"])
        if self.arch == "encoder":
            return self.encoder(x)
        if self.arch == "decoder":
            return self.decoder(x)
        return self.seq2seq(x, np.asarray(batch["decoder_inputs"]))

    def encoder(self, x):
        B, T = x.shape
        h = self.W["tok_emb.weight"][x] + self.positions("pos.weight", T)
        allowed = np.ones((1, 1, T, T), bool)
        if self.task == "grammar" and self.mask_pads:
            allowed = (x != self.sizes["pad"])[:, None, None, :]
        for l in range(self.L):
            h = self.encoder_block(f"blocks.{l}.", h, allowed)
        if self.pre_ln:
            h = self.ln(h, "norm")
        return self.linear(h, "head")

    def decoder(self, x):
        B, T = x.shape
        E = self.W["tok_emb.weight"]
        h = E[x] * (math.sqrt(self.C) if self.tied else 1.0) + self.positions("pos.weight", T)
        causal = np.tril(np.ones((T, T), bool))[None, None]
        for l in range(self.L):
            h = self.encoder_block(f"blocks.{l}.", h, causal, rotary=self.positional == "rope")
        if self.pre_ln:
            h = self.ln(h, "norm")
        return h @ (E if self.tied else self.W["head.weight"]).T

    def seq2seq(self, src, dec):
        Ts, Tt = src.shape[1], dec.shape[1]
        h = self.W["src_emb.weight"][src] + self.positions("src_pos.weight", Ts)
        everything = np.ones((1, 1, Ts, Ts), bool)
        for l in range(self.L):
            h = self.encoder_block(f"encoder.blocks.{l}.", h, everything)
        memory = self.ln(h, "encoder.norm") if self.pre_ln else h
        h = self.W["tgt_emb.weight"][dec] + self.positions("tgt_pos.weight", Tt)
        causal = np.tril(np.ones((Tt, Tt), bool))[None, None]
        for l in range(self.L):
            h = self.decoder_block(f"decoder.blocks.{l}.", h, memory, causal)
        if self.pre_ln:
            h = self.ln(h, "decoder.norm")
        return self.linear(h, "head")

    def predict(self, batch, logits):
        """docs/models.md, "Accuracy": argmax, or greedy decoding for seq2seq with a BOS."""
        bos = self.sizes.get("bos")
        if self.arch != "encoder_decoder" or bos is None:
            return logits.argmax(-1)
        B, Tt = np.asarray(batch["targets"]).shape
        prefix = np.full((B, 1), bos)
        out = np.zeros((B, Tt), np.int64)
        for t in range(Tt):
            step = self.logits({"inputs": batch["inputs"], "decoder_inputs": prefix})
            out[:, t] = step[:, -1].argmax(-1)
            prefix = np.concatenate([prefix, out[:, t:t + 1]], axis=1)
        return out

    def expected_parameters(self):
        """(name, shape) in the order of the page's parameter tables."""
        C, H, D, Dv, F = self.C, self.H, self.D, self.Dv, self.cfg["model"]["d_ff"]
        s = self.sizes

        def attn(p):
            return [(p + "w_q.weight", (H * D, C)), (p + "w_q.bias", (H * D,)), (p + "w_k.weight", (H * D, C)),
                    (p + "w_k.bias", (H * D,)), (p + "w_v.weight", (H * Dv, C)), (p + "w_v.bias", (H * Dv,)),
                    (p + "w_o.weight", (C, H * Dv)), (p + "w_o.bias", (C,))]

        def norm(p):
            return [(p + ".weight", (C,)), (p + ".bias", (C,))]

        ff = lambda p: [(p + "ff.fc1.weight", (F, C)), (p + "ff.fc1.bias", (F,)), (p + "ff.fc2.weight", (C, F)),
                        (p + "ff.fc2.bias", (C,))]

        def encoder_block(p):
            if self.attn_only:
                return attn(p + "attn.") + norm(p + "norm1")
            return attn(p + "attn.") + ff(p) + norm(p + "norm1") + norm(p + "norm2")

        learned = self.positional == "learned"
        if self.arch == "encoder_decoder":
            rows = max(1024, s["T"], s["Tt"])
            out = [("src_emb.weight", (s["input"], C)), ("tgt_emb.weight", (s["target"], C))]
            out += [("src_pos.weight", (rows, C)), ("tgt_pos.weight", (rows, C))] if learned else []
            for l in range(self.L):
                out += encoder_block(f"encoder.blocks.{l}.")
            out += norm("encoder.norm") if self.pre_ln else []
            for l in range(self.L):
                p = f"decoder.blocks.{l}."
                out += attn(p + "self_attn.") + attn(p + "cross_attn.") + ff(p)
                out += norm(p + "norm1") + norm(p + "norm2") + norm(p + "norm3")
            out += norm("decoder.norm") if self.pre_ln else []
            return out + [("head.weight", (s["columns"], C)), ("head.bias", (s["columns"],))]
        rows = s["T"] if self.arch == "decoder" else max(1024, s["T"])
        out = [("tok_emb.weight", (s["input"], C))] + ([("pos.weight", (rows, C))] if learned else [])
        for l in range(self.L):
            out += encoder_block(f"blocks.{l}.")
        out += norm("norm") if self.pre_ln else []
        if self.arch == "decoder":
            return out + ([] if self.tied else [("head.weight", (s["columns"], C))])
        return out + [("head.weight", (s["columns"], C)), ("head.bias", (s["columns"],))]


def task_sizes(cfg, vocab, tokenizer):
    """docs/models.md, "Sizes from the task"."""
    t, arch = cfg["task"], cfg["model"]["arch"]
    name, V, T = t["name"], t["vocab"], t["length"]
    if tokenizer is not None:  # text and grammar: the tokenizer's size, <unk> included
        V = 256 if tokenizer == "byte" else (len(vocab) + 1 if tokenizer == "char" else
                                             int(np.sum(np.asarray(vocab) == ord("\n"))) + 2)
    masked = t["objective"] == "masked"
    if name in ("copy", "reverse", "sort", "mqar", "induction"):
        return {"input": V, "columns": V, "classes": V, "T": T}
    if name == "recall":
        return {"input": 2 * V, "columns": V, "classes": V, "T": 2 * t["pairs"] + (t["queries"] or t["pairs"])}
    if name == "mod_add":
        return {"input": V + 1, "columns": V + 1 if arch == "decoder" else V, "classes": V, "T": 3}
    if name == "text":
        return ({"input": V + 1, "columns": V, "classes": V, "T": T, "mask": V} if masked else
                {"input": V, "columns": V, "classes": V, "T": T})
    if name == "grammar":
        return ({"input": V + 2, "columns": V, "classes": V, "T": T, "pad": V, "mask": V + 1} if masked else
                {"input": V + 1, "columns": V + 1, "classes": V, "T": T, "pad": V})
    if name in ("seq2seq_reverse", "seq2seq_sort"):
        return {"input": V, "target": V + 1, "columns": V + 1, "classes": V, "T": T, "Tt": T, "bos": V}
    if name == "seq2seq_recall":
        q = t["queries"] or t["pairs"]
        return {"input": 2 * V, "target": V, "columns": V, "classes": V, "T": 2 * t["pairs"], "Tt": q}
    raise AssertionError(f"task {name} is not in the page's table")


def parse_config(text):
    """The checkpoint's /config: a top-level `seed` and sections of `key: value` lines."""
    cfg, section = {}, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if not line.startswith(" ") and value == "":
            section = cfg.setdefault(key, {})
            continue
        if value.startswith('"'):
            v = json.loads(value)
        elif value in ("true", "false"):
            v = value == "true"
        elif re.fullmatch(r"-?\d+", value):
            v = int(value)
        else:
            v = float(value)
        (section if line.startswith(" ") else cfg)[key] = v
    return cfg


def cross_entropy(logits, targets, smoothing=0.0):
    """docs/models.md, "The loss": per scored position, and their mean."""
    x = logits.reshape(-1, logits.shape[-1])
    y = np.asarray(targets).reshape(-1)
    scored = y != IGNORE
    x, y = x[scored], y[scored]
    top = x.max(-1, keepdims=True)
    lse = (top + np.log(np.exp(x - top).sum(-1, keepdims=True)))[:, 0]
    per = (1 - smoothing) * (lse - x[np.arange(len(y)), y]) + smoothing * (lse - x.mean(-1))
    return per.mean(), int(scored.sum())


def accuracies(pred, targets):
    """Token accuracy over scored positions; sequence accuracy over examples."""
    y = np.asarray(targets)
    scored = y != IGNORE
    right = (pred == y) | ~scored
    return float((pred == y)[scored].mean()), float(right.all(axis=1).mean())


# ---------------------------------------------------------------------------------------------
# The command and the module


class Qkv:
    def __init__(self, path, workdir):
        self.path, self.workdir = pathlib.Path(path), pathlib.Path(workdir)
        self.env = dict(os.environ, OMP_WAIT_POLICY="passive")

    def run(self, *args):
        r = subprocess.run([str(self.path), *map(str, args)], capture_output=True, text=True, env=self.env)
        if r.returncode != 0:
            raise AssertionError(f"qkv {' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r.stdout

    def train(self, name, config, *overrides, extra=()):
        out = self.workdir / name
        sets = [a for o in overrides for a in ("--set", o)]
        self.run("train", config, *sets, *extra, "--out", out, "--overwrite", "--quiet", "--threads", "1")
        return out

    def eval_loss(self, ckpt):
        """The validation column of `qkv eval`'s loss line."""
        out = self.run("eval", ckpt, "--threads", "1")
        line = next(l for l in out.splitlines() if re.match(r"\s*(masked )?loss \(nats/token\)", l))
        return float(line.split(")")[1].split()[0])

    def logits(self, ckpt, count):
        f = self.workdir / "logits.txt"
        self.run("logits", ckpt, "--out", f, "--count", count)
        lines = f.read_text().splitlines()
        N, T, V = map(int, lines[0].split())
        inputs = np.array([[int(v) for v in l.split()] for l in lines[1:1 + N]])
        values = np.array([[float(v) for v in l.split()] for l in lines[1 + N:]]).reshape(N, T, V)
        return inputs, values

    def attention(self, ckpt, example):
        f = self.workdir / "attention.csv"
        self.run("attention", ckpt, "--example", example, "--out", f)
        rows = [l.split(",") for l in f.read_text().splitlines()[1:]]
        return [(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]), float(r[6])) for r in rows]


class Checks:
    def __init__(self):
        self.failures, self.count = [], 0

    def __call__(self, ok, what):
        self.count += 1
        print(("  ok    " if ok else "  FAIL  ") + what)
        if not ok:
            self.failures.append(what)


def compare_model(check, qkv_cli, qkv, ckpt, label, regenerated=None):
    """Everything the page lets a rebuild compare, for one checkpoint."""
    print(f"{label}: {ckpt}")
    r = Rebuilt(ckpt)
    m = qkv.load(str(ckpt))
    expected = r.expected_parameters()
    got = [(k, tuple(v.shape)) for k, v in m.state_dict().items()]
    check(got == expected, f"{label}: parameter names, shapes and order as the page's tables ({len(expected)})")
    if got != expected:
        print("    page:", expected, "\n    qkv: ", got)
        return r, m, None, None
    batch = m.held_out("validation")
    if regenerated is not None:
        same = all(np.array_equal(batch[k], regenerated[k]) for k in regenerated)
        check(same, f"{label}: the validation batch regenerated from the seed and the documented draws "
                    f"({', '.join(regenerated)})")
    ours = r.logits(batch)
    theirs, cache = m.run_with_cache(batch, names_filter="*.hook_pattern")
    gap = float(np.abs(ours - theirs).max())
    check(gap < LOGIT_TOL, f"{label}: logits of {len(batch['inputs'])} validation rows {ours.shape}, "
                           f"largest difference {gap:.2e} (< {LOGIT_TOL})")
    worst = max(float(np.abs(r.patterns[name] - cache[name + ".hook_pattern"]).max()) for name in r.patterns)
    check(sorted(r.patterns) == sorted(n[:-len(".hook_pattern")] for n in cache) and worst < PATTERN_TOL,
          f"{label}: attention weights of {len(r.patterns)} layers, largest difference {worst:.2e} (< {PATTERN_TOL})")
    if r.arch != "encoder_decoder":
        inputs, values = qkv_cli.logits(ckpt, 4)
        gap = float(np.abs(values - ours[:4]).max())
        check(np.array_equal(inputs, batch["inputs"][:4]) and gap < LOGIT_TOL,
              f"{label}: qkv logits (4 rows), largest difference {gap:.2e}")
    rows = qkv_cli.attention(ckpt, 1)
    token_ok, gap = True, 0.0
    for layer, h, i, j, qt, kt, w in rows:
        q_ids = batch["decoder_inputs"][1] if layer.startswith("decoder.") else batch["inputs"][1]
        k_ids = batch["decoder_inputs"][1] if ".self_attn" in layer else batch["inputs"][1]
        token_ok &= q_ids[i] == qt and k_ids[j] == kt
        gap = max(gap, abs(r.patterns[layer][1, h, i, j] - w))
    check(token_ok and gap < PATTERN_TOL, f"{label}: qkv attention --example 1 ({len(rows)} rows: token columns "
                                          f"are the ids), largest difference {gap:.2e}")
    loss, n = cross_entropy(ours, batch["targets"])
    metrics = m.evaluate(batch)
    printed = qkv_cli.eval_loss(ckpt)
    check(abs(loss - metrics["loss"]) < LOSS_TOL and abs(loss - printed) < LOSS_TOL + 5e-7,
          f"{label}: held-out loss over {n} scored positions {loss:.7f}, m.evaluate {metrics['loss']:.7f}, "
          f"qkv eval {printed:.6f}")
    acc_qkv = accuracies(r.predict(batch, theirs) if r.arch != "encoder_decoder" else qkv_greedy(m, r, batch),
                         batch["targets"])
    acc_ours = accuracies(r.predict(batch, ours), batch["targets"])
    exact = acc_qkv == (metrics["token_accuracy"], metrics["sequence_accuracy"])
    near = all(abs(a - b) <= ACC_TOL for a, b in zip(acc_ours, acc_qkv))
    check(exact and near, f"{label}: token and sequence accuracy {acc_qkv} from qkv's logits = m.evaluate's "
                          f"{metrics['token_accuracy']:.4f}, {metrics['sequence_accuracy']:.4f}; rebuilt {acc_ours}")
    return r, m, batch, theirs


def qkv_greedy(m, r, batch):
    """Greedy decoding (the page's rule) on qkv's own logits: the decoder reads BOS and the
    predictions so far; a causal decoder's last position depends on nothing after it."""
    if r.sizes.get("bos") is None:
        return m.run_with_hooks(batch).argmax(-1)
    B, Tt = batch["targets"].shape
    prefix = np.full((B, 1), r.sizes["bos"])
    out = np.zeros((B, Tt), np.int64)
    for t in range(Tt):
        step = m.run_with_hooks({"inputs": batch["inputs"], "decoder_inputs": prefix})
        out[:, t] = step[:, -1].argmax(-1)
        prefix = np.concatenate([prefix, out[:, t:t + 1]], axis=1)
    return out


def vocabulary(r):
    """Labels of the tokenizer's ids 0..V-2 (docs/checkpoint.md: char code points; word: the words
    joined by newlines), then <unk>."""
    text = "".join(chr(c) for c in r.vocab)
    return (text.split("\n") if r.tokenizer == "word" else list(text)) + ["<unk>"]


def grammar_row(r, text):
    """docs/tasks.md, "Rows from text": a masked text is tokenized as it stands, each [MASK] the
    mask token, the full stop appended; otherwise sentences as the grammar writes them (English
    lower-cased, a glued full stop split off, one added when missing), no padding."""
    words = vocabulary(r)
    ids = {w: i for i, w in enumerate(words[:-1])}
    stop = "。" if r.tokenizer == "char" else "."
    if "[MASK]" in text:
        row = []
        for n, piece in enumerate(text.split("[MASK]")):
            row += ([r.sizes["mask"]] if n else []) + [ids[w] for w in (list(piece) if r.tokenizer == "char" else piece.split())]
        return row + ([] if row[-1] == ids[stop] else [ids[stop]])
    if r.tokenizer == "char":
        tokens = [c for c in text if not c.isspace()]
    else:
        tokens = text.lower().split()
        if tokens[-1] != "." and tokens[-1].endswith("."):
            tokens[-1:] = [tokens[-1][:-1], "."]
    return [ids[w] for w in tokens] + ([] if tokens[-1] == stop else [ids[stop]])


def check_rows_and_fill(check, cli, m, r, ckpt, label, texts, fill_text, k=3):
    """The rows of typed text, and qkv fill's output (docs/instruments.md) from the rebuilt model."""
    for text in texts:
        ours, theirs = grammar_row(r, text), m.to_tokens(text)[0].tolist()
        check(ours == theirs, f"{label}: the row of {text!r} as docs/tasks.md builds it: {ours}")
    row = np.array([grammar_row(r, fill_text)])
    logits = r.logits({"inputs": row})[0]
    labels = vocabulary(r)
    out = cli.run("fill", ckpt, "--text", fill_text, "--top-k", k, "--threads", "1").split("\n")
    expected = [f"{ckpt}: {fill_text}"]
    best = []
    masks = [t for t in range(row.shape[1]) if row[0, t] == r.sizes["mask"]]
    got_p, want_p = [], []
    for i, t in enumerate(masks):
        z = logits[t] - logits[t].max()
        prob = np.exp(z) / np.exp(z).sum()
        top = sorted(range(len(prob)), key=lambda c: (-prob[c], c))[:k]
        printed = re.findall(r"  (\S+) (\d\.\d{4})", out[1 + i].split(":", 1)[1])
        expected.append(f"  mask {i + 1} (position {t}):" + "".join(f"  {labels[c]} {prob[c]:.4f}" for c in top))
        got_p += [float(v) for _, v in printed]
        want_p += [prob[c] for c in top]
        out[1 + i] = f"  mask {i + 1} (position {t}):" + "".join(f"  {w} {prob[c]:.4f}" for (w, _), c in zip(printed, top))
    space = " " if r.tokenizer == "word" else ""
    for t in range(row.shape[1]):
        c = int(row[0, t])
        best.append(labels[logits[t].argmax() if c == r.sizes["mask"] else c] + space)
    expected.append("most likely: " + "".join(best))
    close = len(got_p) == len(want_p) and np.allclose(got_p, want_p, atol=5e-5 + LOGIT_TOL)
    check(out[:len(expected)] == expected and close,
          f"{label}: qkv fill --text {fill_text!r} line by line as docs/instruments.md describes it "
          f"(labels, order, probabilities to 4 decimals), last line {expected[-1]!r}")


# ---------------------------------------------------------------------------------------------
# Data the page lets us regenerate


def corpus_text():
    """A small English corpus (the test's own, drawn with Python's random)."""
    rng = random.Random(7)
    words = ("the cat dog bird sees eats likes a red small big old house tree river walks runs "
             "fast slowly near under over and but then every morning night").split()
    lines = []
    for _ in range(700):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))).capitalize() + ".")
    return "\n".join(lines) + "\n"


def text_splits(text, cfg):
    """docs/text.md: a char tokenizer over the training split; contiguous splits."""
    n = len(text)
    n_val = min(n, math.floor(n * cfg["val_fraction"] + n * 1e-12))
    n_test = min(n - n_val, math.floor(n * cfg["test_fraction"] + n * 1e-12))
    n_train = n - n_val - n_test
    chars = sorted(set(text[:n_train]))
    index = {c: i for i, c in enumerate(chars)}
    unk = len(chars)
    ids = [index.get(c, unk) for c in text]
    return ids[:n_train], ids[n_train:n_train + n_val], len(chars) + 1


def regenerate_text(text, cfg, seed):
    """The validation batch of a text task: windows tiled over the split (masked: then masked)."""
    t = cfg["task"]
    T, masked = t["length"], t["objective"] == "masked"
    _, val, V = text_splits(text, t)
    windows = len(val) // T if masked else (len(val) - 1) // T
    rows, targets = [], []
    for k in range(min(windows, t["eval_size"])):
        if masked:
            tokens = val[k * T:(k + 1) * T]
            targets.append(mask_tokens(example_generator(seed, 1, k), tokens, t["mask_rate"], V, V - 1))
        else:
            tokens, targets_k = val[k * T:k * T + T], val[k * T + 1:k * T + T + 1]
            targets.append(targets_k)
        rows.append(tokens)
    return {"inputs": np.array(rows), "targets": np.array(targets)}


def regenerate_labelling(cfg, seed, stream, first, count):
    """sort, reverse, copy and their seq2seq twins: T draws randint(V) per example."""
    t = cfg["task"]
    V, T, name = t["vocab"], t["length"], t["name"]
    inputs = []
    for k in range(first, first + count):
        g = example_generator(seed, stream, k)
        inputs.append([g.randint(V) for _ in range(T)])
    inputs = np.array(inputs)
    targets = np.sort(inputs, axis=1) if name.endswith("sort") else inputs[:, ::-1] if name.endswith("reverse") else inputs
    out = {"inputs": inputs, "targets": targets}
    if name.startswith("seq2seq"):
        out["decoder_inputs"] = np.concatenate([np.full((count, 1), V), targets[:, :-1]], axis=1)
    return out


# ---------------------------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qkv", required=True, help="the build's qkv command")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args(argv)
    build = pathlib.Path(a.qkv).resolve().parent
    sys.path.insert(0, str(build / "python"))
    try:
        import qkv
    except ImportError as e:
        why = f"the Python module is not built in {build} ({e})"
        if os.environ.get("CI") == "true":
            print(f"required under CI=true, but not available: {why}")
            return 1
        print(f"[qkv] SKIPPED: {why}")
        return 0
    qkv.set_num_threads(1)
    work = pathlib.Path(a.workdir or build / "tests" / "tmp" / "rebuild_from_docs")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cli = Qkv(a.qkv, work)
    check = Checks()
    corpus = work / "corpus.txt"
    text = corpus_text()
    corpus.write_text(text, encoding="utf-8")
    small = ["model.d_model=32", "model.d_ff=64", "model.layers=2", "train.batch_size=16", "train.steps=40",
             "schedule.warmup_steps=5", "train.eval_every=40", "task.eval_size=24"]
    configs = SOURCE / "configs"

    # A masked grammar encoder (pre-LN, learned positions): the pad keys, and the masks' draws.
    run = cli.train("grammar", configs / "grammar_zh.yaml", *small, "task.mask_rate=0.4")
    r, m, batch, theirs = compare_model(check, cli, qkv, run / "best.h5", "grammar encoder")
    if batch is None:
        return 1
    r.mask_pads = False
    gap = float(np.abs(r.logits(batch) - theirs).max())
    check(gap > 10 * LOGIT_TOL, f"grammar encoder: without the pad-key masking the rebuilt logits miss qkv's by "
                                f"{gap:.2e} (the check can fail)")
    r.mask_pads = True
    chunk = r.cfg["train"]["batch_size"] // r.cfg["train"]["accumulate"]
    means = [cross_entropy(r.logits({"inputs": batch["inputs"][i:i + chunk]}), batch["targets"][i:i + chunk])[0]
             for i in range(0, len(batch["inputs"]), chunk)]
    check(abs(np.mean(means) - m.evaluate(batch)["loss"]) > 10 * LOSS_TOL,
          f"grammar encoder: the mean of the {len(means)} batch means misses the held-out loss by "
          f"{abs(np.mean(means) - m.evaluate(batch)['loss']):.2e} (the reduction matters)")
    seed, pad, mask = r.cfg["seed"], r.sizes["pad"], r.sizes["mask"]
    for split, stream in (("validation", 1), ("test", 2)):
        rows = m.held_out(split, 6)
        found = []
        for k in range(len(rows["inputs"])):
            n = int((rows["inputs"][k] != pad).sum())
            found.append(mask_offsets(hash64(hash64(seed, stream), k), rows["inputs"][k], rows["targets"][k], n,
                                      r.cfg["task"]["mask_rate"], mask, r.sizes["classes"] - 1, 100000))
        check(all(len(f) == 1 for f in found),
              f"grammar encoder: the masks of {len(found)} {split} rows, each at exactly one offset of its "
              f"generator: {[f.tolist() for f in found]}")

    r.mask_pads = True
    check_rows_and_fill(check, cli, m, r, run / "best.h5", "grammar encoder", ["我爱吃苹果", "他 打碎了花瓶。"],
                        "我爱吃[MASK]果")
    run = cli.train("grammar_en", configs / "grammar_en.yaml", *small)
    r, m, *_ = compare_model(check, cli, qkv, run / "best.h5", "English grammar encoder")
    check_rows_and_fill(check, cli, m, r, run / "best.h5", "English grammar encoder",
                        ["I love to eat apples.", "he broke the vase"], "i love to [MASK] apples")

    # A masked text encoder (sinusoidal): its validation masks regenerated from the corpus and seed.
    run = cli.train("mlm", configs / "mlm.yaml", *small, f"task.path={corpus}", "task.length=32",
                    "task.val_fraction=0.1", "task.test_fraction=0.1", "model.positional=sinusoidal")
    cfg = parse_config((run / "config.yaml").read_text())
    compare_model(check, cli, qkv, run / "best.h5", "masked text encoder", regenerate_text(text, cfg, cfg["seed"]))

    # A post-LN sort encoder with ReLU, decoupled head widths and a set scale; label smoothing.
    sort = ["model.norm_first=false", "model.activation=relu", "model.head_dim=12", "model.value_dim=6",
            "model.scale=0.25", "train.label_smoothing=0.1", "schedule.name=constant", "task.length=16",
            "train.target_accuracy=0"]
    run = cli.train("sort", configs / "sort.yaml", *small, *sort)
    cfg = parse_config((run / "config.yaml").read_text())
    regenerated = regenerate_labelling(cfg, cfg["seed"], 1, 0, cfg["task"]["eval_size"])
    r, *_ = compare_model(check, cli, qkv, run / "best.h5", "sort encoder", regenerated)
    # One more training step from last.h5: its loss (label smoothing s) and accuracy, from the page.
    steps, B = cfg["train"]["steps"], cfg["train"]["batch_size"]
    more = cli.train("sort_step", configs / "sort.yaml", *small, *sort, f"train.steps={steps + 1}",
                     extra=("--resume", run / "last.h5"))
    header, *rows = (more / "metrics.csv").read_text().splitlines()
    row = dict(zip(header.split(","), rows[-1].split(",")))
    step_batch = regenerate_labelling(cfg, cfg["seed"], 0, steps * B, B)
    logits = Rebuilt(run / "last.h5").logits(step_batch)
    loss, _ = cross_entropy(logits, step_batch["targets"], cfg["train"]["label_smoothing"])
    acc, _ = accuracies(logits.argmax(-1), step_batch["targets"])
    check(int(row["step"]) == steps + 1 and abs(loss - float(row["train_loss"])) < LOSS_TOL
          and abs(acc - float(row["train_token_acc"])) <= ACC_TOL,
          f"sort encoder: training step {steps + 1} (examples {steps * B}..{steps * B + B - 1} of the training "
          f"stream, label smoothing {cfg['train']['label_smoothing']}): loss {loss:.7f}, metrics.csv "
          f"{row['train_loss']}; accuracy {acc:.4f}, metrics.csv {row['train_token_acc']}")

    # An attention-only recall encoder with learned positions.
    run = cli.train("recall", configs / "recall.yaml", *small, "model.attn_only=true", "task.vocab=8")
    compare_model(check, cli, qkv, run / "best.h5", "attention-only recall encoder")

    # A pre-LN decoder with rotary positions and tied embeddings on text; its batch regenerated.
    run = cli.train("rope", configs / "zh.yaml", *small, f"task.path={corpus}", "task.length=32",
                    "task.val_fraction=0.1", "task.test_fraction=0.1", "model.tie_embeddings=true")
    cfg = parse_config((run / "config.yaml").read_text())
    compare_model(check, cli, qkv, run / "last.h5", "rotary tied decoder", regenerate_text(text, cfg, cfg["seed"]))

    # A post-LN decoder with learned positions on the causal grammar (pad column, pads unmasked).
    run = cli.train("grammar_decoder", configs / "grammar_zh_decoder.yaml", *small, "model.norm_first=false")
    compare_model(check, cli, qkv, run / "best.h5", "post-LN grammar decoder")

    # An encoder-decoder on seq2seq_reverse: cross-attention, BOS, greedy decoding.
    run = cli.train("seq2seq", configs / "seq2seq_reverse.yaml", *small, "task.vocab=8", "task.length=8",
                    "model.positional=learned", "train.steps=80", "train.eval_every=80")
    cfg = parse_config((run / "config.yaml").read_text())
    regenerated = regenerate_labelling(cfg, cfg["seed"], 1, 0, cfg["task"]["eval_size"])
    compare_model(check, cli, qkv, run / "best.h5", "encoder-decoder", regenerated)

    print(f"{check.count - len(check.failures)} of {check.count} checks passed")
    for f in check.failures:
        print("FAILED:", f)
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
