"""qkv.patch against a pure-numpy recomputation: the grammar encoder's forward pass written out in
numpy (float64) from the checkpoint's weights read with h5py, each head's z patched from the clean
run into the corrupted one, and the share of the logit difference it restores."""
import h5py
import numpy as np
import pytest

import qkv

CLEAN, CORRUPT = "我爱吃[MASK]果", "我爱看[MASK]果"


def weights(path):
    with h5py.File(path, "r") as f:
        out = {}
        f["model"].visititems(lambda name, d: out.__setitem__(name, d[()].astype(np.float64))
                              if isinstance(d, h5py.Dataset) else None)
        return out


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def encoder_logits(w, ids, layers, heads, pad, patch=None):
    """The pre-LN encoder with learned positions (configs/grammar_zh.yaml's), ids (1, T). patch:
    (layer, head, z) puts z (T, D) in place of that head's output."""
    T = ids.shape[1]
    h = w["tok_emb.weight"][ids[0]] + w["pos.weight"][:T]
    masked = ids[0] == pad
    for i in range(layers):
        p = f"blocks.{i}."
        x = layer_norm(h, w[p + "norm1.weight"], w[p + "norm1.bias"])
        split = lambda y: y.reshape(T, heads, -1).transpose(1, 0, 2)
        q, k, v = (split(x @ w[p + f"attn.w_{n}.weight"].T + w[p + f"attn.w_{n}.bias"]) for n in "qkv")
        s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        s[:, :, masked] = -np.inf
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        z = a @ v
        if patch is not None and patch[0] == i:
            z[patch[1]] = patch[2]
        yield i, z
        h = h + z.transpose(1, 0, 2).reshape(T, -1) @ w[p + "attn.w_o.weight"].T + w[p + "attn.w_o.bias"]
        x = layer_norm(h, w[p + "norm2.weight"], w[p + "norm2.bias"])
        h = h + gelu(x @ w[p + "ff.fc1.weight"].T + w[p + "ff.fc1.bias"]) @ w[p + "ff.fc2.weight"].T + w[p + "ff.fc2.bias"]
    h = layer_norm(h, w["norm.weight"], w["norm.bias"])
    yield "logits", h @ w["head.weight"].T + w["head.bias"]


def run(w, ids, m, patch=None):
    zs, logits = {}, None
    for key, value in encoder_logits(w, ids, len(m.attention_layers), 4, m.pad_token, patch):
        if key == "logits":
            logits = value
        else:
            zs[key] = value
    return logits, zs


def test_the_numpy_forward_is_qkvs(grammar, grammar_ckpt):
    w = weights(grammar_ckpt)
    ids = grammar.input_row(CLEAN)["inputs"]
    logits, _ = run(w, ids, grammar)
    np.testing.assert_allclose(grammar(CLEAN)[0], logits, atol=2e-4)


def test_patch_equals_a_numpy_recomputation(grammar, grammar_ckpt):
    m = grammar
    answer, wrong = "苹", "香"
    r = qkv.patch(m, CLEAN, CORRUPT, answer=answer, wrong=wrong)
    position = 3  # the mask
    assert r["position"] == position and r["layers"] == ["blocks.0.attn", "blocks.1.attn"]
    assert r["scores"].shape == (2, 4)

    w = weights(grammar_ckpt)
    a, b = m.tokenize(answer)[0], m.tokenize(wrong)[0]
    clean_ids, corrupt_ids = m.input_row(CLEAN)["inputs"], m.input_row(CORRUPT)["inputs"]
    diff = lambda logits: logits[position, a] - logits[position, b]
    clean_logits, clean_z = run(w, clean_ids, m)
    corrupt_logits, _ = run(w, corrupt_ids, m)
    c, k = diff(clean_logits), diff(corrupt_logits)
    assert r["clean"] == pytest.approx(c, abs=2e-4) and r["corrupt"] == pytest.approx(k, abs=2e-4)
    expected = np.zeros((2, 4))
    for layer in range(2):
        for head in range(4):
            patched, _ = run(w, corrupt_ids, m, patch=(layer, head, clean_z[layer][head]))
            expected[layer, head] = (diff(patched) - k) / (c - k)
    np.testing.assert_allclose(r["scores"], expected, atol=2e-3 / max(abs(c - k), 1e-3))
    # Patching every head of the last layer restores most of the difference there: a sanity check
    # that the numbers are not all zero.
    assert np.abs(expected).max() > 1e-3


def test_patch_with_a_metric_and_other_points(grammar):
    m = grammar
    metric = lambda logits: float(logits[0, 3].max())
    r = qkv.patch(m, CLEAN, CORRUPT, metric=metric, point="hook_v")
    assert r["scores"].shape == (2, 4) and np.isfinite(r["scores"]).all()
    with pytest.raises(ValueError, match="same length"):
        qkv.patch(m, CLEAN, "猫喜欢追[MASK]老鼠", answer="苹", wrong="香")
    with pytest.raises(ValueError, match="did you mean 'hook_z'"):
        qkv.patch(m, CLEAN, CORRUPT, answer="苹", wrong="香", point="hook_zz")


def test_patch_equals_the_qkv_patch_command(grammar, grammar_ckpt, cli):
    """qkv.patch (Python over run_with_hooks) and `qkv patch` (the library's interp/patching) agree."""
    import json
    r = qkv.patch(grammar, CLEAN, CORRUPT, answer="苹", wrong="香")
    out = json.loads(cli.run("patch", grammar_ckpt, "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", "苹",
                             "--wrong", "香", "--json", "--threads", "1").stdout)
    assert out["position"] == r["position"]
    assert out["clean"] == pytest.approx(r["clean"], abs=1e-4)
    assert out["corrupt"] == pytest.approx(r["corrupt"], abs=1e-4)
    assert [layer["name"] for layer in out["layers"]] == r["layers"]
    command = np.array([[h["restored"] for h in layer["heads"]] for layer in out["layers"]])
    np.testing.assert_allclose(r["scores"], command, atol=1e-3 / max(abs(r["clean"] - r["corrupt"]), 1e-3))
