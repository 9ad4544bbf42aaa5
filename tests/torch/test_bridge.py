#!/usr/bin/python3
"""Tests of the PyTorch bridge (scripts/pytorch/qkv_torch.py, qkv_mirror.py, qkv_tasks.py; docs/pytorch.md).

    make test-torch     (= /usr/bin/python3 tests/torch/test_bridge.py --qkv build/qkv)
    /usr/bin/python3 tests/torch/test_bridge.py [--qkv PATH] [--keep]

Needs torch 1.13, h5py, numpy, yaml and a built qkv (--qkv, else $QKV, else build/qkv from the
repository root). Trains tiny checkpoints (width 16, a few steps) in a temporary directory and
checks, printing one line per check:
  generator   qkv_tasks' held-out tokens = the tokens `qkv logits` prints (sort, recall)
  (a) encoder the mirror's logits = `qkv logits` to 1e-5, float32 and float64 mirror (pre-LN,
              post-LN, no LayerNorm (norm none), learned positions, ReLU, head_dim != C/H, model.scale,
              recall)
  (b) trip    qkv -> export -> import -> qkv: /model bitwise identical, in order; `qkv eval` prints
              the same lines; the mirror's names are the checkpoint's, in order
  (c) seq2seq the mirror's held-out loss = `qkv eval`'s (printed) and /metrics/eval_loss (not
              rounded) to 1e-5, with the same token and sequence accuracy (greedy decoding)
  (f) decoder the decoder-only mirror (sinusoidal, learned and rotary positions, tied embeddings,
              attn_only, post-LN, head_dim, value_dim, scale; synthetic tasks and a text corpus, char and
              byte): `qkv_torch check` (logits, held-out loss and accuracies, greedy generation
              with and without the KV cache = `qkv generate --temperature 0`, with window jumps),
              text prompts, the KV cache against the whole sequence, rope against a complex-number
              rotation, text_corpus against qkv (files, cleaning, vocabulary, split, windows)
  (g) decoder PyTorch -> qkv: the mirror trained a few AdamW steps in PyTorch, saved by
              save_checkpoint or `qkv_torch.py import` (text: with its tokenizer): qkv eval, qkv
              logits and qkv generate of the result = the PyTorch model; a fresh mirror from a config
  torch.nn    the float64 mirror = torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
              with the same weights (qkv_to_mha), to 1e-10 (the decoder-only model: encoder layers
              with a causal mask)
  (d) mha     import-mha of packed, separate, bias-free and seq-first torch.nn.MultiheadAttention
              modules and state dicts: `qkv logits` / `qkv eval` of the result = the mirror running
              the torch module itself; mha_to_qkv with kdim, vdim != E against torch; refusals
  (e) errors  every bad input: its message, its exit status, no traceback
  fixture     tests/fixtures/torch_import regenerates identically; qkv reads it and reproduces it
Exit status 0 when every check passed (and at least one ran), 1 otherwise, 2 without a qkv binary.
"""
import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

import h5py
import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(REPO, "scripts")
BRIDGE = os.path.join(SCRIPTS, "pytorch")
sys.path.insert(0, BRIDGE)
import make_torch_fixture  # noqa: E402
import qkv_mirror  # noqa: E402
import qkv_tasks  # noqa: E402
import qkv_torch  # noqa: E402
from convert_checkpoint import fixed_string, links_in_order  # noqa: E402

TINY = {"model.d_model": 16, "model.heads": 2, "model.layers": 1, "model.d_ff": 32, "task.vocab": 8,
        "task.length": 6, "task.eval_size": 24, "train.steps": 4, "train.eval_every": 4,
        "train.checkpoint_every": 4, "train.batch_size": 8, "schedule.warmup_steps": 1, "train.threads": 1}


class Checks:
    def __init__(self):
        self.run, self.failed = 0, []

    def __call__(self, ok, what, detail=""):
        self.run += 1
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""), flush=True)
        if not ok:
            self.failed.append(what)
        return ok

    def close(self, what, got, want, tol):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            return self(False, what, f"shapes {got.shape} vs {want.shape}")
        diff = float(np.abs(got - want).max()) if got.size else 0.0
        return self(diff <= tol, what, f"max |diff| {diff:.3g} (limit {tol:g})")


check = Checks()


class Env:
    def __init__(self, qkv, tmp):
        self.qkv, self.tmp = qkv, tmp

    def path(self, *names):
        return os.path.join(self.tmp, *names)

    def train(self, name, config, **sets):
        out = self.path(name)
        args = [self.qkv, "train", os.path.join(REPO, "configs", config), "--out", out, "--quiet"]
        for k, v in dict(TINY, **{k.replace("__", "."): v for k, v in sets.items()}).items():
            args += ["--set", f"{k}={v}"]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"qkv train {name} failed: {r.stderr}")
        return os.path.join(out, "last.h5")

    def run_qkv(self, *args):
        return subprocess.run([self.qkv, *args], capture_output=True, text=True)

    def logits(self, ckpt, count=4):
        out = self.path("logits.txt")
        r = self.run_qkv("logits", ckpt, "--count", str(count), "--out", out)
        if r.returncode != 0:
            raise RuntimeError(f"qkv logits {ckpt}: {r.stderr}")
        return qkv_torch.read_logits_file(out)

    def eval_loss(self, ckpt):
        return qkv_torch.qkv_eval(self.qkv, ckpt)[0]

    def eval_lines(self, ckpt):
        r = self.run_qkv("eval", ckpt)
        return r.returncode, [line.replace(ckpt, "CKPT") for line in r.stdout.splitlines()]


def cli(*args):
    """qkv_torch.py in this process: (exit status, stdout, stderr); an exception that escapes is
    a traceback the user would see, reported as status 99."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = qkv_torch.main([str(a) for a in args])
        except SystemExit as e:  # argparse
            code = e.code
        except Exception:
            traceback.print_exc()
            code = 99
    return code, out.getvalue(), err.getvalue()


def mirror_logits(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).double().numpy()


def model_tensors(path):
    with h5py.File(path, "r") as f:
        return [(n, f["model"][n].dtype, f["model"][n][()]) for n in links_in_order(f["model"])]


# ---- the checks ----

def test_generator(env, ckpts):
    for name in ("sort", "recall"):
        model, info = qkv_torch.load(ckpts[name])
        tokens, _ = env.logits(ckpts[name], 8)
        want = info.task.examples(qkv_tasks.eval_stream(int(info.config["seed"])), 0, 8)["inputs"]
        check(np.array_equal(tokens, want), f"generator: qkv_tasks' held-out tokens of {name} = qkv logits'")
    g = qkv_tasks.Generator(qkv_tasks.hash64(qkv_tasks.eval_stream(1), 0))
    check([g.randint(8) for _ in range(6)] == [0, 5, 1, 3, 4, 0], "generator: example 0 of sort (seed 1, V 8) is 0 5 1 3 4 0")


def test_encoder_logits(env, ckpts):
    for name in ("sort", "post_ln", "norm_none", "head_dim", "recall"):
        tokens, want = env.logits(ckpts[name], 8)
        for dtype in (torch.float32, torch.float64):
            model, info = qkv_torch.load(ckpts[name], dtype)
            check.close(f"(a) {name}: {str(dtype)[6:]} mirror logits vs qkv logits", mirror_logits(model, tokens), want, 1e-5)
        loss = env.eval_loss(ckpts[name])
        held = info.task.examples(qkv_tasks.eval_stream(1), 0, int(info.config["task"]["eval_size"]))
        m_loss, _, _ = qkv_torch.evaluate(qkv_torch.load(ckpts[name])[0], held, qkv_torch.eval_batch_size(info.config))
        check.close(f"(a) {name}: held-out loss, mirror vs qkv eval", m_loss, loss, 1e-5 + 5e-7)


def test_round_trip(env, ckpts):
    for name in ("sort", "post_ln", "head_dim", "s2s", "s2s_post_ln", "dec", "dec_rope", "dec_attn_only", "dec_value_dim",
                 "text"):
        pt, back = env.path(f"{name}.pt"), env.path(f"{name}.back.h5")
        code, _, err = cli("export", ckpts[name], pt)
        check(code == 0, f"(b) {name}: export exits 0", err.strip())
        code, _, err = cli("import", pt, back)
        check(code == 0, f"(b) {name}: import exits 0", err.strip())
        a, b = model_tensors(ckpts[name]), model_tensors(back)
        same = [n for n, _, _ in a] == [n for n, _, _ in b] and all(
            da == db == np.float32 and va.shape == vb.shape and va.tobytes() == vb.tobytes()
            for (_, da, va), (_, db, vb) in zip(a, b))
        check(same, f"(b) {name}: /model of the round trip is bitwise identical ({len(a)} tensors, same order)")
        saved = torch.load(pt)
        check(list(saved["state_dict"]) == [n for n, _, _ in a], f"(b) {name}: the exported state dict has qkv's names in order")
        (ca, la), (cb, lb) = env.eval_lines(ckpts[name]), env.eval_lines(back)
        check(ca == cb == 0 and la == lb and len(la) >= 5, f"(b) {name}: qkv eval of the round trip prints the same",
              f"{la} vs {lb}")
        leftovers = [f for f in os.listdir(env.tmp) if ".tmp-" in f]
        check(not leftovers, f"(b) {name}: no temporary file left", str(leftovers))


def test_seq2seq(env, ckpts):
    for name in ("s2s", "s2s_post_ln", "s2s_recall"):
        for dtype in (torch.float32, torch.float64):
            results = qkv_torch.check(ckpts[name], env.qkv, dtype=dtype)
            for what, diff, limit in results:
                check(diff <= limit, f"(c) {name} {str(dtype)[6:]}: {what}", f"{diff:.3g} (limit {limit:g})")
    code, out, err = cli("check", ckpts["s2s"], "--qkv", env.qkv)
    check(code == 0 and "matches" in out, "(c) qkv_torch.py check on an encoder-decoder exits 0", err.strip())
    code, out, err = cli("check", ckpts["sort"], "--qkv", env.qkv)
    check(code == 0 and "logits of 8" in out, "(a) qkv_torch.py check on an encoder exits 0", err.strip())


def torch_encoder_layer(block, o):
    layer = torch.nn.TransformerEncoderLayer(o.d_model, o.heads, o.d_ff, 0.0, activation=o.activation,
                                             batch_first=True, norm_first=o.norm_first).double().eval()
    layer.self_attn.load_state_dict(qkv_torch.qkv_to_mha(block.attn.state_dict()))
    for ours, theirs in (("ff.fc1", "linear1"), ("ff.fc2", "linear2"), ("norm1", "norm1"), ("norm2", "norm2")):
        layer.get_submodule(theirs).load_state_dict(block.get_submodule(ours).state_dict())
    return layer


def torch_decoder_layer(block, o):
    layer = torch.nn.TransformerDecoderLayer(o.d_model, o.heads, o.d_ff, 0.0, activation=o.activation,
                                             batch_first=True, norm_first=o.norm_first).double().eval()
    layer.self_attn.load_state_dict(qkv_torch.qkv_to_mha(block.self_attn.state_dict()))
    layer.multihead_attn.load_state_dict(qkv_torch.qkv_to_mha(block.cross_attn.state_dict()))
    for ours, theirs in (("ff.fc1", "linear1"), ("ff.fc2", "linear2"), ("norm1", "norm1"), ("norm2", "norm2"),
                         ("norm3", "norm3")):
        layer.get_submodule(theirs).load_state_dict(block.get_submodule(ours).state_dict())
    return layer


def test_torch_layers(env, ckpts):
    """The mirror against PyTorch's own layers (an independent implementation), float64."""
    for name in ("sort", "post_ln"):
        model, info = qkv_torch.load(ckpts[name], torch.float64)
        tokens = info.task.examples(qkv_tasks.eval_stream(1), 0, 8)["inputs"]
        x = torch.from_numpy(tokens)
        with torch.no_grad():
            h = model.pos(model.tok_emb(x))
            for block in model.blocks:
                h = torch_encoder_layer(block, info.options)(h)
            want = model.head(model.norm(h) if model.norm is not None else h)
            check.close(f"torch.nn: {name}: float64 mirror vs nn.TransformerEncoderLayer", model(x), want, 1e-10)
    for name in ("s2s", "s2s_post_ln", "s2s_recall"):
        model, info = qkv_torch.load(ckpts[name], torch.float64)
        b = info.task.examples(qkv_tasks.eval_stream(1), 0, 8)
        src, tgt = torch.from_numpy(b["inputs"]), torch.from_numpy(b["decoder_inputs"])
        with torch.no_grad():
            memory = model.encode(src)
            h = model.tgt_pos(model.tgt_emb(tgt))
            causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool).triu(1)
            for block in model.decoder.blocks:
                h = torch_decoder_layer(block, info.options)(h, memory, tgt_mask=causal)
            norm = model.decoder.norm
            want = model.head(norm(h) if norm is not None else h)
            check.close(f"torch.nn: {name}: float64 mirror decoder vs nn.TransformerDecoderLayer",
                        model(src, tgt), want, 1e-10)
    model, info = qkv_torch.load(ckpts["dec"], torch.float64)
    got, want = torch_decoder_only(model, info.options, info.task.examples(qkv_tasks.eval_stream(1), 0, 8)["inputs"])
    check.close("torch.nn: dec: float64 decoder-only mirror vs nn.TransformerEncoderLayer with a causal mask", got, want, 1e-10)


DECODERS = ("dec", "dec_rope", "dec_attn_only", "dec_value_dim", "dec_recall", "text", "text_byte")


def test_decoder(env, ckpts):
    """(f) the decoder-only mirror against qkv: logits, held-out loss, greedy generation."""
    for name in DECODERS:
        for dtype in (torch.float32, torch.float64):
            for what, diff, limit in qkv_torch.check(ckpts[name], env.qkv, dtype=dtype):
                check(diff <= limit, f"(f) {name} {str(dtype)[6:]}: {what}", f"{diff:.3g} (limit {limit:g})")
        model, info = qkv_torch.load(ckpts[name], torch.float64)
        tokens = torch.from_numpy(qkv_torch.held_out_set(info)["inputs"][:2])
        with torch.no_grad():
            whole, cache = model(tokens), model.make_cache()
            pieces = [model(tokens[:, a:b], cache) for a, b in ((0, 3), (3, 4), (4, tokens.shape[1]))]
        check.close(f"(f) {name}: the mirror's KV cache (3, 1, then the rest) = the whole sequence, float64",
                    torch.cat(pieces, dim=1), whole, 1e-12)
    code, out, err = cli("check", ckpts["dec_rope"], "--qkv", env.qkv)
    check(code == 0 and "greedy generation" in out and "matches" in out, "(f) qkv_torch.py check on a decoder exits 0",
          err.strip())

    # Rotary embeddings against the rotation written with complex numbers: pair (x[d], x[d + D/2])
    # is z = x[d] + i x[d + D/2], turned by p theta_d.
    torch.manual_seed(3)
    x, offset = torch.randn(2, 3, 5, 8, dtype=torch.float64), 7
    theta = 10000.0 ** (-torch.arange(4, dtype=torch.float64) * 2 / 8)
    z = torch.complex(x[..., :4], x[..., 4:]) * torch.polar(torch.ones(5, 4, dtype=torch.float64),
                                                            torch.arange(offset, offset + 5, dtype=torch.float64)[:, None] * theta)
    check.close("(f) rope = the complex rotation, float64", qkv_mirror.rope(x, offset), torch.cat([z.real, z.imag], -1), 1e-13)

    # Text: the corpus as qkv reads it, and prompts given as text.
    import text_corpus
    for name in ("text", "text_byte"):
        model, info = qkv_torch.load(ckpts[name])
        task = text_corpus.TextTask(info.config["task"])  # the vocabulary from the corpus, not the checkpoint
        d = task.data
        check(d.vocab == (info.stored.vocab or None) and info.stored.tokenizer == info.config["task"]["tokenizer"],
              f"(f) {name}: text_corpus' vocabulary (from the training split) = the checkpoint's /data/vocab",
              f"{d.vocab_size} tokens")
        r = env.run_qkv("eval", ckpts[name], "--set", "task.eval_size=100000")
        counts = re.search(r"(\d+) validation and (\d+) test examples", r.stdout)
        want = (task.split_size(d.val), task.split_size(d.test))
        check(counts is not None and tuple(map(int, counts.groups())) == want,
              f"(f) {name}: validation and test windows, text_corpus = qkv eval", f"{want} vs {r.stdout.splitlines()[:1]}")
        prompt = "the "
        r = env.run_qkv("generate", ckpts[name], "--prompt", prompt, "--temperature", "0", "--max-tokens", "30")
        got = prompt + d.decode(model.generate(d.encode(prompt), 30)) + "\n"
        check(r.returncode == 0 and r.stdout == got, f"(f) {name}: a text prompt, qkv generate = the mirror decoded",
              f"{r.stdout!r} vs {got!r}")
    files = [os.path.relpath(f, env.path("corpus")) for f in text_corpus.corpus_files(env.path("corpus"))]
    check(files == ["a.txt", "c.txt", "empty.txt", "sub/b.txt"], "(f) text_corpus: the files of a directory", str(files))


def train_in_torch(model, batch, steps=3, lr=1e-2):
    """A few AdamW steps of the mirror in PyTorch on `batch` (next-token cross-entropy over the
    scored targets), so that its weights are PyTorch's, not the checkpoint's."""
    x, y = torch.from_numpy(batch["inputs"]), torch.from_numpy(batch["targets"])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                 ignore_index=qkv_tasks.IGNORE)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def test_decoder_from_torch(env, ckpts):
    """(g) PyTorch -> qkv for the decoder-only model: a mirror trained a few steps in PyTorch (tied
    embeddings, rope, attn_only, text with its tokenizer), written by save_checkpoint or by
    `qkv_torch.py import` of a .pt, then qkv logits, qkv eval and qkv generate of that checkpoint
    = the PyTorch model itself; and a fresh mirror built from a config alone."""
    for name in ("dec", "dec_rope", "dec_attn_only", "dec_value_dim", "text", "text_byte"):
        model, info = qkv_torch.load(ckpts[name])
        held = qkv_torch.held_out_set(info)
        before = qkv_torch.evaluate(model, held, qkv_torch.eval_batch_size(info.config))[0]
        train_in_torch(model, held)
        m_loss = qkv_torch.evaluate(model, held, qkv_torch.eval_batch_size(info.config))[0]
        check(abs(m_loss - before) > 1e-3, f"(g) {name}: PyTorch training changed the held-out loss",
              f"{before:.6f} -> {m_loss:.6f}")
        out = env.path(f"{name}.torch.h5")
        tokenizer = {"kind": info.stored.tokenizer, "vocab": list(info.stored.vocab or [])} if info.stored.tokenizer else None
        if tokenizer:  # through the command line, a .pt as export writes it
            pt = env.path(f"{name}.torch.pt")
            torch.save({"config": info.config_text, "state_dict": model.state_dict(), "step": 3, "tokenizer": tokenizer}, pt)
            code, _, err = cli("import", pt, out)
            check(code == 0, f"(g) {name}: qkv_torch.py import of the PyTorch-trained state exits 0", err.strip())
        else:
            qkv_torch.save_checkpoint(model, info.config_text, out, step=3)
        q_loss, q_tok, _, q_count = qkv_torch.qkv_eval(env.qkv, out)
        check(q_count == len(held["inputs"]), f"(g) {name}: qkv eval scores the mirror's held-out set",
              f"{q_count} vs {len(held['inputs'])}")
        check.close(f"(g) {name}: qkv eval of the PyTorch-trained checkpoint = the PyTorch model's held-out loss",
                    q_loss, m_loss, 1e-5 + 5e-7)
        tokens, want = env.logits(out, 4)
        check(np.array_equal(tokens, held["inputs"][:len(tokens)]), f"(g) {name}: qkv logits scores the held-out windows")
        check.close(f"(g) {name}: qkv logits of the PyTorch-trained checkpoint = the PyTorch model's", want,
                    mirror_logits(model, tokens), 1e-5)
        prompt = [int(t) for t in held["inputs"][0][: max(1, model.max_len // 2)]]
        got, mine = qkv_torch.qkv_generate(env.qkv, out, prompt, 20), model.generate(prompt, 20)
        check(got == mine, f"(g) {name}: qkv generate of the PyTorch-trained checkpoint = the PyTorch model's greedy tokens",
              f"{got} vs {mine}")
    info = qkv_torch.load(ckpts["dec_rope"])[1]
    torch.manual_seed(5)
    model, *_ = qkv_torch.build(info.config_text)
    model.eval()
    out = env.path("dec_rope.fresh.h5")
    qkv_torch.save_checkpoint(model, info.config_text, out)
    check.close("(g) dec_rope: a fresh mirror from the config alone: qkv eval = the mirror's held-out loss",
                env.eval_loss(out),
                qkv_torch.evaluate(model, qkv_torch.held_out_set(info), qkv_torch.eval_batch_size(info.config))[0],
                1e-5 + 5e-7)


def torch_decoder_only(model, o, tokens):
    """The decoder-only model computed with nn.TransformerEncoderLayer and a causal mask."""
    x = torch.from_numpy(tokens)
    causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)  # PyTorch polarity
    with torch.no_grad():
        h = model.pos(model.tok_emb(x))
        for block in model.blocks:
            h = torch_encoder_layer(block, o)(h, src_mask=causal)
        return model(x), model.head(model.norm(h) if model.norm is not None else h)


def new_mha(seed, E=16, H=2, **kw):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=kw.pop("batch_first", True), **kw)
    with torch.no_grad():
        for p in (mha.in_proj_bias, mha.out_proj.bias):
            if p is not None:
                p.uniform_(-0.5, 0.5)
    return mha.eval()


def save(env, name, obj):
    path = env.path(name)
    torch.save(obj, path)
    return path


def check_imported_encoder(env, what, ckpt, new, layer, mha):
    tokens, want = env.logits(new, 8)
    model, _ = qkv_torch.load(ckpt)
    before = mirror_logits(model, tokens)
    qkv_torch.use_torch_mha(model, layer, mha)
    got = mirror_logits(model, tokens)
    check.close(f"(d) {what}: qkv logits of the import vs the mirror running the torch module", got, want, 1e-5)
    check(float(np.abs(got - before).max()) > 1e-3, f"(d) {what}: the import changed the model's logits")


def test_import_mha(env, ckpts):
    ckpt = ckpts["sort"]
    mha = new_mha(1)
    new = env.path("mha_packed.h5")
    code, out, err = cli("import-mha", save(env, "mha.pt", mha), "--into", ckpt, "--layer", "blocks.0.attn", "--out", new)
    check(code == 0, "(d) import-mha of a packed module exits 0", err.strip())
    check_imported_encoder(env, "packed module", ckpt, new, "blocks.0.attn", mha)

    new = env.path("mha_sd.h5")
    code, out, err = cli("import-mha", save(env, "mha_sd.pt", mha.state_dict()), "--into", ckpt, "--layer",
                         "blocks.0.attn", "--out", new)
    check(code == 0 and "num_heads" in out, "(d) import-mha of a packed state dict notes where num_heads came from",
          out.strip() + err.strip())
    check(model_tensors(new)[1][2].tobytes() == model_tensors(env.path("mha_packed.h5"))[1][2].tobytes(),
          "(d) the module and its state dict import the same tensors")

    # Separate projections: the state dict layout of a module with kdim/vdim != E, here with
    # kdim = vdim = E so that it fits a model layer (every qkv model layer has kdim = vdim = C).
    sd = mha.state_dict()
    E = 16
    sep = {"q_proj_weight": sd["in_proj_weight"][:E], "k_proj_weight": sd["in_proj_weight"][E:2 * E],
           "v_proj_weight": sd["in_proj_weight"][2 * E:], "in_proj_bias": sd["in_proj_bias"],
           "out_proj.weight": sd["out_proj.weight"], "out_proj.bias": sd["out_proj.bias"]}
    new = env.path("mha_sep.h5")
    code, _, err = cli("import-mha", save(env, "mha_sep.pt", sep), "--heads", 2, "--into", ckpt, "--layer",
                       "blocks.0.attn", "--out", new)
    check(code == 0, "(d) import-mha of separate q/k/v_proj_weight exits 0", err.strip())
    check_imported_encoder(env, "separate projections", ckpt, new, "blocks.0.attn", mha)

    nobias = new_mha(2, bias=False)
    new = env.path("mha_nobias.h5")
    code, out, err = cli("import-mha", save(env, "mha_nobias.pt", nobias), "--into", ckpt, "--layer",
                         "blocks.0.attn", "--out", new)
    check(code == 0 and "no biases" in out, "(d) import-mha of a bias-free module sets the biases to 0", out + err)
    check_imported_encoder(env, "bias-free module", ckpt, new, "blocks.0.attn", nobias)

    seqfirst = new_mha(3, batch_first=False)
    path = save(env, "mha_seqfirst.pt", seqfirst)
    code, _, err = cli("import-mha", path, "--into", ckpt, "--layer", "blocks.0.attn", "--out", env.path("x.h5"))
    check(code == 2 and "batch_first=False" in err and "--allow-seq-first" in err,
          "(d) a batch_first=False module is refused (exit 2) and the message says how to import it", err.strip())
    new = env.path("mha_seqfirst.h5")
    code, _, err = cli("import-mha", path, "--into", ckpt, "--layer", "blocks.0.attn", "--out", new, "--allow-seq-first")
    check(code == 0, "(d) --allow-seq-first imports it", err.strip())
    check_imported_encoder(env, "seq-first module", ckpt, new, "blocks.0.attn", seqfirst)

    # Cross-attention of an encoder-decoder: the held-out loss qkv computes with the imported layer
    # is the loss of the mirror running the torch module as its cross-attention.
    s2s, layer = ckpts["s2s"], "decoder.blocks.0.cross_attn"
    cross = new_mha(4)
    new = env.path("mha_cross.h5")
    code, _, err = cli("import-mha", save(env, "mha_cross.pt", cross), "--into", s2s, "--layer", layer, "--out", new)
    check(code == 0, "(d) import-mha into decoder.blocks.0.cross_attn exits 0", err.strip())
    model, info = qkv_torch.load(s2s)
    qkv_torch.use_torch_mha(model, layer, cross)
    held = info.task.examples(qkv_tasks.eval_stream(1), 0, int(info.config["task"]["eval_size"]))
    loss = env.eval_loss(new)
    check.close("(d) cross-attention import: qkv eval loss vs the mirror running the torch module",
                qkv_torch.evaluate(model, held, qkv_torch.eval_batch_size(info.config))[0], loss, 1e-5 + 5e-7)

    # mha_to_qkv with kdim, vdim != E: the mirror's MultiHeadAttention against torch, with key
    # padding and a fully padded row (qkv: zero attention output, so w_o.bias; torch: NaN).
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        torch.manual_seed(5)
        t = new_mha(5, E=12, H=3, kdim=8, vdim=6).to(dtype)
        ours = qkv_mirror.MultiHeadAttention(12, 3, kdim=8, vdim=6).to(dtype).eval()
        ours.load_state_dict(qkv_torch.mha_to_qkv(t.state_dict(), 3))
        q, k, v = torch.randn(3, 4, 12, dtype=dtype), torch.randn(3, 5, 8, dtype=dtype), torch.randn(3, 5, 6, dtype=dtype)
        pad = torch.tensor([[False, False, True, False, True], [False] * 5, [True] * 5])
        with torch.no_grad():
            want, _ = t(q, k, v, key_padding_mask=pad, need_weights=False)
            got = ours(q, k, v, key_padding_mask=pad)
        check.close(f"(d) mha_to_qkv, kdim 8, vdim 6, key padding, {str(dtype)[6:]}: mirror vs torch", got[:2], want[:2], tol)
        check(bool(torch.isnan(want[2]).all()) and torch.equal(got[2], t.out_proj.bias.detach().expand(4, 12)),
              f"(d) a fully padded row: torch NaN, the mirror w_o.bias (as qkv), {str(dtype)[6:]}")

    refusals = [
        ("a module with kdim != E", new_mha(6, kdim=8, vdim=12), [], "blocks.0.attn.w_k.weight: expected (16, 16)"),
        ("a module with other num_heads", new_mha(7, H=4), [], "num_heads: "),
        ("a module of another width", new_mha(8, E=32), [], "blocks.0.attn.w_q.weight: expected (16, 16)"),
        ("add_bias_kv", new_mha(9, add_bias_kv=True), [], "add_bias_kv"),
        ("add_zero_attn", new_mha(9, add_zero_attn=True), [], "add_zero_attn"),
        ("--heads that differ from the module's", mha, ["--heads", 4], "--heads 4"),
        ("an unknown --layer", mha, ["--layer", "blocks.3.attn"], "it has blocks.0.attn"),
        ("not an attention module", torch.nn.Linear(16, 16), [], "expected a torch.nn.MultiheadAttention"),
    ]
    for what, obj, extra, needle in refusals:
        args = ["import-mha", save(env, "refused.pt", obj), "--into", ckpt, "--out", env.path("refused.h5")]
        args += extra if "--layer" in extra else ["--layer", "blocks.0.attn"] + extra
        code, _, err = cli(*args)
        check(code == 2 and needle in err and not os.path.exists(env.path("refused.h5")),
              f"(d) import-mha refuses {what} (exit 2, names it, writes nothing)", f"exit {code}: {err.strip()}")
    code, _, err = cli("import-mha", env.path("mha.pt"), "--into", ckpts["head_dim"], "--layer", "blocks.0.attn",
                       "--out", env.path("refused.h5"))
    check(code == 2 and "head_dim" in err, "(d) import-mha refuses a checkpoint whose head_dim != C/H", err.strip())
    code, _, err = cli("import-mha", env.path("mha.pt"), "--into", ckpts["scaled"], "--layer", "blocks.0.attn",
                       "--out", env.path("refused.h5"))
    check(code == 2 and "model.scale" in err, "(d) import-mha refuses a checkpoint with model.scale set", err.strip())


def edited_copy(env, src, name, edit):
    """A copy of src changed by edit(h5py file), resealed so that only the change is wrong."""
    dst = env.path(name)
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
    subprocess.run([sys.executable, os.path.join(SCRIPTS, "convert_checkpoint.py"), "--reseal", dst],
                   check=True, capture_output=True)
    return dst


def set_config(text):
    def edit(f):
        del f["config"]
        f.create_dataset("config", data=fixed_string(text))
    return edit


def replace_head_bias(f):
    del f["model/head.bias"]
    f["model"].create_dataset("head.bias", data=np.zeros(3, "f4"))


def test_errors(env, ckpts):
    ckpt = ckpts["sort"]
    with open(ckpt, "rb") as f:
        good = f.read()
    cfg_text = qkv_torch.read_checkpoint(ckpt).config_text

    def write(name, data):
        with open(env.path(name), "wb") as f:
            f.write(data)
        return env.path(name)

    bare = env.path("bare.h5")
    with h5py.File(bare, "w") as f:
        f["x"] = np.zeros(3)
    flipped = bytearray(good)
    flipped[-100] ^= 1
    cases = [
        ("a text file", write("text.h5", b"hello\n" * 100), 1, "not a qkv checkpoint"),
        ("an HDF5 file without the qkv header", bare, 1, "It is an HDF5 file"),
        ("a flipped bit", write("flipped.h5", bytes(flipped)), 1, "checksum mismatch"),
        ("a truncated file", write("truncated.h5", good[:-1000]), 1, "truncated"),
        ("a missing file", env.path("missing.h5"), 1, "cannot read"),
        ("an unknown arch", edited_copy(env, ckpt, "arch.h5", set_config(cfg_text.replace('"encoder"', '"mamba"'))),
         2, "model.arch 'mamba'"),
        ("an unknown model key", edited_copy(env, ckpt, "key.h5", set_config(cfg_text.replace("layers:", "wings: 2\n  layers:"))),
         2, "model.wings"),
        ("a tensor of another shape", edited_copy(env, ckpt, "shape.h5", replace_head_bias), 2,
         "shape of head.bias: the model has (8,)"),
    ]
    for what, path, want, needle in cases:
        code, _, err = cli("export", path, env.path("out.pt"))
        check(code == want and needle in err and "Traceback" not in err,
              f"(e) export of {what}: exit {want}, '{needle}'", f"exit {code}: {err.strip()}")
    code, _, err = cli("check", cases[2][1], "--qkv", env.qkv)
    check(code == 1 and "checksum mismatch" in err, "(e) check verifies the checksum too", err.strip())

    pt = env.path("sort.pt")
    d = torch.load(pt)
    sd = dict(d["state_dict"])
    del sd["norm.bias"]
    sd["blocks.0.attn.w_x.weight"] = sd.pop("blocks.0.attn.w_q.weight")
    sd["head.weight"] = torch.zeros(3, 16)
    sd["head.bias"] = sd["head.bias"].long()
    bad_sd = save(env, "bad_sd.pt", dict(d, state_dict={k: v for k, v in sd.items() if k != "head.bias"}))
    code, _, err = cli("import", bad_sd, env.path("out.h5"))
    listed = all(s in err for s in ("missing: norm.bias (16,)", "missing: blocks.0.attn.w_q.weight (16, 16)",
                                    "unexpected: blocks.0.attn.w_x.weight (16, 16)", "shape of head.weight: the model has (8, 16)"))
    check(code == 2 and listed and not os.path.exists(env.path("out.h5")),
          "(e) import of a state dict that does not fit lists every missing, unexpected and misshapen name", err.strip())
    code, _, err = cli("import", save(env, "int_sd.pt", dict(d, state_dict=sd)), env.path("out.h5"))
    check(code == 2 and "not floating point: head.bias" in err, "(e) import refuses integer tensors", err.strip())

    bare_sd = save(env, "bare_sd.pt", d["state_dict"])
    code, _, err = cli("import", bare_sd, env.path("out.h5"))
    check(code == 2 and "--config" in err, "(e) import of a bare state dict asks for --config", err.strip())
    cfg_file = env.path("config.yaml")
    with open(cfg_file, "w") as f:
        f.write(d["config"])
    code, _, err = cli("import", bare_sd, env.path("bare_sd.h5"), "--config", cfg_file)
    check(code == 0 and env.eval_lines(env.path("bare_sd.h5"))[0] == 0, "(e) ... and imports it with --config", err.strip())
    module = save(env, "module.pt", qkv_torch.load(ckpt)[0])
    code, _, err = cli("import", module, env.path("module.h5"), "--config", cfg_file)
    check(code == 0 and model_tensors(env.path("module.h5"))[0][2].tobytes() == model_tensors(ckpt)[0][2].tobytes(),
          "(b) import of a pickled mirror module (with --config) gives the checkpoint's tensors", err.strip())
    with open(cfg_file, "w") as f:
        f.write(d["config"].replace('"sort"', '"seq2seq_sort"'))
    code, _, err = cli("import", bare_sd, env.path("out.h5"), "--config", cfg_file)
    check(code == 2 and "does not fit task 'seq2seq_sort'" in err, "(e) import refuses a config whose task needs another arch",
          err.strip())
    with open(cfg_file, "w") as f:
        f.write("model: [1, 2\n")
    code, _, err = cli("import", bare_sd, env.path("out.h5"), "--config", cfg_file)
    check(code == 2 and "not valid YAML" in err, "(e) import refuses a config that is not YAML", err.strip())

    code, _, err = cli("import", write("notpt.pt", b"not a torch file"), env.path("out.h5"))
    check(code == 1 and "not a torch.save file" in err, "(e) import of a file that is not torch.save's", err.strip())
    code, _, err = cli("import", pt, env.path("no", "such", "dir.h5"))
    check(code == 1 and "cannot write" in err, "(e) import into a missing directory: exit 1, cannot write", err.strip())
    code, _, err = cli("export", ckpt, env.path("no", "such.pt"))
    check(code == 1 and "cannot write" in err, "(e) export into a missing directory: exit 1, cannot write", err.strip())
    code, _, err = cli("check", ckpt, "--qkv", env.path("no-qkv"))
    check(code == 1 and "cannot run" in err, "(e) check without a qkv binary: exit 1, cannot run", err.strip())
    code, _, err = cli("import")
    check(code == 2, "(e) missing arguments: exit 2 (argparse)", err.strip().splitlines()[-1])
    r = subprocess.run([sys.executable, os.path.join(BRIDGE, "qkv_torch.py"), "export", cases[2][1], env.path("o.pt")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "checksum mismatch" in r.stderr and "Traceback" not in r.stderr,
          "(e) as a process: exit status 1 and one message", r.stderr.strip())


def test_fixture(env):
    fixture = os.path.join(REPO, "tests", "fixtures", "torch_import")
    out = env.path("fixture")
    with contextlib.redirect_stdout(io.StringIO()):
        make_torch_fixture.make(out)
    for name in ("model.h5", "logits.txt"):
        with open(os.path.join(fixture, name), "rb") as a, open(os.path.join(out, name), "rb") as b:
            check(a.read() == b.read(), f"fixture: tools/make_torch_fixture.py regenerates {name} byte for byte")
    ckpt = os.path.join(fixture, "model.h5")
    tokens, want = qkv_torch.read_logits_file(os.path.join(fixture, "logits.txt"))
    got_tokens, got = env.logits(ckpt, len(tokens))
    check(np.array_equal(tokens, got_tokens), "fixture: its tokens are the checkpoint's first held-out examples")
    check.close("fixture: qkv logits of model.h5 vs the logits torch computed", got, want, 1e-5)
    check(env.eval_lines(ckpt)[0] == 0, "fixture: qkv eval reads model.h5")


def make_corpus(root):
    """A small corpus with what qkv's reader skips and cleans: a hidden file, a .dat index, a
    symbolic link, a binary file, an empty file, fortune '%' lines (also with CRLF), ANSI escapes,
    a file without a final newline, a subdirectory, non-ASCII characters."""
    import random
    rng = random.Random(0)
    words = "the a of cat sat on mat and dog ran to it is was café 我 猫 naïve über x y z".split()
    os.makedirs(os.path.join(root, "sub"))

    def text(n):
        return "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(n))
    files = {"a.txt": text(60) + "\n%\n" + text(40) + "\n% \t\n" + text(30) + "\n",
             "sub/b.txt": "\x1b[32m" + text(50) + "\x1b[m\n\x1b(B" + text(40),
             "c.txt": text(50).replace("\n", "\r\n") + "\r\n%\r\n100% " + text(30) + "\n",
             ".hidden": "hidden " * 50, "index.dat": "index " * 50, "empty.txt": ""}
    for name, body in files.items():
        with open(os.path.join(root, name), "w", encoding="utf-8") as f:
            f.write(body)
    with open(os.path.join(root, "binary"), "wb") as f:
        f.write(b"bin\0ary")
    os.symlink("a.txt", os.path.join(root, "link.txt"))
    return root


def train_all(env):
    corpus = make_corpus(env.path("corpus"))
    text = dict(task__name="text", task__path=corpus, task__length=16, task__eval_size=64, task__val_fraction=0.1,
                task__test_fraction=0.1, model__arch="decoder", model__positional="learned")
    return {
        "sort": env.train("sort", "sort.yaml"),
        "post_ln": env.train("post_ln", "reverse.yaml", model__norm_first="false", model__positional="learned",
                             model__activation="relu", model__layers=2),
        "norm_none": env.train("norm_none", "sort.yaml", model__norm="none", model__activation="relu",
                               model__positional="learned", model__scale=100),
        "head_dim": env.train("head_dim", "sort.yaml", model__head_dim=4, model__scale=0.3),
        "scaled": env.train("scaled", "sort.yaml", model__scale=0.4),
        "recall": env.train("recall", "recall.yaml", task__vocab=6, task__pairs=3, task__queries=2,
                            model__positional="learned"),
        "s2s": env.train("s2s", "seq2seq_reverse.yaml"),
        "s2s_recall": env.train("s2s_recall", "seq2seq_reverse.yaml", task__name="seq2seq_recall", task__vocab=6,
                                task__pairs=3, task__queries=4),
        "s2s_post_ln": env.train("s2s_post_ln", "seq2seq_reverse.yaml", task__name="seq2seq_sort", model__layers=2,
                                 model__norm_first="false", model__positional="learned"),
        "dec": env.train("dec", "sort.yaml", model__arch="decoder"),
        "dec_rope": env.train("dec_rope", "sort.yaml", model__arch="decoder", model__positional="rope",
                              model__tie_embeddings="true", model__norm_first="false", model__layers=2),
        "dec_attn_only": env.train("dec_attn_only", "sort.yaml", model__arch="decoder", model__attn_only="true",
                                   model__head_dim=4, model__scale=0.3, model__positional="learned"),
        "dec_value_dim": env.train("dec_value_dim", "sort.yaml", model__arch="decoder", model__head_dim=4,
                                   model__value_dim=12),
        "dec_recall": env.train("dec_recall", "recall.yaml", model__arch="decoder", model__positional="rope",
                                model__activation="relu", task__vocab=6, task__pairs=3, task__queries=2),
        "text": env.train("text", "sort.yaml", **text),
        "text_byte": env.train("text_byte", "sort.yaml", **dict(text, task__tokenizer="byte", model__positional="rope",
                                                               model__tie_embeddings="true",
                                                               task__path=os.path.join(corpus, "{a.txt,sub,c.txt}"))),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qkv", default=os.environ.get("QKV", os.path.join(REPO, "build", "qkv")))
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()
    if not os.access(a.qkv, os.X_OK):
        print(f"test_bridge: no qkv binary at {a.qkv} (build it, or pass --qkv / set QKV)", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="qkv-torch-test-")
    try:
        env = Env(os.path.abspath(a.qkv), tmp)
        ckpts = train_all(env)
        for test in (test_generator, test_encoder_logits, test_round_trip, test_seq2seq, test_torch_layers,
                     test_decoder, test_decoder_from_torch, test_import_mha, test_errors):
            test(env, ckpts)
        test_fixture(env)
    except Exception:
        traceback.print_exc()
        check(False, "the tests ran to the end")
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{check.run} checks, {len(check.failed)} failed" + "".join(f"\n  FAILED: {w}" for w in check.failed))
    return 0 if check.run and not check.failed else 1


if __name__ == "__main__":
    sys.exit(main())
