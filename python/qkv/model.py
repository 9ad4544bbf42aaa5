"""A trained model in Python: its config and vocabulary, and forward passes with a cache of
activations and with hooks, named as qkv's hook points (TransformerLens's names)."""

import contextlib
import fnmatch
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from . import _qkv

MASK_TEXT = "[MASK]"


def load(path, task_overrides=None):
    """The model of checkpoint `path` (a best.h5 or last.h5 of a run), ready to run.

    The file is checked as `qkv eval` checks it (read first in a child process, so that a damaged
    file raises qkv.IoError instead of crashing the interpreter; QKV_NO_PROBE=1 skips that).
    `task_overrides`: "task.key=value" strings or a {"task.key": value} dict (task keys only, as
    `qkv eval --set`). The held-out data are made when an instrument first needs them.
    Raises qkv.IoError (missing, unreadable or damaged file), qkv.ConfigError, ValueError.
    """
    return Model(_qkv.Model(os.fspath(path), _override_list(task_overrides)))


def _override_list(overrides):
    """["key=value", ...] from a list of such strings or a {key: value} dict."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{k}={_yaml_scalar(v)}" for k, v in overrides.items()]
    if isinstance(overrides, str):
        return [overrides]
    return [str(o) for o in overrides]


def _yaml_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    return str(v)


def _parse_config_yaml(text):
    """The resolved config (config::to_yaml: sections of `key: scalar` lines) as nested dicts."""
    def scalar(s):
        s = s.strip()
        if s.startswith('"'):
            return json.loads(s)
        if s in ("true", "false"):
            return s == "true"
        if s in ("null", "~", ""):
            return None
        for kind in (int, float):
            try:
                return kind(s)
            except ValueError:
                pass
        return s

    config, section = {}, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().partition(":")
        if line.startswith(" ") and section is not None:
            section[key] = scalar(value)
        elif value.strip():
            config[key], section = scalar(value), None
        else:
            section = config[key] = {}
    return config


# TransformerLens's names for activations qkv names otherwise: a name of the left form given to
# run_with_cache, run_with_hooks or add_hook raises a ValueError that gives qkv's name (the middle
# column; L the block) when the model has it. None: qkv has no such point, and the note says what to
# use instead.
_TRANSFORMER_LENS_NAMES = [
    (r"hook_embed", "tok_emb", None),
    (r"hook_pos_embed", "pos", "the token embeddings plus positions"),
    (r"blocks\.(\d+)\.hook_attn_out", "blocks.{L}.attn.hook_result", None),
]


def _transformer_lens_hint(name, known):
    """The ValueError message for `name` when it is one of TransformerLens's names, else None."""
    for pattern, ours, note in _TRANSFORMER_LENS_NAMES:
        m = re.fullmatch(pattern, name)
        if not m:
            continue
        if m.groups():
            ours = ours.replace("{L}", m.group(1))
        if ours in known:
            return f"{name!r} is TransformerLens's name; qkv's is {ours!r}" + (f" ({note})" if note else "")
    return None


@dataclass(frozen=True)
class Config:
    """The model's sizes and kinds under TransformerLens's names (HookedTransformerConfig), read
    from the checkpoint's config: m.cfg.n_layers, m.cfg.n_heads, ... (m.config holds every key)."""

    n_layers: int      # blocks (of the encoder, for an encoder-decoder model)
    n_heads: int       # H
    d_model: int       # C
    d_head: int        # D of the first attention layer
    d_mlp: object      # the feed-forward width; None for an attention-only model (attn_only)
    d_vocab: int       # input token ids are < d_vocab
    d_vocab_out: int   # V, the logits' last axis
    n_ctx: int         # the longest row the model reads
    attn_only: bool = False
    normalization_type: object = "LN"   # "LN" (LayerNorm, pre-LN blocks), "LNPost" (post-LN), None (model.norm: none)
    positional_embedding_type: str = "standard"  # "standard" (learned), "sinusoidal", "rotary"
    act_fn: object = "gelu"             # "gelu" (exact, erf) or "relu"; None when attn_only
    eps: float = 1e-5                   # LayerNorm's epsilon
    d_vocab_embed: int = 0              # rows of the token embedding W_E (d_vocab plus special tokens)


def _frozen(a):
    """A read-only float array (a copy when `a` is a view of someone else's buffer)."""
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


_HEAD_AXIS = re.compile(r"(.*\.attn\.hook_(q|k|v|z|head_result)|.*\.hook_(q|k|v)_input)$")
LAYOUTS = ("qkv", "transformer_lens")


def _is_per_head(name):
    """Hook points whose axis 1 is the head in qkv's layout (B, H, T, X) and axis 2 in
    TransformerLens's (B, T, H, X)."""
    return bool(_HEAD_AXIS.match(name))


class HookPoint:
    """What a hook function receives second (TransformerLens passes its HookPoint): `name`, the
    dotted name of the point ("blocks.0.attn.hook_z"), and `layer()`, the block index in it."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def layer(self):
        """The number after "blocks." in the name (ValueError when there is none)."""
        parts = self.name.split(".")
        for a, b in zip(parts, parts[1:]):
            if a == "blocks" and b.isdigit():
                return int(b)
        raise ValueError(f"hook point {self.name!r} is not inside a block")

    def __repr__(self):
        return f"HookPoint({self.name!r})"


class ActivationCache(Mapping):
    """Activations by hook-point name, in the order the forward pass produced them: a read-only
    mapping of numpy arrays (run_with_cache). The arrays are views of qkv's buffers (no copy);
    they stay valid as long as you hold them.

    cache["blocks.0.attn.hook_pattern"], or TransformerLens's short form cache["pattern", 0]
    (attention layer 0, in model order: Model.attention_layers). A missing name raises KeyError
    with the closest recorded name.
    """

    def __init__(self, arrays, model):
        self._arrays = arrays
        self._model = model

    def _name(self, key):
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], (int, np.integer)):
            short, layer = key
            layers = self._model.attention_layers
            if not 0 <= layer < len(layers):
                raise KeyError(f"{key!r}: the model has {len(layers)} attention layers (0..{len(layers) - 1})")
            short = short if short.startswith("hook_") else "hook_" + short
            return f"{layers[layer]['name']}.{short}"
        return key

    def __getitem__(self, key):
        name = self._name(key)
        try:
            return self._arrays[name]
        except (KeyError, TypeError):
            names = list(self._arrays)
            hint = _qkv.did_you_mean(str(name), names)
            raise KeyError(f"nothing recorded at {name!r}{hint} (recorded: {', '.join(names) or 'nothing'})") from None

    def __iter__(self):
        return iter(self._arrays)

    def __len__(self):
        return len(self._arrays)

    @property
    def nbytes(self):
        """Bytes of all the arrays."""
        return sum(a.nbytes for a in self._arrays.values())

    def shapes(self):
        """{name: shape}."""
        return {k: v.shape for k, v in self._arrays.items()}

    def __repr__(self):
        inner = ", ".join(f"{k} {v.shape}" for k, v in self._arrays.items())
        return f"ActivationCache({len(self)} arrays, {self.nbytes} bytes: {inner})"


class Model:
    """A trained model (qkv.load). Inputs `x` of the methods below may be:

      text                  a str, made into the row the qkv command reads for --text
                            (Task.text_row: the tokenizer's ids, [MASK] as the mask token of a
                            masked model, a grammar row as the grammar makes them)
      token ids             a list of ints or a 1-D integer array (one row; required for tasks
                            without a tokenizer)
      a batch of ids        a 2-D integer array (B, T)
      a batch dict          {"inputs": (B, T), "targets": (B, T) optional, "decoder_inputs": (B, Tt)
                            for encoder-decoder models}, as input_row and held_out return

    Hook points (hook_names) of every attention layer, TransformerLens's names and shapes:
      hook_q, hook_k   (B, H, T, D)   queries and keys entering the dot products (after rotary
                                      embeddings, when the model uses them)
      hook_v           (B, H, Tk, Dv) values
      hook_pattern     (B, H, Tq, Tk) attention weights, rows summing to 1 (0 on masked keys)
      hook_z           (B, H, Tq, Dv) each head's output, before the heads are merged and w_o
      hook_result      (B, Tq, C)     the layer's output after w_o (TransformerLens's hook_attn_out)
    Any module's dotted name (module_names) can be recorded or hooked too: its output, e.g.
    "blocks.0" the residual stream after block 0, "tok_emb" the token embeddings, "head" the
    logits. Logits are (B, T, V).

    Hooks added with add_hook (or inside `with m.hooks(...)`) stay on the model and run in every
    forward pass of its methods (run_with_cache, run_with_hooks, m(x), evaluate, and qkv.patch)
    until reset_hooks(); the C++ instruments (qkv.heads, ablate, explain, fill, generate) refuse a
    model that has some, as they would not see them.
    """

    def __init__(self, model):
        self._m = model
        self.config_yaml = model.config_yaml
        self.config = _parse_config_yaml(self.config_yaml)
        self.hook_names = model.hook_names()
        self.module_names = model.module_names()
        self.attention_layers = model.attention_layers()
        self.vocab = model.labels(list(range(model.input_vocab)))
        self._added_hooks = []  # (name, fn(activation, hook)) pairs of add_hook, in order
        first = self.attention_layers[0]
        blocks = sum(1 for n in self.module_names if re.fullmatch(r"(encoder\.)?blocks\.\d+", n))
        mc = self.config["model"]
        attn_only = bool(mc.get("attn_only", False))
        norm = None if mc.get("norm", "layer") == "none" else ("LN" if mc.get("norm_first", True) else "LNPost")
        positional = {"learned": "standard", "sinusoidal": "sinusoidal", "rope": "rotary"}.get(mc.get("positional"),
                                                                                                mc.get("positional"))
        emb = self.state_dict().get("tok_emb.weight")
        self.cfg = Config(n_layers=blocks, n_heads=first["heads"], d_model=mc["d_model"], d_head=first["head_dim"],
                          d_mlp=None if attn_only else mc["d_ff"], d_vocab=model.input_vocab,
                          d_vocab_out=model.num_classes, n_ctx=model.max_len, attn_only=attn_only,
                          normalization_type=norm, positional_embedding_type=positional,
                          act_fn=None if attn_only else mc.get("activation", "gelu"), eps=1e-5,
                          d_vocab_embed=0 if emb is None else emb.shape[0])
        self._layout = "qkv"

    # ---- what the model is ----
    @property
    def path(self):
        """The checkpoint it came from."""
        return self._m.path

    @property
    def task(self):
        """The task's name ("grammar", "text", "sort", ...)."""
        return self._m.task_name

    @property
    def arch(self):
        """"encoder", "decoder" or "encoder_decoder"."""
        return self._m.arch

    @property
    def vocab_size(self):
        """Input token ids are < this (V of the embedding)."""
        return self._m.input_vocab

    @property
    def num_classes(self):
        """Target ids are < this; the logits have this many columns (an encoder-decoder's have
        one more: its decoder vocabulary includes BOS)."""
        return self._m.num_classes

    @property
    def context(self):
        """The longest row the model reads."""
        return self._m.max_len

    @property
    def tokenizer(self):
        """"char", "byte" or "word" for text models; None for token-id tasks."""
        return self._m.tokenizer

    @property
    def mask_token(self):
        """The mask token's id (masked language models), else -1."""
        return self._m.mask_token

    @property
    def pad_token(self):
        """The padding token's id (grammar rows end in it), else -1."""
        return self._m.pad_token

    @property
    def num_parameters(self):
        return self._m.num_parameters

    def __repr__(self):
        heads = "/".join(str(layer["heads"]) for layer in self.attention_layers)
        return (f"qkv.Model({self.path!r}: {self.arch} on task {self.task}, {len(self.attention_layers)} attention "
                f"layers ({heads} heads), vocabulary {self.vocab_size}, {self.num_parameters} parameters)")

    def state_dict(self):
        """{dotted name: parameter} in registration order ("blocks.0.attn.w_q.weight" (H*D, C), ...):
        read-only numpy views of the model's own parameters (no copy; the checkpoint's /model)."""
        return self._m.state_dict()

    # ---- weights under TransformerLens's names and shapes (read-only copies) ----
    def _attn(self, layer, what):
        """The attention parameter `what` ("w_q.weight", ...) of block `layer` (encoder or decoder-only)."""
        if self.arch == "encoder-decoder":
            raise ValueError("weights by TransformerLens's names: for encoder and decoder-only models (an "
                             "encoder-decoder's are in state_dict(), under encoder.blocks and decoder.blocks)")
        return self.state_dict()[f"blocks.{layer}.attn.{what}"]

    def _per_head(self, what, out_axis):
        """(n_layers, n_heads, ...) from a (H*X, C) projection (out_axis 0) or a (C, H*X) one (1)."""
        H, out = self.cfg.n_heads, []
        for layer in range(self.cfg.n_layers):
            w = self._attn(layer, what)
            if out_axis == 0:  # (H*X, C) -> (H, C, X)
                out.append(w.reshape(H, -1, w.shape[1]).transpose(0, 2, 1))
            else:              # (C, H*X) -> (H, X, C)
                out.append(w.reshape(w.shape[0], H, -1).transpose(1, 2, 0))
        return _frozen(np.stack(out))

    @property
    def W_Q(self):
        """(n_layers, n_heads, d_model, d_head): q_h = x @ W_Q[l, h] + b_Q[l, h] (x after norm1 in a pre-LN block)."""
        return self._per_head("w_q.weight", 0)

    @property
    def W_K(self):
        """(n_layers, n_heads, d_model, d_head)."""
        return self._per_head("w_k.weight", 0)

    @property
    def W_V(self):
        """(n_layers, n_heads, d_model, d_head_v)."""
        return self._per_head("w_v.weight", 0)

    @property
    def W_O(self):
        """(n_layers, n_heads, d_head_v, d_model): the layer's output is sum_h z_h @ W_O[l, h] + b_O[l]."""
        return self._per_head("w_o.weight", 1)

    def _bias(self, what):
        H = self.cfg.n_heads
        return _frozen(np.stack([self._attn(layer, what).reshape(H, -1) for layer in range(self.cfg.n_layers)]))

    @property
    def b_Q(self):
        """(n_layers, n_heads, d_head)."""
        return self._bias("w_q.bias")

    @property
    def b_K(self):
        """(n_layers, n_heads, d_head)."""
        return self._bias("w_k.bias")

    @property
    def b_V(self):
        """(n_layers, n_heads, d_head_v)."""
        return self._bias("w_v.bias")

    @property
    def b_O(self):
        """(n_layers, d_model)."""
        return _frozen(np.stack([self._attn(layer, "w_o.bias") for layer in range(self.cfg.n_layers)]))

    @property
    def W_E(self):
        """(d_vocab_embed, d_model): the token embeddings (a tied decoder multiplies them by sqrt(d_model) on input)."""
        return _frozen(self.state_dict()["tok_emb.weight"])

    @property
    def W_pos(self):
        """(positions, d_model): learned positions (ValueError for sinusoidal and rotary ones, which have no weights)."""
        sd = self.state_dict()
        if "pos.weight" not in sd:
            raise ValueError(f"W_pos: the model's positions are {self.cfg.positional_embedding_type}, not learned weights")
        return _frozen(sd["pos.weight"])

    @property
    def W_U(self):
        """(d_model, d_vocab_out): logits = norm(resid) @ W_U + b_U (the token embeddings' transpose when tied)."""
        sd = self.state_dict()
        return _frozen((sd["head.weight"] if "head.weight" in sd else sd["tok_emb.weight"][: self.num_classes]).T)

    @property
    def b_U(self):
        """(d_vocab_out,): the output bias (zeros when the model has none)."""
        return _frozen(self.state_dict().get("head.bias", np.zeros(self.num_classes, np.float32)))

    def qk_circuit(self, layer, head, full=False):
        """The head's QK circuit, W_Q[l, h] @ W_K[l, h].T (d_model, d_model): the bilinear form the
        scores are made of, score(i, j) = scale * (x_i W_Q + b_Q) . (x_j W_K + b_K) (biases, the
        norm before the head, rotary positions and the scale left out, as TransformerLens's
        model.QK). full=True: W_E @ QK @ W_E.T (d_vocab_embed, d_vocab_embed), token against token
        (through the embeddings alone: no positions, no norm)."""
        qk = self.W_Q[layer, head].astype(np.float64) @ self.W_K[layer, head].astype(np.float64).T
        if full:
            e = self.W_E.astype(np.float64)
            qk = e @ qk @ e.T
        return _frozen(qk)

    def ov_circuit(self, layer, head, full=False):
        """The head's OV circuit, W_V[l, h] @ W_O[l, h] (d_model, d_model): what attending to x_j
        writes, x_j @ OV (as TransformerLens's model.OV). full=True: W_E @ OV @ W_U
        (d_vocab_embed, d_vocab_out): the logits a token attended to raises (no norms)."""
        ov = self.W_V[layer, head].astype(np.float64) @ self.W_O[layer, head].astype(np.float64)
        if full:
            ov = self.W_E.astype(np.float64) @ ov @ self.W_U.astype(np.float64)
        return _frozen(ov)

    # ---- tokens ----
    def tokenize(self, text, mask_text=MASK_TEXT):
        """The tokenizer's ids of `text` (each `mask_text` the mask token of a masked model); no
        padding and nothing added (input_row gives the row the model reads). ValueError naming the
        characters outside the vocabulary."""
        return self._m.encode(text, mask_text if self.mask_token >= 0 else "")

    def decode(self, ids):
        """Token ids -> text (special tokens as their labels, e.g. "[MASK]")."""
        return self._m.decode([int(i) for i in np.asarray(ids).reshape(-1)]).decode("utf-8", errors="replace")

    def to_tokens(self, x, mask_text=MASK_TEXT):
        """The token ids the model reads for `x`, a (B, T) int64 array (TransformerLens's
        to_tokens): input_row(x)["inputs"]. For text, the row the command reads for --text, which
        may differ from tokenize(x) (a grammar row ends its sentence with 。)."""
        return self.input_row(x, mask_text)["inputs"]

    def to_str_tokens(self, x, mask_text=MASK_TEXT):
        """The labels of the tokens the model reads for `x` (one row), as TransformerLens's
        to_str_tokens: what the axes of its patterns are."""
        row = self.to_tokens(x, mask_text)
        if row.shape[0] != 1:
            raise ValueError(f"to_str_tokens: expected one row, found {row.shape[0]}")
        return self._m.labels(row[0].tolist())

    def input_row(self, x, mask_text=MASK_TEXT):
        """The batch dict the model reads for `x` (see the class docstring)."""
        if isinstance(x, Mapping):
            return dict(x)
        if isinstance(x, str):
            return self._m.text_row(x, mask_text)
        a = np.asarray(x)
        if a.ndim == 2:
            return {"inputs": a}
        return self._m.ids_row(a)

    def held_out(self, split="test", n=None):
        """The first `n` (all when None) rows of the "validation" or "test" split, as a batch dict
        with targets: the rows the instruments report on (test) or use as a reference."""
        return self._m.held_out(split, 0 if n is None else int(n))

    # ---- forward passes ----
    def _checked(self, name, what):
        """`name`, or a ValueError when it is TransformerLens's name for something qkv names
        otherwise (other unknown names are the C++ side's error, with its did-you-mean)."""
        if isinstance(name, str) and name not in self.hook_names and name not in self.module_names:
            hint = _transformer_lens_hint(name, set(self.hook_names) | set(self.module_names))
            if hint:
                raise ValueError(f"{what}: {hint}")
        return name

    def _names(self, names_filter):
        if names_filter is None:
            return list(self.hook_names)
        if callable(names_filter):
            return [n for n in self.hook_names if names_filter(n)]
        items = [names_filter] if isinstance(names_filter, str) else list(names_filter)
        names = []
        for item in items:
            if any(c in item for c in "*?["):
                matched = [n for n in self.hook_names if fnmatch.fnmatchcase(n, item)]
                if not matched:
                    raise ValueError(f"names_filter: {item!r} matches no hook point"
                                     f"{_qkv.did_you_mean(item, self.hook_names)}")
                names += matched
            else:
                names.append(self._checked(item, "names_filter"))
        return list(dict.fromkeys(names))

    def _hooks(self, fwd_hooks, with_added=True):
        out = list(self._added_hooks) if with_added else []
        for pair in fwd_hooks or ():
            try:
                where, fn = pair
            except (TypeError, ValueError):
                raise TypeError(f"fwd_hooks: expected (name, function) pairs, found {pair!r}") from None
            if not callable(fn):
                raise TypeError(f"fwd_hooks: the hook for {where!r} is not callable")
            if not callable(where) and not isinstance(where, str):
                raise TypeError(f"fwd_hooks: expected a hook point's name, a glob or a filter function, found {where!r}")
            if callable(where) or any(c in where for c in "*?["):
                names = self._names(where)
            else:
                names = [self._checked(where, "fwd_hooks")]
            for name in names:
                out.append((name, self._hook_fn(name, fn)))
        return out

    # ---- the layout of per-head arrays ----
    @property
    def layout(self):
        """How arrays with a head axis are handed out: "qkv" (the default), (B, H, T, X): heads
        before positions, as attention computes them; or "transformer_lens", (B, T, H, X), as
        TransformerLens's hook_q, hook_k, hook_v, hook_z, hook_result and hook_*_input are. Set it
        (m.layout = "transformer_lens") and every cache, hook function, gradient and weight of
        this model follows (transposed views, no copies; a hook's replacement is taken in the same
        layout). hook_pattern and hook_attn_scores are (B, H, Tq, Tk) in both."""
        return self._layout

    @layout.setter
    def layout(self, value):
        if value not in LAYOUTS:
            raise ValueError(f"layout: expected one of {', '.join(map(repr, LAYOUTS))}, found {value!r}")
        self._layout = value

    def _out(self, name, a):
        """`a` recorded at `name`, in this model's layout (a view)."""
        if self._layout == "transformer_lens" and a.ndim == 4 and _is_per_head(name):
            return a.transpose(0, 2, 1, 3)
        return a

    def _hook_fn(self, name, fn):
        """fn(activation, hook) as the C++ side calls it: in this model's layout, both ways."""
        point = HookPoint(name)
        if self._layout == "transformer_lens" and _is_per_head(name):
            def in_layout(a, fn=fn, point=point):
                r = fn(a.transpose(0, 2, 1, 3), point)
                if r is None:
                    return None
                r = np.asarray(r)
                if r.ndim != 4:
                    raise ValueError(f"hook {name!r} returned shape {r.shape}; expected (B, T, H, X), the "
                                     f"transformer_lens layout of this model")
                return r.transpose(0, 2, 1, 3)
            return in_layout
        return lambda a, fn=fn, point=point: fn(a, point)

    # ---- hooks that stay on the model (TransformerLens's add_hook, reset_hooks, hooks) ----
    def add_hook(self, name, fn):
        """Add fn(activation, hook) at `name` (a hook point's or module's name, a glob or a filter
        function name -> bool, as in fwd_hooks) for every forward pass from now on, after the hooks
        added before it and before a call's own fwd_hooks, until reset_hooks()."""
        self._added_hooks += self._known(self._hooks([(name, fn)], with_added=False), "add_hook")

    def reset_hooks(self):
        """Remove every hook add_hook added."""
        self._added_hooks = []

    @contextlib.contextmanager
    def hooks(self, fwd_hooks=()):
        """`with m.hooks(fwd_hooks=[(name, fn)]):` the hooks are on inside the block (as add_hook)
        and removed at its end, also when it raises; the model is yielded."""
        before = len(self._added_hooks)
        self._added_hooks += self._known(self._hooks(fwd_hooks, with_added=False), "hooks")
        try:
            yield self
        finally:
            del self._added_hooks[before:]

    def _known(self, hooks, what):
        """`hooks`, or a ValueError for the first name that is no hook point or module: a hook
        that stays on the model is checked when it is added, not at the next forward pass."""
        for name, _ in hooks:
            if name not in self.hook_names and name not in self.module_names:
                raise ValueError(f"{what}: no hook point or module named {name!r}"
                                 f"{_qkv.did_you_mean(name, self.hook_names + self.module_names)}")
        return hooks

    def _no_added_hooks(self, what):
        """A ValueError when add_hook hooks are on: `what` runs in C++ and would not see them."""
        if self._added_hooks:
            names = ", ".join(dict.fromkeys(name for name, _ in self._added_hooks))
            raise ValueError(f"{what}: the model has hooks added with add_hook or hooks() ({names}), which {what} "
                             f"does not run (it runs in C++); call m.reset_hooks() first, or use run_with_hooks")

    def run_with_cache(self, x, names_filter=None, fwd_hooks=(), remove_batch_dim=False, incl_bwd=False, metric=None,
                       bwd_hooks=()):
        """Run `x` and record activations: returns (logits, cache), logits (B, T, V).

        names_filter (TransformerLens's): None records every hook point; a name ("blocks.0.attn.
        hook_pattern", or a module's name), a glob ("*.hook_pattern") or a list of them; or a
        function name -> bool over the hook points. Only those points are hooked, so a pass that
        records the patterns only keeps them alone (and a pass that records no pattern does not
        compute them at all: qkv's fused attention never builds them unless asked).
        fwd_hooks: as run_with_hooks; the cache holds the values they leave (hooks added with
        add_hook run too). remove_batch_dim=True (one row only): the cache's arrays without their
        batch axis, e.g. hook_pattern (H, Tq, Tk); the logits keep theirs, as in TransformerLens.
        The cache's arrays are read-only views of qkv's buffers, not copies; the logits are the
        caller's to change (a copy when a recorded value is the logits' buffer).

        incl_bwd=True also records, under "<name>_grad", the gradient of `metric` with respect to
        each recorded hook point (one forward and one backward pass on qkv's tape, parameters
        frozen, eval mode; nn::run_with_grads). metric: a qkv.Metric (qkv.logit_diff(position,
        answer, wrong), qkv.loss(targets, positions)), or a function of the logits (B, T, V) ->
        float, whose gradient is then taken by central differences (one call per logit: fine for
        small models; give qkv.Metric(fn, grad) for large ones). A hook that replaces a value cuts
        the gradient there (the replacement is a constant). bwd_hooks: (name, fn) pairs called
        with (gradient, hook) after the backward pass, to observe (they cannot change it: a
        return other than None raises).
        """
        row = self.input_row(x)
        if remove_batch_dim and np.asarray(row["inputs"]).shape[0] != 1:
            raise ValueError(f"remove_batch_dim: expected one row, found {np.asarray(row['inputs']).shape[0]}")
        names = self._names(names_filter)
        if not incl_bwd:
            if metric is not None or bwd_hooks:
                raise ValueError("metric and bwd_hooks need incl_bwd=True")
            logits, arrays = self._m.run(row, names, self._hooks(fwd_hooks))
        else:
            from .metrics import as_metric
            m = as_metric(metric, "metric")
            logits, value, values, grads = self._m.run_grads(row, names, self._hooks(fwd_hooks), m.value_and_grad)
            for a in list(values.values()) + list(grads.values()):
                a.setflags(write=False)
            arrays = {}
            for name in values:
                arrays[name] = values[name]
            for name in values:
                arrays[name + "_grad"] = grads[name]
            self._call_bwd_hooks(bwd_hooks, grads)
        arrays = {k: self._out(k.removesuffix("_grad"), v) for k, v in arrays.items()}
        if remove_batch_dim:
            arrays = {k: v[0] for k, v in arrays.items()}
        return logits, ActivationCache(arrays, self)

    def _call_bwd_hooks(self, bwd_hooks, grads):
        for pair in bwd_hooks or ():
            try:
                where, fn = pair
            except (TypeError, ValueError):
                raise TypeError(f"bwd_hooks: expected (name, function) pairs, found {pair!r}") from None
            names = self._names(where)
            for name in names:
                if name not in grads:
                    raise ValueError(f"bwd_hooks: {name!r} is not recorded; add it to names_filter")
                if fn(self._out(name, grads[name]), HookPoint(name)) is not None:
                    raise ValueError(f"bwd_hooks: the hook for {name!r} returned a value: qkv's backward hooks observe "
                                     f"the gradient (computed on the tape in one pass); they cannot replace it")

    def run_with_hooks(self, x, fwd_hooks=()):
        """Run `x` with hook functions: returns the logits (B, T, V).

        fwd_hooks: (name, fn) pairs; the name may also be a glob or a function name -> bool over
        the hook points (as TransformerLens's). fn(activation, hook) receives the activation at
        the point as a read-only numpy view (no copy) and hook, a HookPoint (hook.name). It returns
        None to leave the value as it is, or an array of the same shape to replace it (any numeric
        dtype; it is copied as float32): ablation, patching and steering. To change a few entries,
        copy first: `z = z.copy(); z[:, head] = 0; return z`. A wrong shape raises ValueError
        naming the hook, the shape returned and the shape expected; an unknown name, ValueError
        with the closest name. Hooks on one point run in list order; the model is unchanged
        afterwards (hooks added with add_hook run first).
        """
        logits, _ = self._m.run(self.input_row(x), [], self._hooks(fwd_hooks))
        return logits

    def __call__(self, x):
        """The logits (B, T, V) of `x`."""
        return self.run_with_hooks(x)

    def evaluate(self, x=None, fwd_hooks=(), batch_size=256):
        """Held-out metrics of a batch with targets (default: the whole test split) as `qkv eval`
        and `qkv ablate` compute them (model::evaluate, `batch_size` rows at a time), with
        fwd_hooks installed: {"loss", "token_accuracy", "sequence_accuracy"}."""
        batch = self.held_out("test") if x is None else self.input_row(x)
        return self._m.evaluate(batch, self._hooks(fwd_hooks), int(batch_size))
