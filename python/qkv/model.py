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
    """The model's sizes under TransformerLens's names (HookedTransformerConfig), read from the
    checkpoint's config: m.cfg.n_layers, m.cfg.n_heads, ... (m.config holds every key)."""

    n_layers: int      # blocks (of the encoder, for an encoder-decoder model)
    n_heads: int       # H
    d_model: int       # C
    d_head: int        # D of the first attention layer
    d_mlp: int         # the feed-forward width
    d_vocab: int       # input token ids are < d_vocab
    d_vocab_out: int   # V, the logits' last axis
    n_ctx: int         # the longest row the model reads


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
        self.cfg = Config(n_layers=blocks, n_heads=first["heads"], d_model=self.config["model"]["d_model"],
                          d_head=first["head_dim"], d_mlp=self.config["model"]["d_ff"], d_vocab=model.input_vocab,
                          d_vocab_out=model.num_classes, n_ctx=model.max_len)

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
                point = HookPoint(name)
                out.append((name, lambda a, fn=fn, point=point: fn(a, point)))
        return out

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

    def run_with_cache(self, x, names_filter=None, fwd_hooks=(), remove_batch_dim=False):
        """Run `x` and record activations: returns (logits, cache), logits (B, T, V).

        names_filter (TransformerLens's): None records every hook point; a name ("blocks.0.attn.
        hook_pattern", or a module's name), a glob ("*.hook_pattern") or a list of them; or a
        function name -> bool over the hook points. Only those points are hooked, so a pass that
        records the patterns only keeps them alone (and a pass that records no pattern does not
        compute them at all: qkv's fused attention never builds them unless asked).
        fwd_hooks: as run_with_hooks; the cache holds the values they leave (hooks added with
        add_hook run too). remove_batch_dim=True (one row only): the cache's arrays without their
        batch axis, e.g. hook_pattern (H, Tq, Tk); the logits keep theirs, as in TransformerLens.
        The arrays are views of qkv's buffers, not copies.
        """
        row = self.input_row(x)
        if remove_batch_dim and np.asarray(row["inputs"]).shape[0] != 1:
            raise ValueError(f"remove_batch_dim: expected one row, found {np.asarray(row['inputs']).shape[0]}")
        logits, arrays = self._m.run(row, self._names(names_filter), self._hooks(fwd_hooks))
        if remove_batch_dim:
            arrays = {k: v[0] for k, v in arrays.items()}
        return logits, ActivationCache(arrays, self)

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
