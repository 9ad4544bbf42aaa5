"""The instruments as functions: the numbers of `qkv heads`, `qkv ablate`, `qkv explain --json`,
`qkv fill` and `qkv generate` as plain data, and activation patching over run_with_hooks."""

import json

import numpy as np

from . import _qkv
from .model import MASK_TEXT


class HeadTable(list):
    """The rows of `qkv heads --csv`, one dict per head in model order (keys: layer, layer_index,
    head, kind, every name of `score_names`, label), with

      score_names  the score columns: entropy, max_weight, previous_token, first_token, self,
                   induction, retrieval, then the task's gold relations ("verb->subject", ...)
      baselines    {relation: {"offset", "share", "count"}}: each relation's best fixed offset
                   (the CSV's baseline row; empty for tasks without relations)
    """

    def array(self, name):
        """Score `name` as an (attention layers, heads) array (NaN where it does not apply or a
        layer has fewer heads)."""
        layers = 1 + max(r["layer_index"] for r in self)
        heads = 1 + max(r["head"] for r in self)
        out = np.full((layers, heads), np.nan)
        for r in self:
            out[r["layer_index"], r["head"]] = r[name]
        return out


def heads(model, examples=64):
    """Scores and a label for every head, over the first `examples` held-out (test) examples, as
    `qkv heads --csv`: a HeadTable (a list of one dict per head; NaN where a score does not apply,
    label "" when none). docs/instruments.md defines the scores; table.array("induction") gives one
    as a (layers, heads) array."""
    model._no_added_hooks("qkv.heads")
    r = _qkv.heads(model._m, int(examples))
    table = HeadTable(r["heads"])
    table.score_names, table.baselines = r["score_names"], r["baselines"]
    return table


def head_similarity(model, examples=64):
    """How alike the heads of each layer attend, as `qkv heads --similarity`: per attention layer
    an (H, H) array of the mean Jensen-Shannon divergence in bits between two heads' weight rows on
    the same queries (0: the same; 1: disjoint), over the first `examples` test examples."""
    model._no_added_hooks("qkv.head_similarity")
    return _qkv.head_divergence(model._m, int(examples))


def _heads_text(heads):
    if heads is None:
        return ""
    if isinstance(heads, str):
        return heads
    items = []
    for h in heads:
        items.append(h if isinstance(h, str) else f"{int(h[0])}.{int(h[1])}")
    return ",".join(items)


def ablate(model, heads=None, mode="zero", examples=0, prune=False, step=1, relation=None):
    """Held-out (test) metrics with heads removed, as `qkv ablate`: their output hook_z replaced
    by zero (mode "zero") or by its mean over the validation set ("mean").

    heads: "0.1,1.*" (as --heads), or a list of "L.H" strings or (layer, head) pairs: those heads
    removed together; None: each head removed alone; prune=True: the pruning curve of Michel et
    al. (2019), `step` heads at a time. examples: the first N test examples (0: all). relation:
    score only the tokens that have this gold relation ("verb->object", also "verb-object";
    grammar models), as --relation.
    Returns {"mode", "examples", "intact": metrics} and "ablated" (heads given: the metrics with
    loss_change, accuracy_change and "heads"), "each" (a list in model order, each with layer,
    head; `qkv ablate` prints it sorted by loss) or "curve" (points with removed, fraction).
    Metrics: loss, token_accuracy, sequence_accuracy.
    """
    model._no_added_hooks("qkv.ablate")
    text = _heads_text(heads)
    return _qkv.ablate(model._m, text, heads is not None, mode, int(examples), bool(prune), int(step), relation or "")


def explain(model, x=None, layer=0, head=0, query=0, example=None, mask_text=MASK_TEXT):
    """One query of one head, step by step, as `qkv explain --json`: the dict of its JSON (q, the
    keys with raw and scaled scores, mask, recomputed and model weights and values, the output and
    the self-check errors). The input is `x` (text or token ids, one row) or held-out example
    `example` of the validation split (as --example; the default when x is None)."""
    model._no_added_hooks("qkv.explain")
    if x is None:
        row = model.held_out("validation", None if example is None else int(example) + 1)
        n = len(row["inputs"])
        i = 0 if example is None else int(example)
        if i >= n:
            raise ValueError(f"example {i}: the held-out set has {n} examples (0..{n - 1})")
        row = {k: v[i:i + 1] for k, v in row.items()}
    elif example is not None:
        raise ValueError("explain: give either x (text or token ids) or example, not both")
    else:
        row = model.input_row(x, mask_text)
    return json.loads(_qkv.explain(model._m, row, int(layer), int(head), int(query)))


def fill(model, text, k=5, mask_text=MASK_TEXT):
    """The `k` most likely tokens at every mask of `text` (a masked language model), as `qkv fill`:
    a list (one item per mask, in order) of {"position": t, "top": [(label, id, probability)]}."""
    model._no_added_hooks("qkv.fill")
    return _qkv.fill(model._m, text, mask_text, int(k))


def generate(model, prompt, max_tokens=200, temperature=1.0, top_k=0, top_p=1.0, seed=0, cache=True, stream=None):
    """Continue `prompt` with a decoder-only model, as `qkv generate` (the same seed gives the same
    text): text in, new text out; token ids in (a list of ints), new ids out. temperature 0 is
    greedy; top_k 0 keeps every token. stream(piece) is called with each new token's text (ids
    for an id prompt) as it is chosen."""
    model._no_added_hooks("qkv.generate")
    ids_in = not isinstance(prompt, str)
    ids = [int(i) for i in prompt] if ids_in else model._m.encode(prompt, "")
    on_token = None
    if stream is not None:
        on_token = stream if ids_in else (lambda t: stream(model.decode([t])))
    new = _qkv.generate(model._m, ids, int(max_tokens), float(temperature), int(top_k), float(top_p), int(seed),
                        bool(cache), on_token)
    return new if ids_in else model.decode(new)


def _token_id(model, token):
    if isinstance(token, (int, np.integer)):
        return int(token)
    ids = model.tokenize(token)
    if len(ids) != 1:
        raise ValueError(f"{token!r} is {len(ids)} tokens; give one token (a label or an id)")
    return ids[0]


def patch(model, clean, corrupt, answer=None, wrong=None, metric=None, position=None, point="hook_z"):
    """Activation patching per head (TransformerLens's definition): for every layer L and head h,
    run `corrupt` with head h of L's `point` (hook_z: the head's output) replaced by its value in
    the `clean` run, and report the share of the metric the patch restores,

        score[L, h] = (metric(patched) - metric(corrupt)) / (metric(clean) - metric(corrupt))

    1: the head alone carries the difference; 0: it carries none of it. The metric is the logit
    difference logits[0, position, answer] - logits[0, position, wrong] (answer and wrong: a token
    label or id; position: default the first mask of the corrupted row in a masked model, else its
    last position), or `metric(logits) -> float` given instead. clean and corrupt must be rows of
    the same length. point: "hook_z" (default), "hook_q", "hook_k", "hook_v" or "hook_pattern"
    (any point with the head on axis 1).

    Returns {"scores": (layers, heads) array (NaN where a layer has fewer heads), "clean",
    "corrupt": the metric of both runs, "layers": the layer names, "position", "point"}.
    """
    if point not in ("hook_z", "hook_q", "hook_k", "hook_v", "hook_pattern"):
        raise ValueError(f"point: expected one of hook_z, hook_q, hook_k, hook_v, hook_pattern, found {point!r}"
                         f"{_qkv.did_you_mean(str(point), ['hook_z', 'hook_q', 'hook_k', 'hook_v', 'hook_pattern'])}")
    clean_row, corrupt_row = model.input_row(clean), model.input_row(corrupt)
    a, b = np.asarray(clean_row["inputs"]), np.asarray(corrupt_row["inputs"])
    if a.shape != b.shape:
        raise ValueError(f"patch: the clean row has shape {a.shape} ({model.to_str_tokens(clean_row)}), the corrupted "
                         f"{b.shape} ({model.to_str_tokens(corrupt_row)}): patching needs rows of the same length")
    if metric is None:
        if answer is None or wrong is None:
            raise ValueError("patch: give answer and wrong (the logit difference), or metric(logits) -> float")
        if position is None:
            masks = np.flatnonzero(b[0] == model.mask_token) if model.mask_token >= 0 else []
            position = int(masks[0]) if len(masks) else b.shape[1] - 1
        ans, wro, pos = _token_id(model, answer), _token_id(model, wrong), int(position)
        if not 0 <= pos < b.shape[1]:
            raise ValueError(f"position {pos}: the row has {b.shape[1]} positions (0..{b.shape[1] - 1})")

        def metric(logits):
            return float(logits[0, pos, ans]) - float(logits[0, pos, wro])

    layers = [layer["name"] for layer in model.attention_layers]
    names = [f"{name}.{point}" for name in layers]
    clean_logits, cache = model.run_with_cache(clean_row, names_filter=names)
    clean_value = float(metric(clean_logits))
    corrupt_value = float(metric(model(corrupt_row)))
    if clean_value == corrupt_value:
        raise ValueError(f"patch: the clean and corrupted runs give the same metric ({clean_value:g}): nothing to restore")
    heads = [layer["heads"] for layer in model.attention_layers]
    scores = np.full((len(layers), max(heads)), np.nan)
    for li, name in enumerate(names):
        clean_act = cache[name]
        for h in range(heads[li]):
            def put_back(act, hook, h=h, clean_act=clean_act):
                act = act.copy()
                act[:, h] = clean_act[:, h]
                return act
            patched = float(metric(model.run_with_hooks(corrupt_row, fwd_hooks=[(name, put_back)])))
            scores[li, h] = (patched - corrupt_value) / (clean_value - corrupt_value)
    return {"scores": scores, "clean": clean_value, "corrupt": corrupt_value, "layers": layers,
            "position": position, "point": point}
