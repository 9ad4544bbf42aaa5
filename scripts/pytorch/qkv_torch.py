#!/usr/bin/python3
"""The PyTorch bridge: qkv checkpoints to PyTorch and back (docs/pytorch.md).

    scripts/pytorch/qkv_torch.py export CKPT.h5 OUT.pt
        qkv -> PyTorch: torch.save of {"config": YAML text, "state_dict": {qkv name: tensor}, "step": int}
    scripts/pytorch/qkv_torch.py import IN.pt OUT.h5 [--config CONFIG.yaml]
        PyTorch -> qkv: a state dict of the mirror (what export writes, a plain state dict with
        --config, or a pickled mirror module) as a sealed qkv checkpoint that qkv eval reads
    scripts/pytorch/qkv_torch.py import-mha MHA.pt --into CKPT.h5 --layer blocks.0.attn --out NEW.h5
            [--heads H] [--allow-seq-first]
        a torch.nn.MultiheadAttention (the module, or its state_dict) as one attention layer of an
        existing checkpoint
    scripts/pytorch/qkv_torch.py check CKPT.h5 [--qkv build/qkv] [--count 8] [--tol 1e-5] [--float64]
        the mirror against qkv itself: `qkv logits` (encoders, decoders), `qkv eval` (every arch)
        and `qkv generate --temperature 0` (decoders)

Run with Debian's /usr/bin/python3 (torch 1.13, h5py, numpy, yaml). As a module (scripts/ on
sys.path):

    import qkv_torch
    model, info = qkv_torch.load("runs/sort/best.h5")      # eval mode, float32 (dtype=torch.float64)
    logits = model(tokens)                                  # encoder: (B, T) int64 -> (B, T, classes)
    logits = model(src, tgt_in)                             # encoder_decoder: -> (B, Tt, tgt_vocab)
    logits = model(tokens)                                  # decoder: (B, T) -> next-token logits (B, T, V)
    new_ids = model.generate(prompt_ids, 40)                # decoder: greedy, KV cache, qkv's window rule
    qkv_torch.save_checkpoint(model, info.config_text, "runs/sort/from_torch.h5")
    qkv_torch.mha_to_qkv(torch_mha.state_dict(), num_heads)  # {"w_q.weight": ..., "w_o.bias": ...}

The mirror is a set of small nn.Modules written next to the C++ (include/qkv/nn/*.hpp) with qkv's
parameter names (tok_emb.weight, blocks.0.attn.w_q.weight, ..., head.bias) in qkv's registration
order, so a state dict maps onto a checkpoint's /model one to one, by name. Attention is written
out (softmax(q k^T scale + mask) v); a query with no allowed key gets a zero output, as in qkv.

Exit status: 0 done; 1 a file is unreadable, damaged or not a qkv checkpoint, or `check` found a
difference; 2 the input does not fit (names, shapes, heads, options) or bad arguments. Expected
errors are one message on stderr, never a traceback.
"""
import argparse
import io
import math
import os
import re
import subprocess
import sys
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, replace

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_checkpoint import HDF5_SIGNATURE, HEADER_BYTES, crc64_xz, fixed_string, links_in_order, sealed  # noqa: E402
from convert_checkpoint import write_atomically  # noqa: E402
import qkv_tasks  # noqa: E402
from qkv_mirror import ARCHS, DoesNotFit, Options, Sizes, parse_options  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORMAT, FORMAT_VERSION = "qkv-checkpoint", 2


class BridgeError(Exception):
    """An expected failure: `code` 1 (bad or unreadable file) or 2 (does not fit, bad arguments)."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def does_not_fit(message):
    return BridgeError(message, 2)


def model_sizes(o, task, tensors, section=None):
    """The vocabularies and max_len qkv's train::make_model uses: from the task (the config's),
    else, for a task unknown here (text, induction, ...), from the tensors themselves and the
    config's task section. The decoder's max_len is its context, the task's input length."""
    if task is not None:
        want_s2s = o.arch == "encoder_decoder"
        if task.seq2seq != want_s2s:
            raise does_not_fit(f"model.arch '{o.arch}' does not fit task '{task.name}' "
                               f"(qkv needs arch {'encoder_decoder' if task.seq2seq else 'encoder or decoder'} for it)")
        if o.arch == "decoder":
            return replace(o, max_len=task.input_length), Sizes(task.input_vocab, task.input_vocab)
        o = replace(o, max_len=max(o.max_len, task.input_length, task.target_length))
        if task.seq2seq:
            return o, Sizes(task.input_vocab, task.target_vocab, task.bos)
        return o, Sizes(task.input_vocab, task.num_classes)
    emb = "src_emb.weight" if o.arch == "encoder_decoder" else "tok_emb.weight"
    out = emb if o.arch == "decoder" else "head.weight"
    if emb not in tensors or out not in tensors:
        raise does_not_fit(f"the task is unknown to scripts/pytorch/qkv_tasks.py and the tensors lack {emb} / {out}")
    pos = tensors.get("pos.weight", tensors.get("src_pos.weight"))
    if pos is not None:
        o = replace(o, max_len=pos.shape[0])
    elif o.arch == "decoder":
        section = dict(qkv_tasks.DEFAULTS, **(section or {}))
        o = replace(o, max_len=3 if section["name"] == "mod_add" else int(section["length"]))
    return o, Sizes(tensors[emb].shape[0], tensors[out].shape[0])


@dataclass
class Stored:
    """What a checkpoint holds that the bridge uses: tensors in /model order, /metrics columns,
    and a text model's tokenizer (/data: "char" or "byte", its code points; None otherwise)."""
    config_text: str
    step: int
    tensors: OrderedDict
    metrics: dict
    tokenizer: str = None
    vocab: list = None


@dataclass
class Info:
    """What load() read: the config (text and parsed), the mirror's options and sizes, the task
    (None when qkv_tasks does not know it) and what the file holds (stored: config_text, step,
    tensors, metrics)."""
    path: str
    config: dict
    options: Options
    sizes: Sizes
    task: object
    stored: Stored

    @property
    def arch(self):
        return self.options.arch

    @property
    def config_text(self):
        return self.stored.config_text


def parse_config(text, where):
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise does_not_fit(f"{where}: the config is not valid YAML: {e}")
    if not isinstance(cfg, dict):
        raise does_not_fit(f"{where}: the config is not a YAML mapping")
    return cfg


def build(config, tensors=None):
    """A fresh mirror (qkv's init distributions) for a config (YAML text or dict): (model, options,
    sizes, task). `tensors` (name -> array) gives the sizes when the task is unknown here."""
    cfg = parse_config(config, "config") if isinstance(config, str) else config
    o = parse_options(cfg.get("model"))
    if o.arch not in ARCHS:
        raise does_not_fit(f"model.arch '{o.arch}': the mirror knows {', '.join(ARCHS)}")
    section = cfg.get("task") or {}
    if not isinstance(section, dict):
        raise does_not_fit(f"task: expected a mapping, found {section!r}")
    task = None  # a task qkv_tasks does not know: the sizes come from the tensors
    if section.get("name", qkv_tasks.DEFAULTS["name"]) in qkv_tasks.TASKS:
        try:
            task = qkv_tasks.make_task(section)
        except (TypeError, ValueError) as e:
            raise does_not_fit(f"task: {e}")
    o, sizes = model_sizes(o, task, tensors or {}, section)
    return ARCHS[o.arch](o, sizes), o, sizes, task


def check_fits(model, tensors, what):
    """Names and shapes of `tensors` against the mirror's parameters; one BridgeError (exit 2)
    listing every difference, as qkv's io::check_compatible."""
    expected = OrderedDict((n, tuple(p.shape)) for n, p in model.state_dict().items())
    problems = []
    for name, shape in expected.items():
        if name not in tensors:
            problems.append(f"missing: {name} {shape}")
        elif tuple(tensors[name].shape) != shape:
            problems.append(f"shape of {name}: the model has {shape}, {what} has {tuple(tensors[name].shape)}")
    problems += [f"unexpected: {n} {tuple(t.shape)}" for n, t in tensors.items() if n not in expected]
    if problems:
        raise does_not_fit(f"{what} does not fit the model its config describes:\n  " + "\n  ".join(problems))


# ---- reading and writing checkpoints (docs/checkpoint.md) ----

def verify_image(data, path):
    """The checks qkv's load_checkpoint makes before any HDF5 call: header, length, CRC-64/XZ."""
    lines = data[:HEADER_BYTES].split(b"\0", 1)[0].decode("utf-8", "replace").splitlines()
    if len(data) < HEADER_BYTES or not lines or lines[0] != FORMAT:
        hint = (" It is an HDF5 file: a format_version 1 checkpoint has no header (convert it with "
                "scripts/convert_checkpoint.py); any other HDF5 file is not a checkpoint") if data[:8] == HDF5_SIGNATURE else ""
        raise BridgeError(f"{path}: not a qkv checkpoint (no qkv header in the first {HEADER_BYTES} bytes).{hint}")
    fields = dict(line.split(" ", 1) for line in lines[1:4] if " " in line)
    if fields.get("format_version") != str(FORMAT_VERSION):
        raise BridgeError(f"{path}: header format_version {fields.get('format_version')}, this bridge reads {FORMAT_VERSION}")
    if fields.get("bytes") != str(len(data)):
        raise BridgeError(f"{path}: truncated: {len(data)} bytes, header says {fields.get('bytes')}")
    crc = f"{crc64_xz(data[HEADER_BYTES:]):016x}"
    if fields.get("crc64-xz") != crc:
        raise BridgeError(f"{path}: checksum mismatch: the file is damaged or was modified after it was written "
                          f"(header says crc64-xz {fields.get('crc64-xz')}, the bytes give {crc}); if you edited it "
                          f"on purpose, reseal it: scripts/convert_checkpoint.py --reseal {path}")


def read_checkpoint(path):
    """A verified checkpoint's config, step, /model tensors and /metrics."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BridgeError(f"{path}: cannot read: {e.strerror}")
    verify_image(data, path)
    try:  # parse the verified bytes, not the file again
        with h5py.File(io.BytesIO(data), "r") as f:
            if f.attrs.get("format") != FORMAT.encode() or f.attrs.get("format_version") != FORMAT_VERSION:
                raise BridgeError(f"{path}: root attributes format / format_version are not "
                                  f"'{FORMAT}' / {FORMAT_VERSION}")
            if "config" not in f or "model" not in f:
                raise BridgeError(f"{path}: /config or /model is missing")
            text = f["config"][()]
            tensors = OrderedDict((n, f["model"][n][()]) for n in links_in_order(f["model"]))
            metrics = {n: f["metrics"][n][()] for n in f.get("metrics", {})}
            kind = f["data"].attrs.get("tokenizer") if "data" in f else None
            vocab = [int(c) for c in f["data"]["vocab"][()]] if kind is not None and "vocab" in f["data"] else None
            return Stored(text.decode() if isinstance(text, bytes) else str(text), int(f.attrs.get("step", 0)),
                          tensors, metrics, kind.decode() if isinstance(kind, bytes) else kind, vocab)
    except (OSError, KeyError, ValueError) as e:
        raise BridgeError(f"{path}: cannot read the HDF5 file after the header: {e}")


def load(ckpt_path, dtype=torch.float32):
    """The PyTorch mirror of a qkv checkpoint's model, in eval mode, and an Info."""
    stored = read_checkpoint(ckpt_path)
    cfg = parse_config(stored.config_text, f"{ckpt_path}:/config")
    model, o, sizes, task = build(cfg, stored.tensors)
    check_fits(model, stored.tensors, f"{ckpt_path}:/model")
    model.load_state_dict({n: torch.from_numpy(np.array(a)) for n, a in stored.tensors.items()})
    return model.to(dtype).eval(), Info(ckpt_path, cfg, o, sizes, task, stored)


def to_state_dict(ckpt_path):
    """What `export` saves: {"config": YAML text, "state_dict": {qkv name: float32 tensor}, "step"},
    and for a text model "tokenizer": {"kind": "char" or "byte", "vocab": [code points]}."""
    model, info = load(ckpt_path)
    d = {"config": info.config_text, "state_dict": model.state_dict(), "step": info.stored.step}
    if info.stored.tokenizer:
        d["tokenizer"] = {"kind": info.stored.tokenizer, "vocab": list(info.stored.vocab or [])}
    return d


def qkv_version():
    try:
        with open(os.path.join(REPO, "CMakeLists.txt")) as f:
            return re.search(r"project\(qkv VERSION ([0-9.]+)", f.read()).group(1)
    except (OSError, AttributeError):
        return "unknown"


def ordered_untimed(plist):
    """Creation order of links and attributes tracked and indexed (as qkv writes groups), and no
    timestamps in object headers, so that the same content gives the same bytes."""
    flags = h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED
    plist.set_link_creation_order(flags)
    plist.set_attr_creation_order(flags)
    plist.set_obj_track_times(False)
    return plist


def create_group(parent, name):
    gcpl = ordered_untimed(h5py.h5p.create(h5py.h5p.GROUP_CREATE))
    return h5py.Group(h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl))


def write_checkpoint(path, config_text, tensors, step=0, tokenizer=None):
    """A sealed format-2 checkpoint holding a model and no training state: /optimizer with step 0
    and no buffers, empty /rng, /train and /metrics (qkv evaluates it; --resume refuses it), and
    a text model's /data (tokenizer: {"kind", "vocab"}). Built in memory (HDF5's core driver, as
    qkv's save_checkpoint), then written atomically."""
    fcpl = ordered_untimed(h5py.h5p.create(h5py.h5p.FILE_CREATE))
    fcpl.set_userblock(HEADER_BYTES)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_fapl_core(block_size=1 << 20, backing_store=False)
    with h5py.File(h5py.h5f.create(b"qkv_torch-image", h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)) as f:
        f.attrs.create("format", fixed_string(FORMAT))
        f.attrs.create("format_version", np.int64(FORMAT_VERSION))
        f.attrs.create("qkv_version", fixed_string(qkv_version()))
        f.attrs.create("step", np.int64(step))
        f.create_dataset("config", data=fixed_string(config_text), track_times=False)
        model = create_group(f, "model")
        for name, value in tensors.items():
            model.create_dataset(name, data=np.ascontiguousarray(value, dtype="<f4"), track_times=False)
        create_group(f, "optimizer").attrs.create("step", np.int64(0))
        for group in ("rng", "train", "metrics"):
            create_group(f, group)
        if tokenizer:
            data = create_group(f, "data")
            data.attrs.create("tokenizer", fixed_string(tokenizer["kind"]))
            data.create_dataset("vocab", data=np.asarray(tokenizer.get("vocab") or [], dtype="<u4"), track_times=False)
        f.flush()
        image = f.id.get_file_image()
    try:
        write_atomically(path, sealed(image))
    except OSError as e:
        raise BridgeError(f"{path}: cannot write: {e.strerror} (nothing written)")
    back = read_checkpoint(path).tensors  # what qkv will read
    if list(back) != list(tensors) or any(back[n].tobytes() != np.asarray(tensors[n], "<f4").tobytes() for n in back):
        raise BridgeError(f"{path}: the written tensors differ from the input's")


def as_state_dict(model_or_state_dict):
    sd = model_or_state_dict.state_dict() if isinstance(model_or_state_dict, nn.Module) else model_or_state_dict
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise does_not_fit(f"expected a state dict (name -> tensor) or an nn.Module, found {type(sd).__name__}")
    return sd


def save_checkpoint(model_or_state_dict, config_yaml, path, step=0, tokenizer=None):
    """A mirror (or its state dict) and the config it was built from, as a sealed qkv checkpoint
    (with a text model's tokenizer {"kind", "vocab"}, as export gives it). The names and shapes
    must be those of the model the config describes (qkv checks them too)."""
    sd = as_state_dict(model_or_state_dict)
    bad = [n for n, t in sd.items() if not t.is_floating_point()]
    if bad:
        raise does_not_fit(f"not floating point: {', '.join(bad)}")
    mirror, *_ = build(config_yaml, sd)
    check_fits(mirror, sd, "the state dict")
    tensors = OrderedDict((n, sd[n].detach().cpu().to(torch.float32).numpy()) for n in mirror.state_dict())
    write_checkpoint(path, config_yaml, tensors, step, tokenizer)


# ---- torch.nn.MultiheadAttention <-> qkv attention layers ----

def mha_to_qkv(state_dict, num_heads):
    """torch.nn.MultiheadAttention's state dict -> qkv's attention names: in_proj_weight rows
    [0, E), [E, 2E), [2E, 3E) -> w_q, w_k, w_v (or q_proj_weight, k_proj_weight, v_proj_weight when
    kdim/vdim != E); in_proj_bias likewise; out_proj -> w_o. Without biases (bias=False) there are
    no *.bias keys. Tensors are views of the input's."""
    sd = dict(state_dict)
    extra = sorted(set(sd) & {"bias_k", "bias_v"})
    if extra:
        raise does_not_fit(f"{', '.join(extra)}: add_bias_kv has no qkv equivalent")
    if "out_proj.weight" not in sd:
        raise does_not_fit(f"not a torch.nn.MultiheadAttention state dict: no out_proj.weight (found {', '.join(sd) or 'nothing'})")
    E = sd["out_proj.weight"].shape[0]
    if E % num_heads:
        raise does_not_fit(f"embed_dim {E} is not divisible by num_heads {num_heads}")
    if "in_proj_weight" in sd:
        w = sd["in_proj_weight"]
        if tuple(w.shape) != (3 * E, E):
            raise does_not_fit(f"in_proj_weight: expected ({3 * E}, {E}), found {tuple(w.shape)}")
        weights = [w[i * E:(i + 1) * E] for i in range(3)]
    else:
        missing = [n for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight") if n not in sd]
        if missing:
            raise does_not_fit(f"neither in_proj_weight nor {', '.join(missing)} in the state dict")
        weights = [sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]]
    out = OrderedDict()
    b = sd.get("in_proj_bias")
    for i, x in enumerate("qkv"):
        out[f"w_{x}.weight"] = weights[i]
        if b is not None:
            out[f"w_{x}.bias"] = b[i * E:(i + 1) * E]
    out["w_o.weight"] = sd["out_proj.weight"]
    if sd.get("out_proj.bias") is not None:
        out["w_o.bias"] = sd["out_proj.bias"]
    return out


def qkv_to_mha(tensors):
    """The inverse for kdim = vdim = E: qkv attention tensors (w_q.weight, ...) -> a state dict
    for torch.nn.MultiheadAttention(E, H) (packed in_proj_weight / in_proj_bias)."""
    sd = OrderedDict(in_proj_weight=torch.cat([torch.as_tensor(tensors[f"w_{x}.weight"]) for x in "qkv"]))
    if "w_q.bias" in tensors:
        sd["in_proj_bias"] = torch.cat([torch.as_tensor(tensors[f"w_{x}.bias"]) for x in "qkv"])
    sd["out_proj.weight"] = torch.as_tensor(tensors["w_o.weight"])
    if "w_o.bias" in tensors:
        sd["out_proj.bias"] = torch.as_tensor(tensors["w_o.bias"])
    return sd


class TorchAttention(nn.Module):
    """Runs a torch.nn.MultiheadAttention where the mirror has a MultiHeadAttention (same call), to
    compute with PyTorch's own attention; see use_torch_mha."""

    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, query, key, value, key_padding_mask=None, is_causal=False):
        mask = None
        if is_causal:  # PyTorch polarity: True = may NOT attend
            mask = torch.ones(query.shape[1], key.shape[1], dtype=torch.bool).triu(1)
        if not self.mha.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        if self.mha.in_proj_bias is None and key is query:
            # torch 1.13's fused self-attention (taken when query is key is value, in eval mode
            # without grad) fails on bias=False modules; a distinct key object takes the general path.
            key = value = key.view_as(key)
        out, _ = self.mha(query, key, value, key_padding_mask=key_padding_mask, attn_mask=mask, need_weights=False)
        return out if self.mha.batch_first else out.transpose(0, 1)


def use_torch_mha(model, layer, mha):
    """Replace the mirror's attention layer `layer` (e.g. "blocks.0.attn") by `mha` itself."""
    parent, _, name = layer.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, TorchAttention(mha))
    return model


def read_mha(path, heads, allow_seq_first):
    """(state dict, num_heads or None) of a torch.save'd MultiheadAttention or its state dict."""
    obj = torch_load(path)
    if isinstance(obj, nn.MultiheadAttention):
        if obj.add_zero_attn:
            raise does_not_fit(f"{path}: add_zero_attn=True has no qkv equivalent")
        if not obj.batch_first and not allow_seq_first:
            raise does_not_fit(f"{path}: the module has batch_first=False (inputs (T, B, E)); qkv's attention is "
                               "batch-first (B, T, E). The weights do not depend on the layout: pass "
                               "--allow-seq-first to import them anyway")
        if heads is not None and heads != obj.num_heads:
            raise does_not_fit(f"{path}: --heads {heads}, but the module has num_heads {obj.num_heads}")
        return obj.state_dict(), obj.num_heads
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj, heads
    raise does_not_fit(f"{path}: expected a torch.nn.MultiheadAttention or its state_dict, found {type(obj).__name__}")


def import_mha(mha_path, into, layer, out, heads=None, allow_seq_first=False):
    """Write `into`'s model with the attention layer `layer` taken from a torch MHA; returns notes."""
    sd, torch_heads = read_mha(mha_path, heads, allow_seq_first)
    stored = read_checkpoint(into)
    text, tensors = stored.config_text, stored.tensors
    o = parse_options(parse_config(text, f"{into}:/config").get("model"))
    layers = [n[: -len(".w_q.weight")] for n in tensors if n.endswith(".w_q.weight")]
    if layer not in layers:
        raise does_not_fit(f"--layer {layer}: {into} has no such attention layer; it has {', '.join(layers)}")
    notes = []
    if torch_heads is None:
        notes.append(f"a state dict does not say its num_heads: taken from the checkpoint (model.heads {o.heads})")
    elif torch_heads != o.heads:
        raise does_not_fit(f"num_heads: {mha_path} has {torch_heads} heads, {into} has model.heads {o.heads} "
                           f"(the same weights split into other heads compute something else)")
    if o.head_dim and o.head_dim != o.d_model // o.heads:
        raise does_not_fit(f"{into}: model.head_dim {o.head_dim} != d_model / heads; torch.nn.MultiheadAttention "
                           "always has head_dim = embed_dim / num_heads")
    if o.scale and not math.isclose(o.scale, 1 / math.sqrt(o.D), rel_tol=1e-12):
        raise does_not_fit(f"{into}: model.scale {o.scale}, torch.nn.MultiheadAttention scales by 1/sqrt(head_dim) = "
                           f"{1 / math.sqrt(o.D):.6g}: the layer would not compute what the torch module computes")
    new = mha_to_qkv(sd, torch_heads or o.heads)
    if "w_q.bias" not in new:
        notes.append("the torch module has no biases: the layer's biases are set to 0 (the same function)")
    have = OrderedDict((n[len(layer) + 1:], t) for n, t in tensors.items() if n.startswith(layer + "."))
    problems = [f"{layer}.{n}: the checkpoint's layer has no such tensor (from {torch_name(n, sd)})" for n in new if n not in have]
    for suffix, want in have.items():
        got = new.get(suffix)
        if got is None:
            new[suffix] = got = torch.zeros(want.shape)
        if tuple(got.shape) != want.shape:
            problems.append(f"{layer}.{suffix}: expected {want.shape} (the checkpoint), found {tuple(got.shape)} "
                            f"(from {torch_name(suffix, sd)})")
    if problems:
        raise does_not_fit(f"{mha_path} does not fit {into} at {layer}:\n  " + "\n  ".join(problems))
    for suffix, value in new.items():
        tensors[f"{layer}.{suffix}"] = value.detach().cpu().to(torch.float32).numpy()
    write_checkpoint(out, text, tensors, stored.step,
                     {"kind": stored.tokenizer, "vocab": stored.vocab} if stored.tokenizer else None)
    return notes


def torch_name(suffix, sd):
    x, part = suffix[2], suffix.split(".")[1]
    if suffix.startswith("w_o"):
        return f"out_proj.{part}"
    if part == "bias":
        return f"in_proj_bias part {'qkv'.index(x)}"
    return f"in_proj_weight part {'qkv'.index(x)}" if "in_proj_weight" in sd else f"{x}_proj_weight"


def torch_load(path):
    try:
        return torch.load(path, map_location="cpu")
    except FileNotFoundError:
        raise BridgeError(f"{path}: no such file")
    except Exception as e:  # torch.load raises many kinds for a file that is not a torch.save archive
        raise BridgeError(f"{path}: not a torch.save file ({type(e).__name__}: {e})")


def read_state_dict_file(path, config_path):
    """(state dict, config text, step, tokenizer) of a .pt: export's dict, a plain state dict
    (config from --config), or a pickled mirror module."""
    obj = torch_load(path)
    config, step, tokenizer = None, 0, None
    if isinstance(obj, dict) and "state_dict" in obj:
        config, step, tokenizer, obj = obj.get("config"), int(obj.get("step", 0)), obj.get("tokenizer"), obj["state_dict"]
    if config_path:
        try:
            with open(config_path) as f:
                config = f.read()
        except OSError as e:
            raise BridgeError(f"{config_path}: cannot read: {e.strerror}")
    if not isinstance(config, str):
        raise does_not_fit(f"{path}: no config: the file holds a bare state dict or module; pass --config CONFIG.yaml")
    if tokenizer is not None and not (isinstance(tokenizer, dict) and tokenizer.get("kind") in ("char", "byte")):
        raise does_not_fit(f"{path}: 'tokenizer' must be {{'kind': 'char' or 'byte', 'vocab': [code points]}}")
    return as_state_dict(obj), config, step, tokenizer


# ---- comparing with qkv ----

def eval_batch_size(config):
    """How many examples qkv's train::evaluate takes at a time for a run of `config` (a parsed
    config dict): the training micro-batch, train.batch_size / train.accumulate."""
    train = config.get("train") or {}
    return max(1, int(train.get("batch_size", 64)) // max(1, int(train.get("accumulate", 1))))


def evaluate(model, batch, batch_size):
    """qkv's train::evaluate: (loss over the scored targets, token accuracy, sequence accuracy);
    the loss is per batch of `batch_size` examples in the model's dtype, summed in double, as qkv
    does (`qkv eval` and the trainer use eval_batch_size(config))."""
    loss_sum, counted, correct, seq_correct = 0.0, 0, 0, 0
    N = batch["inputs"].shape[0]
    with torch.no_grad():
        for lo in range(0, N, batch_size):
            b = {k: torch.from_numpy(v[lo:lo + batch_size]) for k, v in batch.items()}
            logits, y = model.batch_logits(b), b["targets"]
            scored = y != qkv_tasks.IGNORE
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=qkv_tasks.IGNORE)
            loss_sum += float(loss) * int(scored.sum())
            hit = (model.predict(b, logits) == y) & scored
            counted, correct = counted + int(scored.sum()), correct + int(hit.sum())
            seq_correct += int((hit | ~scored).all(dim=1).sum())
    return loss_sum / max(counted, 1), correct / max(counted, 1), seq_correct / max(N, 1)


def run_qkv(qkv, *args):
    try:
        r = subprocess.run([qkv, *args], capture_output=True, text=True)
    except OSError as e:
        raise BridgeError(f"cannot run {qkv}: {e.strerror} (build it, or pass --qkv / set QKV)")
    if r.returncode != 0:
        raise BridgeError(f"{qkv} {' '.join(args)} failed (exit {r.returncode}): {r.stderr.strip()}")
    return r.stdout


def qkv_eval(qkv, ckpt, *args):
    """(loss, token accuracy %, sequence accuracy %) of the validation set, as `qkv eval` prints
    them ("loss (nats/token)  <validation>  <test>", or one column), and the number of validation
    examples it names."""
    out = run_qkv(qkv, "eval", ckpt, *args)
    got = [re.search(rf"^\s*{k}(?: \([^)]*\))?\s+([-+0-9.einf]+)%?(?:\s|$)", out, re.M)
           for k in ("loss", "token accuracy", "sequence accuracy")]
    count = re.search(r": \S+, (\d+) (?:validation|held-out) ", out)
    if not all(got) or not count:
        raise BridgeError(f"cannot read the output of qkv eval {ckpt}:\n{out}")
    return tuple(float(m.group(1)) for m in got) + (int(count.group(1)),)


def read_logits_file(path):
    """`qkv logits` text (also the fixture's): "N T V", N rows of tokens, N*T rows of V logits."""
    with open(path) as f:
        N, T, V = (int(x) for x in f.readline().split())
        tokens = np.array([f.readline().split() for _ in range(N)], dtype=np.int64).reshape(N, T)
        logits = np.array([f.readline().split() for _ in range(N * T)], dtype=np.float64).reshape(N, T, V)
    return tokens, logits


def write_logits_file(path, tokens, logits):
    N, T, V = logits.shape
    with open(path, "w") as f:
        f.write(f"{N} {T} {V}\n")
        f.writelines(" ".join(str(int(t)) for t in row) + "\n" for row in tokens)
        f.writelines(" ".join(f"{x:.17g}" for x in row) + "\n" for row in logits.reshape(N * T, V))


def held_out_set(info):
    """The held-out examples `qkv eval` scores (its validation set): the first eval_size examples
    of the eval stream (qkv_tasks), or a text model's validation windows (text_corpus, with the
    checkpoint's vocabulary). BridgeError when the task has no Python twin or the corpus cannot
    be read."""
    section = info.config.get("task") or {}
    n_eval = int(section.get("eval_size", qkv_tasks.DEFAULTS["eval_size"]))
    if info.task is not None:
        return info.task.held_out(int(info.config.get("seed", 1)), n_eval)
    if section.get("name") != "text":
        raise does_not_fit(f"{info.path}: task '{section.get('name')}' has no Python twin in scripts/pytorch/qkv_tasks.py or "
                           "scripts/pytorch/text_corpus.py: the held-out set cannot be generated")
    import text_corpus
    if info.stored.tokenizer:
        section = dict(section, tokenizer=info.stored.tokenizer)  # qkv uses the stored tokenizer
    try:
        return text_corpus.TextTask(section, vocab=info.stored.vocab).held_out(0, n_eval)
    except (text_corpus.CorpusError, OSError) as e:
        raise BridgeError(f"{info.path}: cannot read the text corpus: {e}")


def qkv_generate(qkv, ckpt, prompt, max_tokens, *args):
    """The ids `qkv generate --ids --temperature 0` appends to `prompt` (greedy)."""
    out = run_qkv(qkv, "generate", ckpt, "--ids", "--prompt", " ".join(map(str, prompt)), "--temperature", "0",
                  "--max-tokens", str(max_tokens), *args)
    ids = [int(x) for x in out.split()]
    if ids[:len(prompt)] != list(prompt):
        raise BridgeError(f"cannot read the output of qkv generate {ckpt}:\n{out}")
    return ids[len(prompt):]


def check(ckpt, qkv, count=8, tol=1e-5, dtype=torch.float32, gen_tokens=40):
    """Mirror vs qkv on `ckpt`: a list of (what, difference, limit); raises BridgeError when qkv
    cannot be run or the task has no Python twin."""
    model, info = load(ckpt, dtype)
    held_out = held_out_set(info)
    n_eval = len(held_out["inputs"])
    results = []
    if info.arch in ("encoder", "decoder"):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "logits.txt")
            run_qkv(qkv, "logits", ckpt, "--count", str(count), "--out", out)
            tokens, want = read_logits_file(out)
        same = np.array_equal(tokens, held_out["inputs"][: len(tokens)])
        twin = "qkv_tasks" if info.task is not None else "text_corpus"
        results.append((f"held-out tokens ({twin} vs qkv logits)", 0.0 if same else math.inf, 0.0))
        with torch.no_grad():
            got = model(torch.from_numpy(tokens)).double().numpy()
        results.append((f"logits of {len(tokens)} held-out examples, max |diff|", float(np.abs(got - want).max()), tol))
    loss, tok, seq, q_count = qkv_eval(qkv, ckpt)
    results.append((f"held-out examples (qkv {q_count}, mirror {n_eval})", abs(q_count - n_eval), 0))
    m_loss, m_tok, m_seq = evaluate(model, held_out, eval_batch_size(info.config))
    results.append((f"held-out loss ({n_eval} examples; qkv {loss:.6f}, mirror {m_loss:.6f})",
                    abs(loss - m_loss), tol + 5e-7))  # qkv prints 6 decimals
    metrics = info.stored.metrics
    if len(metrics.get("eval_loss", [])) and len(metrics.get("step", [])) and metrics["step"][-1] == info.stored.step:
        results.append((f"held-out loss vs /metrics/eval_loss of step {info.stored.step} (not rounded)",
                        abs(float(metrics["eval_loss"][-1]) - m_loss), tol))
    for what, q, m in (("token accuracy", tok, m_tok), ("sequence accuracy", seq, m_seq)):
        results.append((f"{what} (qkv {q:.2f}%, mirror {100 * m:.2f}%)", abs(q - float(f"{100 * m:.2f}")), 0.0))
    if info.arch == "decoder" and gen_tokens:
        prompt = [int(t) for t in held_out["inputs"][0][: max(1, model.max_len // 2)]]
        want = qkv_generate(qkv, ckpt, prompt, gen_tokens)
        for use_cache in (True, False):
            got = model.generate(prompt, gen_tokens, cache=use_cache)
            differ = sum(a != b for a, b in zip(got, want)) + abs(len(got) - len(want))
            results.append((f"greedy generation, {len(prompt)}-token prompt + {gen_tokens} (context {model.max_len}), "
                            f"mirror {'with its KV cache' if use_cache else 'without a cache'} vs qkv generate: "
                            "tokens that differ", differ, 0))
    return results


# ---- command line ----

def cmd_export(a):
    d = to_state_dict(a.checkpoint)
    data = io.BytesIO()
    torch.save(d, data)
    try:
        write_atomically(a.out, data.getvalue())
    except OSError as e:
        raise BridgeError(f"{a.out}: cannot write: {e.strerror} (nothing written)")
    print(f"{a.checkpoint} -> {a.out}: {len(d['state_dict'])} tensors, config, step {d['step']}")


def cmd_import(a):
    sd, config, step, tokenizer = read_state_dict_file(a.state_dict, a.config)
    save_checkpoint(sd, config, a.out, step, tokenizer)
    print(f"{a.state_dict} -> {a.out}: {len(sd)} tensors, sealed qkv checkpoint (format_version {FORMAT_VERSION})")


def cmd_import_mha(a):
    for note in import_mha(a.mha, a.into, a.layer, a.out, a.heads, a.allow_seq_first):
        print(f"note: {note}")
    print(f"{a.mha} -> {a.out}: {a.layer} replaced in a copy of {a.into}")


def cmd_check(a):
    results = check(a.checkpoint, a.qkv, a.count, a.tol, torch.float64 if a.float64 else torch.float32, a.generate)
    ok = True
    for what, diff, limit in results:
        ok = ok and diff <= limit
        print(f"{'ok  ' if diff <= limit else 'FAIL'} {what}: {diff:.3g} (limit {limit:.3g})")
    print(f"{a.checkpoint}: {'the mirror matches qkv' if ok else 'the mirror DIFFERS from qkv'}")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="qkv_torch.py", description=__doc__.split("\n\nRun with")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog="docs/pytorch.md")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export", help="qkv checkpoint -> torch.save'd {config, state_dict}")
    p.add_argument("checkpoint", help="a qkv checkpoint (.h5)")
    p.add_argument("out", help="the .pt file to write")
    p.set_defaults(run=cmd_export)
    p = sub.add_parser("import", help="torch.save'd state dict -> sealed qkv checkpoint")
    p.add_argument("state_dict", help="a .pt: what export writes, a state dict (with --config) or a mirror module")
    p.add_argument("out", help="the checkpoint to write (.h5)")
    p.add_argument("--config", help="YAML config of the model (needed for a bare state dict or module)")
    p.set_defaults(run=cmd_import)
    p = sub.add_parser("import-mha", help="torch.nn.MultiheadAttention -> one attention layer of a checkpoint")
    p.add_argument("mha", help="a .pt: a torch.nn.MultiheadAttention or its state_dict")
    p.add_argument("--into", required=True, help="the checkpoint whose model receives the layer")
    p.add_argument("--layer", required=True, help="e.g. blocks.0.attn, decoder.blocks.0.cross_attn")
    p.add_argument("--out", required=True, help="the checkpoint to write (a copy of --into with the layer replaced)")
    p.add_argument("--heads", type=int, help="num_heads of a bare state dict (checked against the config)")
    p.add_argument("--allow-seq-first", action="store_true", help="accept a module with batch_first=False")
    p.set_defaults(run=cmd_import_mha)
    p = sub.add_parser("check", help="the mirror against qkv logits / qkv eval / qkv generate")
    p.add_argument("checkpoint", help="a qkv checkpoint (.h5)")
    p.add_argument("--qkv", help="the qkv binary (default: $QKV, else build/qkv)", default=os.environ.get("QKV", os.path.join(REPO, "build", "qkv")))
    p.add_argument("--count", type=int, default=8, help="held-out examples for the logits comparison")
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--float64", action="store_true", help="run the mirror in float64")
    p.add_argument("--generate", type=int, default=40, help="decoders: greedy tokens to compare with qkv generate (0: none)")
    p.set_defaults(run=cmd_check)
    a = ap.parse_args(argv)
    try:
        return a.run(a) or 0
    except (BridgeError, DoesNotFit) as e:
        print(f"qkv_torch {a.command}: {e}", file=sys.stderr)
        return getattr(e, "code", 2)


if __name__ == "__main__":
    sys.exit(main())
