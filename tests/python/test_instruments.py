"""The instruments from Python give the qkv command's numbers, and a Python hook changes the model
exactly as the C++ instruments' hooks do."""
import csv
import io
import json
import math

import numpy as np
import pytest

import qkv

SENTENCE = "我爱吃苹果"


def rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def g9(x):
    """A number as the command's CSV writes it (%.9g)."""
    return f"{x:.9g}"


def test_heads_equals_qkv_heads_csv(grammar, grammar_ckpt, cli, workdir):
    out, similarity = workdir / "heads.csv", workdir / "similarity.csv"
    cli.run("heads", grammar_ckpt, "--examples", 32, "--csv", out, "--similarity", similarity)
    expected = rows(out.read_text())
    baseline = expected.pop()  # the best fixed offset of each relation
    got = qkv.heads(grammar, examples=32)
    header = out.read_text().splitlines()[0].split(",")
    assert header == ["layer", "layer_index", "head", "kind"] + got.score_names + ["label", "role_label"]
    assert "verb->object" in got.score_names and "verb->object@scored" in got.score_names  # the grammar's relations
    assert len(got) == len(expected) == 8
    for g, e in zip(got, expected):
        assert (g["layer"], str(g["layer_index"]), str(g["head"]), g["kind"], g["label"], g["role_label"]) == \
               (e["layer"], e["layer_index"], e["head"], e["kind"], e["label"], e["role_label"])
        for name in got.score_names:
            assert (g9(g[name]) if not math.isnan(g[name]) else "") == e[name], name
    assert baseline["layer"] == "baseline" and baseline["label"] == "best fixed offset"
    for relation, b in got.baselines.items():
        assert (g9(b["share"]) if not math.isnan(b["share"]) else "") == baseline[relation]
    assert got.array("entropy").shape == (2, 4) and got.array("entropy")[1, 2] == got[6]["entropy"]
    # Every pair of heads' Jensen-Shannon divergence, as --similarity.
    js = qkv.head_similarity(grammar, examples=32)
    assert [a.shape for a in js] == [(4, 4), (4, 4)]
    for e in rows(similarity.read_text()):
        assert g9(js[int(e["layer_index"])][int(e["head_a"]), int(e["head_b"])]) == e["js_bits"]


def test_ablate_equals_qkv_ablate(grammar, grammar_ckpt, cli, workdir):
    out = workdir / "ablate.csv"
    cli.run("ablate", grammar_ckpt, "--examples", 48, "--csv", out)
    expected = {(e["layer"], e["head"]): e for e in rows(out.read_text())}
    r = qkv.ablate(grammar, examples=48)
    assert r["examples"] == 48 and len(r["each"]) == len(expected) == 8
    for g in r["each"]:
        e = expected[(str(g["layer"]), str(g["head"]))]
        for key in ("loss", "token_accuracy", "loss_change", "accuracy_change"):
            assert g9(g[key]) == e[key], key
    # A set of heads, mean ablation.
    cli.run("ablate", grammar_ckpt, "--heads", "0.1,1.*", "--mode", "mean", "--csv", out)
    (e,) = rows(out.read_text())
    a = qkv.ablate(grammar, heads=[(0, 1), "1.*"], mode="mean")["ablated"]
    assert e["heads"] == "0.1,1.0,1.1,1.2,1.3" and a["heads"] == [(0, 1), (1, 0), (1, 1), (1, 2), (1, 3)]
    assert (g9(a["loss"]), g9(a["token_accuracy"])) == (e["loss"], e["token_accuracy"])
    # The pruning curve.
    cli.run("ablate", grammar_ckpt, "--prune", "--step", 3, "--examples", 16, "--csv", out)
    expected = rows(out.read_text())
    curve = qkv.ablate(grammar, prune=True, step=3, examples=16)["curve"]
    assert [g9(p["loss"]) for p in curve] == [e["loss"] for e in expected]
    assert [" ".join(f"{l}.{h}" for l, h in p["removed"]) for p in curve] == [e["heads"] for e in expected]
    # Scored on one gold relation's tokens only.
    cli.run("ablate", grammar_ckpt, "--heads", "1.2", "--relation", "verb-object", "--csv", out)
    (e,) = rows(out.read_text())
    a = qkv.ablate(grammar, heads="1.2", relation="verb->object")
    assert a["relation"] == "verb->object"
    assert (g9(a["ablated"]["loss"]), g9(a["ablated"]["token_accuracy"])) == (e["loss"], e["token_accuracy"])


def test_a_python_zero_ablation_hook_is_the_commands_ablation(grammar, grammar_ckpt, cli, workdir):
    """`qkv ablate --heads 0.1 --mode zero` (a C++ hook on hook_z) and a Python hook zeroing head 1
    of blocks.0.attn.hook_z give the same test loss and accuracy: the same bits."""
    out = workdir / "ablate_01.csv"
    cli.run("ablate", grammar_ckpt, "--heads", "0.1", "--mode", "zero", "--csv", out)
    (e,) = rows(out.read_text())

    def zero_head_1(z, hook):
        z = z.copy()
        z[:, 1] = 0
        return z

    m = grammar.evaluate(fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)])
    assert (g9(m["loss"]), g9(m["token_accuracy"])) == (e["loss"], e["token_accuracy"])
    # The same loss recomputed from the hooked logits in numpy (mean cross-entropy over the
    # scored positions).
    test = grammar.held_out("test")
    logits = grammar.run_with_hooks(test, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)]).astype(np.float64)
    y = test["targets"]
    scored = y != -100
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    loss = -np.take_along_axis(logp, np.where(scored, y, 0)[..., None], -1)[..., 0][scored].mean()
    assert loss == pytest.approx(m["loss"], rel=1e-5)


def test_explain_equals_qkv_explain_json_and_the_cache(grammar, grammar_ckpt, cli):
    r = cli.run("explain", grammar_ckpt, "--text", SENTENCE, "--layer", 1, "--head", 2, "--query", 3, "--json")
    expected = json.loads(r.stdout)
    got = qkv.explain(grammar, SENTENCE, layer=1, head=2, query=3)
    assert got == expected
    # Its q, values and weights are the cache's.
    _, cache = grammar.run_with_cache(SENTENCE)
    np.testing.assert_array_equal(np.float32(got["q"]), cache["blocks.1.attn.hook_q"][0, 2, 3])
    np.testing.assert_array_equal(np.float32([k["v"] for k in got["keys"]]), cache["blocks.1.attn.hook_v"][0, 2])
    np.testing.assert_array_equal(np.float32([k["model_weight"] for k in got["keys"]]),
                                  cache["blocks.1.attn.hook_pattern"][0, 2, 3])
    np.testing.assert_array_equal(np.float32(got["model_output"]), cache["blocks.1.attn.hook_z"][0, 2, 3])
    # A held-out example, as --example.
    r = cli.run("explain", grammar_ckpt, "--example", 2, "--layer", 0, "--head", 1, "--query", 0, "--json")
    assert qkv.explain(grammar, example=2, layer=0, head=1, query=0) == json.loads(r.stdout)


def test_fill_equals_qkv_fill(grammar, grammar_ckpt, cli):
    text = "我爱[MASK]苹[MASK]"
    r = cli.run("fill", grammar_ckpt, "--text", text, "--top-k", 4)
    lines = [l for l in r.stdout.splitlines() if l.strip().startswith("mask ")]
    got = qkv.fill(grammar, text, k=4)
    assert len(got) == len(lines) == 2
    for f, line in zip(got, lines):
        assert f"(position {f['position']})" in line
        assert line.split(":", 1)[1].split() == [x for label, _, p in f["top"] for x in (label, f"{p:.4f}")]
        assert grammar.vocab[f["top"][0][1]] == f["top"][0][0]


def test_generate_equals_qkv_generate(text_model, text_ckpt, cli):
    for seed, temperature, top_k in [(3, 1.0, 0), (5, 0.8, 5), (0, 0.0, 0)]:
        r = cli.run("generate", text_ckpt, "--prompt", "我爱", "--max-tokens", 24, "--seed", seed,
                    "--temperature", temperature, *(["--top-k", top_k] if top_k else []))
        new = qkv.generate(text_model, "我爱", max_tokens=24, seed=seed, temperature=temperature, top_k=top_k)
        assert r.stdout == "我爱" + new + "\n"
    ids = text_model.tokenize("我爱")
    r = cli.run("generate", text_ckpt, "--ids", "--prompt", " ".join(map(str, ids)), "--max-tokens", 10, "--seed", 9)
    new = qkv.generate(text_model, ids, max_tokens=10, seed=9)
    assert r.stdout.split()[len(ids):] == [str(i) for i in new]
    pieces = []
    assert qkv.generate(text_model, "我", max_tokens=8, seed=1, stream=pieces.append) == "".join(pieces)
    assert qkv.generate(text_model, "我", max_tokens=8, seed=1, cache=False) == "".join(pieces)


def test_the_decoder_cache_is_causal(text_model):
    _, cache = text_model.run_with_cache("我爱吃苹果", names_filter="*.hook_pattern")
    for w in cache.values():
        assert w.shape == (1, 4, 5, 5)
        assert not np.triu(w[0, 0], 1).any()  # query i attends keys j <= i only
