"""The instruments as functions: each is one library call, the same the qkv command and the studio
make (`qkv heads`, `qkv ablate`, `qkv swap`, `qkv eval`, `qkv explain`, `qkv fill`, `qkv generate`,
`qkv patch`, `qkv attribute`, `qkv path`, `qkv lens`, the studio's analysis), read back from the library's JSON: the same numbers, bit for
bit, whichever front end asks."""

import base64
import json
from collections.abc import Mapping

import numpy as np

from . import _qkv
from .model import MASK_TEXT


class HeadTable(list):
    """The rows of `qkv heads --csv`, one dict per head in model order (keys: layer, layer_index,
    head, kind, every name of `score_names`, label, role_label), with

      score_names  the score columns: entropy, max_weight, previous_token, first_token, self,
                   induction, retrieval, then the task's gold relations ("verb->subject", ...),
                   offset, offset_share, and per relation R: R@scored, R@off_offset, R@validation
      baselines    {relation: {"offset", "share", "count"}}: each relation's best fixed offset
                   over every test token (the CSV's baseline row; empty for tasks without relations)
      offsets      {relation: {"offset", "validation_share", "share", "count", "off_offset_count"}}:
                   the offset chosen at the scored tokens of the validation rows, its share there
                   and at the scored test tokens (what a role label must beat)
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


def _nan(x):
    """JSON's null for a score that does not apply, as NaN."""
    return float("nan") if x is None else x


def _input(model, x=None, mask_text=MASK_TEXT, example=None, split="validation"):
    """The library's input request for x: text, token ids (a list, a 1-D array or one row of a 2-D
    one), a batch dict of one row, or held-out example `example` of `split`."""
    if example is not None:
        if x is not None:
            raise ValueError("give either x (text or token ids) or example, not both")
        return {"example": int(example), "split": split}
    if isinstance(x, str):
        return {"text": x, "mask_text": mask_text}
    if isinstance(x, Mapping):
        return {"row": dict(x)}
    a = np.asarray(x)
    if a.ndim == 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"expected text, token ids (a list or a 1-D integer array) or a batch dict, found {type(x).__name__}"
                        + (f" of shape {a.shape}" if a.ndim else ""))
    return {"ids": [int(i) for i in a]}


def heads(model, examples=64):
    """Scores and a label for every head, over the first `examples` held-out (test) examples, as
    `qkv heads --csv`: a HeadTable (a list of one dict per head; NaN where a score does not apply,
    label "" when none). docs/instruments.md defines the scores; table.array("induction") gives one
    as a (layers, heads) array."""
    model._no_added_hooks("qkv.heads")
    r = json.loads(_qkv.heads(model._m, int(examples), False))
    table = HeadTable({**h, **{n: _nan(h[n]) for n in r["score_names"]}} for h in r["heads"])
    table.score_names = r["score_names"]
    table.baselines = {k: {**v, "share": _nan(v["share"])} for k, v in r["baselines"].items()}
    table.offsets = {k: {**v, "share": _nan(v["share"]), "validation_share": _nan(v["validation_share"])}
                     for k, v in r["offsets"].items()}
    return table


def head_similarity(model, examples=64):
    """How alike the heads of each layer attend, as `qkv heads --similarity`: per attention layer
    an (H, H) array of the mean Jensen-Shannon divergence in bits between two heads' weight rows on
    the same queries (0: the same; 1: disjoint), over the first `examples` test examples."""
    model._no_added_hooks("qkv.head_similarity")
    r = json.loads(_qkv.heads(model._m, int(examples), True))
    return [np.array(m, dtype=np.float64) for m in r["similarity"]]


def _heads_text(heads):
    if isinstance(heads, str):
        return heads
    items = []
    for h in heads:
        items.append(h if isinstance(h, str) else f"{int(h[0])}.{int(h[1])}")
    return ",".join(items)


def _pairs(value):
    """JSON's [[layer, head], ...] as (layer, head) tuples."""
    return [tuple(h) for h in value]


def ablate(model, heads=None, mode="zero", examples=0, prune=False, step=1, relation=None):
    """Held-out (test) metrics with heads removed, as `qkv ablate`: their output hook_z replaced
    by zero (mode "zero") or by its mean over the validation set ("mean").

    heads: "0.1,1.*" (as --heads), or a list of "L.H" strings or (layer, head) pairs: those heads
    removed together; None: each head removed alone; prune=True: the pruning curve of Michel et
    al. (2019), `step` heads at a time. examples: the first N test examples (0: all). relation:
    score only the tokens that have this gold relation ("verb->object", also "verb-object";
    grammar models), as --relation.
    Returns {"mode", "relation", "examples", "intact": metrics} and "ablated" (heads given: the
    metrics with loss_change, accuracy_change and "heads"), "each" (a list in model order, each with
    layer, head; `qkv ablate` prints it sorted by loss) or "curve" (points with removed, fraction).
    Metrics: loss, token_accuracy, sequence_accuracy.
    """
    model._no_added_hooks("qkv.ablate")
    r = json.loads(_qkv.ablate(model._m, None if heads is None else _heads_text(heads), mode, int(examples), bool(prune),
                               int(step), relation or ""))
    if "ablated" in r:
        r["ablated"]["heads"] = _pairs(r["ablated"]["heads"])
    for p in r.get("curve", []):
        p["removed"] = _pairs(p["removed"])
    return r


def swap(model, examples=0, seed=0):
    """The value-swap probe of a recall model, as `qkv swap`: {"examples", "queries", "intact",
    "follow", "stay"} (docs/instruments.md)."""
    model._no_added_hooks("qkv.swap")
    return json.loads(_qkv.swap(model._m, int(examples), int(seed)))


def evaluate(model, train=False):
    """Held-out metrics of every split, as `qkv eval` (train=True adds the start of the training
    stream, as --train): {"splits": [{"split", "examples", "loss", "token_accuracy",
    "sequence_accuracy"}]}. Model.evaluate runs one batch with hooks."""
    model._no_added_hooks("qkv.evaluate")
    return json.loads(_qkv.evaluate(model._m, bool(train)))


def explain(model, x=None, layer=0, head=0, query=0, example=None, mask_text=MASK_TEXT):
    """One query of one head, step by step, as `qkv explain --json`: the dict of its JSON (q, the
    keys with raw and scaled scores, mask, recomputed and model weights and values, the output and
    the self-check errors). The input is `x` (text, token ids or a row) or held-out example
    `example` of the validation split (as --example; the default when x is None). layer=None (or
    head=None): every head (of every layer, or of `layer`), a list of such dicts."""
    model._no_added_hooks("qkv.explain")
    if x is None and example is None:
        example = 0
    r = _qkv.explain(model._m, _input(model, x, mask_text, example), None if layer is None else int(layer),
                     None if head is None else int(head), int(query))
    return json.loads(r)


def fill(model, text, k=5, mask_text=MASK_TEXT):
    """The `k` most likely tokens at every mask of `text` (a masked language model), as `qkv fill`:
    a list (one item per mask, in order) of {"position": t, "top": [(label, id, probability)]}."""
    model._no_added_hooks("qkv.fill")
    r = json.loads(_qkv.fill(model._m, _input(model, text, mask_text), int(k)))
    return [{"position": f["position"], "top": [(model.vocab[c["id"]], c["id"], c["p"]) for c in f["top"]]}
            for f in r["fills"]]


def generate(model, prompt, max_tokens=200, temperature=1.0, top_k=0, top_p=1.0, seed=0, cache=True, stream=None):
    """Continue `prompt` with a decoder-only model, as `qkv generate` (the same seed gives the same
    text): text in, new text out; token ids in (a list of ints), new ids out. temperature 0 is
    greedy; top_k 0 keeps every token. stream(piece) is called with each new token's text (ids
    for an id prompt) as it is chosen."""
    model._no_added_hooks("qkv.generate")
    ids_in = not isinstance(prompt, str)
    on_token = None
    if stream is not None:
        on_token = stream if ids_in else (lambda t: stream(model.decode([t])))
    r = json.loads(_qkv.generate(model._m, _input(model, prompt, ""), int(max_tokens), float(temperature), int(top_k),
                                 float(top_p), int(seed), bool(cache), on_token))
    return r["tokens"] if ids_in else r["text"]


def patch(model, clean, corrupt, answer=None, wrong=None, metric=None, position=None, point="hook_z"):
    """Activation patching per head (TransformerLens's definition), as `qkv patch`: for every layer
    L and head h, run `corrupt` with head h of L's `point` (hook_z: the head's output) replaced by
    its value in the `clean` run, and report the share of the metric the patch restores,

        score[L, h] = (metric(patched) - metric(corrupt)) / (metric(clean) - metric(corrupt))

    1: the head alone carries the difference; 0: it carries none of it. The metric is the logit
    difference logits[0, position, answer] - logits[0, position, wrong], or `metric(logits) ->
    float` given instead (logits (1, T, V), read-only). Defaults, one rule for every front end:
    position the first mask of the clean row, else of the corrupted row, else the last position;
    answer (wrong) the clean (corrupted) run's most likely token there. answer and wrong: a token
    label or an id. clean and corrupt: text, token ids or rows of the same length. point: "hook_z"
    (default), "hook_q", "hook_k", "hook_v" or "hook_pattern".

    Returns {"scores": (layers, heads) array (NaN where a layer has fewer heads), "clean",
    "corrupt": the metric of both runs, "layers", "position", "answer", "wrong", "point",
    "result": the library's whole answer (every head's metric and probabilities)}.
    """
    model._no_added_hooks("qkv.patch")
    ids = [isinstance(t, (int, np.integer)) for t in (answer, wrong) if t is not None]
    if ids and not all(ids) and any(ids):
        raise ValueError("answer, wrong: give both as token ids (ints) or both as tokens (str)")
    r = json.loads(_qkv.patch(model._m, _input(model, clean), _input(model, corrupt),
                              None if position is None else int(position),
                              None if answer is None else str(answer), None if wrong is None else str(wrong),
                              bool(ids and all(ids)), point, metric))
    if r["clean"] == r["corrupt"]:
        raise ValueError(f"patch: the clean and corrupted runs give the same metric ({r['clean']:g}): nothing to restore")
    layers = [layer["name"] for layer in r["layers"]]
    width = max(len(layer["heads"]) for layer in r["layers"])
    scores = np.full((len(layers), width), np.nan)
    for li, layer in enumerate(r["layers"]):
        for h, p in enumerate(layer["heads"]):
            scores[li, h] = _nan(p["restored"])
    return {"scores": scores, "clean": r["clean"], "corrupt": r["corrupt"], "layers": layers, "position": r["position"],
            "answer": r["answer"], "wrong": r["wrong"], "point": r["point"], "result": r}


def _two_runs(model, answer, wrong):
    ids = [isinstance(t, (int, np.integer)) for t in (answer, wrong) if t is not None]
    if ids and not all(ids) and any(ids):
        raise ValueError("answer, wrong: give both as token ids (ints) or both as tokens (str)")
    return (None if answer is None else str(answer), None if wrong is None else str(wrong), bool(ids and all(ids)))


def attribute(model, clean, corrupt, method="eap-ig", steps=5, answer=None, wrong=None, position=None, metric=None,
              noise=False):
    """Attribution patching, EAP or EAP-IG (method "attribution", "eap", "eap-ig"), as `qkv
    attribute`: activation patching estimated from gradients on qkv's tape (docs/instruments.md
    has the formulas). Scores are shares of metric(clean) - metric(corrupt), the units of
    qkv.patch's. The metric is the logit difference (answer, wrong, position: qkv.patch's defaults),
    or a qkv.Metric / a function of the logits (1, T, V) given instead (its gradient by central
    differences when it has none). steps: EAP-IG's interpolation steps (default 5). noise=True:
    the noising direction (gradients at the clean run).

    Returns {"heads": (layers, heads) array, "head_positions": (layers, heads, T) array, "edges":
    [(from, to, score)], "clean", "corrupt": the metric of both runs, "tokens", "position",
    "answer", "wrong", "forward_passes", "backward_passes", "result": the library's JSON}."""
    model._no_added_hooks("qkv.attribute")
    a, w, ids = _two_runs(model, answer, wrong)
    fn = grad = None
    if metric is not None:
        from .metrics import as_metric
        m = as_metric(metric, "metric")
        fn, grad = m.fn, m.grad
    r = json.loads(_qkv.attribute(model._m, _input(model, clean), _input(model, corrupt),
                                  None if position is None else int(position), a, w, ids, str(method), int(steps),
                                  bool(noise), fn, grad))
    H = max(len(h) for h in r["heads"])
    heads = np.full((len(r["heads"]), H), np.nan)
    per_t = np.full((len(r["heads"]), H, len(r["tokens"])), np.nan)
    for li, layer in enumerate(r["heads"]):
        heads[li, :len(layer)] = layer
        for h, ts in enumerate(r["head_positions"][li]):
            per_t[li, h] = ts
    return {"heads": heads, "head_positions": per_t, "edges": [(e["from"], e["to"], e["score"]) for e in r["edges"]],
            "clean": r["clean"], "corrupt": r["corrupt"], "tokens": r["tokens"], "position": r["position"],
            "answer": r["answer"], "wrong": r["wrong"], "forward_passes": r["forward_passes"],
            "backward_passes": r["backward_passes"], "result": r}


def path_patch(model, clean, corrupt, sender, receivers=None, answer=None, wrong=None, position=None):
    """Path patching (Wang et al. 2022), as `qkv path`: the share of metric(clean) -
    metric(corrupt) head `sender` ((layer, head) or "L.H") carries to each receiver by the
    residual stream alone. receivers: "L.H<q>" / "L.H.k" / "logits" strings or (layer, head, "q")
    tuples; default every later head's q, k and v inputs and the logits.

    Returns {"restored": {receiver name: share}, "together": the head receivers at once, "clean",
    "corrupt", "position", "answer", "wrong", "forward_passes", "result": the library's JSON}."""
    model._no_added_hooks("qkv.path_patch")
    a, w, ids = _two_runs(model, answer, wrong)
    if isinstance(sender, str):
        parts = sender.split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"sender: expected 'LAYER.HEAD' or (layer, head), found {sender!r}")
        sender = tuple(map(int, parts))
    names = []
    for rec in receivers or ():
        names.append(rec if isinstance(rec, str) else f"{int(rec[0])}.{int(rec[1])}<{rec[2]}>")
    r = json.loads(_qkv.path_patch(model._m, _input(model, clean), _input(model, corrupt),
                                   None if position is None else int(position), a, w, ids,
                                   (int(sender[0]), int(sender[1])), names))
    return {"restored": {x["name"]: x["restored"] for x in r["receivers"]}, "together": r["restored_all"],
            "clean": r["clean"], "corrupt": r["corrupt"], "position": r["position"], "answer": r["answer"],
            "wrong": r["wrong"], "forward_passes": r["forward_passes"], "result": r}


def logit_lens(model, x=None, position=None, answer=None, wrong=None, top_k=3, example=None, mask_text=MASK_TEXT):
    """The logit lens and direct logit attribution, as `qkv lens`: the residual stream after each
    stage ("embed", "blocks.0", ...) read by the final norm and the output layer, and each write's
    share of logit(answer) - logit(wrong) at `position` (defaults: the first mask, else the last
    position; the most likely and second most likely token).

    Returns {"stages", "tokens", "top": [[[(token, p)] per position] per stage], "stage_diff":
    array per stage, "dla": {write: contribution} (empty for a post-LN model), "heads": (layers,
    heads) array of the heads' contributions, "logit_diff", "position", "answer", "wrong",
    "result": the library's JSON}."""
    model._no_added_hooks("qkv.logit_lens")
    a, w, ids = _two_runs(model, answer, wrong)
    if x is None and example is None:
        example = 0
    r = json.loads(_qkv.logit_lens(model._m, _input(model, x, mask_text, example),
                                   None if position is None else int(position), a, w, ids, int(top_k)))
    heads = np.array([[float(v) for v in layer] for layer in r["heads"]]) if r["heads"] else np.zeros((0, 0))
    return {"stages": r["stages"], "tokens": r["tokens"],
            "top": [[[(c["token"], c["p"]) for c in pos] for pos in stage] for stage in r["top"]],
            "stage_diff": np.array(r["stage_diff"]), "dla": {c["name"]: c["value"] for c in r["contributions"]},
            "heads": heads, "logit_diff": r["logit_diff"], "position": r["position"], "answer": r["answer"],
            "wrong": r["wrong"], "result": r}


def analyze(model, x=None, ablate=(), mode="zero", top_k=5, example=None, mask_text=MASK_TEXT):
    """Where every head looks on one input and what the model answers there, with `ablate` heads
    ((layer, head) pairs) removed: the studio's analysis (what its grid draws). Returns its JSON as
    a dict, each layer's "weights" an (H, Tq, Tk) float32 array (exactly the model's)."""
    model._no_added_hooks("qkv.analyze")
    if x is None and example is None:
        example = 0
    pairs = [(int(h[0]), int(h[1])) if not isinstance(h, str) else tuple(map(int, h.split("."))) for h in ablate]
    r = json.loads(_qkv.analyze(model._m, _input(model, x, mask_text, example), pairs, mode, int(top_k)))
    for layer in r["layers"]:
        q, k = len(layer["query_tokens"]), len(layer["key_tokens"])
        layer["weights"] = np.stack([np.frombuffer(base64.b64decode(w), dtype="<f4").reshape(q, k) for w in layer["weights"]])
    return r
