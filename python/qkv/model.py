"""A trained model in Python: its config and vocabulary, and forward passes with a cache of
activations and with hooks, named as qkv's hook points (TransformerLens's names)."""

import fnmatch
import json
import os
from collections.abc import Mapping

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
    """

    def __init__(self, model):
        self._m = model
        self.config_yaml = model.config_yaml
        self.config = _parse_config_yaml(self.config_yaml)
        self.hook_names = model.hook_names()
        self.module_names = model.module_names()
        self.attention_layers = model.attention_layers()
        self.vocab = model.labels(list(range(model.input_vocab)))

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
        """The labels of the tokens the model reads for `x` (one row): what the axes of its
        patterns are. For text, the row of input_row(x)."""
        row = self.input_row(x, mask_text)["inputs"]
        if row.shape[0] != 1:
            raise ValueError(f"to_tokens: expected one row, found {row.shape[0]}")
        return self._m.labels(row[0].tolist())

    to_str_tokens = to_tokens  # TransformerLens's name

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
                names.append(item)
        return list(dict.fromkeys(names))

    def _hooks(self, fwd_hooks):
        out = []
        for pair in fwd_hooks or ():
            try:
                where, fn = pair
            except (TypeError, ValueError):
                raise TypeError(f"fwd_hooks: expected (name, function) pairs, found {pair!r}") from None
            if not callable(fn):
                raise TypeError(f"fwd_hooks: the hook for {where!r} is not callable")
            names = self._names(where) if callable(where) or any(c in where for c in "*?[") else [where]
            for name in names:
                point = HookPoint(name)
                out.append((name, lambda a, fn=fn, point=point: fn(a, point)))
        return out

    def run_with_cache(self, x, names_filter=None, fwd_hooks=()):
        """Run `x` and record activations: returns (logits, cache), logits (B, T, V).

        names_filter (TransformerLens's): None records every hook point; a name ("blocks.0.attn.
        hook_pattern", or a module's name), a glob ("*.hook_pattern") or a list of them; or a
        function name -> bool over the hook points. Only those points are hooked, so a pass that
        records the patterns only keeps them alone (and a pass that records no pattern does not
        compute them at all: qkv's fused attention never builds them unless asked).
        fwd_hooks: as run_with_hooks; the cache holds the values they leave.
        The arrays are views of qkv's buffers, not copies.
        """
        logits, arrays = self._m.run(self.input_row(x), self._names(names_filter), self._hooks(fwd_hooks))
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
        afterwards.
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
