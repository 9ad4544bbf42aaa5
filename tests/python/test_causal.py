"""The causal instruments from Python: gradients at hook points against finite differences,
the TransformerLens layout, read-only caches, the weights in TransformerLens's shapes against the
cached activations, and path patching against a numpy reimplementation from the weights."""
import math

import numpy as np
import pytest

import qkv

CLEAN, CORRUPT = "我爱[MASK]苹果", "我爱[MASK]牛奶"


def test_gradients_at_a_hook_point_are_the_metrics_finite_differences(grammar):
    m = grammar
    row = m.input_row(CLEAN)
    p = 2  # the mask
    answer, wrong = m.tokenize("吃")[0], m.tokenize("喝")[0]
    metric = qkv.logit_diff(p, answer, wrong)
    logits, cache = m.run_with_cache(row, names_filter=["blocks.0.attn.hook_z", "blocks.1.hook_resid_pre"],
                                     incl_bwd=True, metric=metric)
    assert list(cache) == ["blocks.0.attn.hook_z", "blocks.1.hook_resid_pre", "blocks.0.attn.hook_z_grad",
                           "blocks.1.hook_resid_pre_grad"]
    np.testing.assert_array_equal(logits, m(row))
    for name, index in (("blocks.0.attn.hook_z", (0, 1, 2, 3)), ("blocks.0.attn.hook_z", (0, 3, 0, 5)),
                        ("blocks.1.hook_resid_pre", (0, 2, 7))):
        g = cache[name + "_grad"]
        assert g.shape == cache[name].shape

        def moved(h, name=name, index=index):
            def hook(a, _):
                a = a.copy()
                a[index] += h
                return a
            return metric(m.run_with_hooks(row, fwd_hooks=[(name, hook)]))

        eps = 1e-2
        fd = (moved(eps) - moved(-eps)) / (2 * eps)
        assert g[index] == pytest.approx(fd, rel=2e-2, abs=2e-3), name
    assert np.abs(cache["blocks.0.attn.hook_z_grad"]).max() > 1e-3  # the checks above are not all of zeros


def test_a_python_metric_gets_the_same_gradients_and_loss_is_the_models_loss(grammar):
    m = grammar
    row = m.held_out("test", 1)
    loss = qkv.loss(row["targets"])
    assert loss(m(row)) == pytest.approx(m.evaluate(row)["loss"], rel=1e-5)
    _, exact = m.run_with_cache(row, names_filter="blocks.1.attn.hook_z", incl_bwd=True, metric=loss)
    _, numeric = m.run_with_cache(row, names_filter="blocks.1.attn.hook_z", incl_bwd=True, metric=loss.fn)
    g = exact["blocks.1.attn.hook_z_grad"]
    np.testing.assert_allclose(numeric["blocks.1.attn.hook_z_grad"], g, atol=2e-3 * np.abs(g).max())
    seen = []
    m.run_with_cache(row, names_filter="blocks.1.attn.hook_z", incl_bwd=True, metric=loss,
                     bwd_hooks=[("blocks.1.attn.hook_z", lambda grad, hook: seen.append((hook.name, grad.copy())))])
    assert seen[0][0] == "blocks.1.attn.hook_z"
    np.testing.assert_array_equal(seen[0][1], g)
    with pytest.raises(ValueError, match="backward hooks observe"):
        m.run_with_cache(row, names_filter="blocks.1.attn.hook_z", incl_bwd=True, metric=loss,
                         bwd_hooks=[("blocks.1.attn.hook_z", lambda grad, hook: grad * 0)])
    with pytest.raises(ValueError, match="needs a metric"):
        m.run_with_cache(row, incl_bwd=True)
    with pytest.raises(ValueError, match="a module"):
        m.run_with_cache(row, names_filter="blocks.0", incl_bwd=True, metric=loss)
    with pytest.raises(ValueError, match="metric: not finite"):
        m.run_with_cache(row, names_filter="blocks.1.attn.hook_z", incl_bwd=True, metric=lambda z: float("nan"))
    with pytest.raises(ValueError, match="need incl_bwd=True"):
        m.run_with_cache(row, metric=loss)
    with pytest.raises(ValueError, match=r"metric: expected one number, found an array of shape \(1, "):
        m.run_with_cache(row, names_filter="blocks.1.attn.hook_z", incl_bwd=True, metric=lambda z: z[:, 0])


def test_a_hook_that_makes_nan_is_refused_naming_it(grammar):
    def nan(a, hook):
        a = a.copy()
        a[0, 0, 0, 0] = np.nan
        return a
    with pytest.raises(ValueError, match=r"hook 'blocks.0.attn.hook_z' returned 1 of \d+ values that are NaN or infinite"):
        grammar.run_with_hooks(CLEAN, fwd_hooks=[("blocks.0.attn.hook_z", nan)])

    def mask(s, hook):  # -inf on a score masks the key: allowed there
        s = s.copy()
        s[..., 0] = -np.inf
        return s
    _, c = grammar.run_with_cache(CLEAN, names_filter="blocks.0.attn.hook_pattern",
                                  fwd_hooks=[("blocks.0.attn.hook_attn_scores", mask)])
    assert not c["blocks.0.attn.hook_pattern"][..., 0].any()


def test_caches_are_read_only_and_the_logits_share_nothing(grammar):
    logits, cache = grammar.run_with_cache(CLEAN, names_filter=["blocks.0.attn.hook_z", "head"])
    with pytest.raises(ValueError, match="read-only"):
        cache["blocks.0.attn.hook_z"][0, 0, 0, 0] = 1
    assert not np.shares_memory(logits, cache["head"])
    np.testing.assert_array_equal(logits, cache["head"])
    logits[...] = 0  # the caller's to change
    assert cache["head"].any()


def test_the_transformer_lens_layout_is_a_view_both_ways(grammar):
    m = grammar
    _, ours = m.run_with_cache(CLEAN)
    m.layout = "transformer_lens"
    try:
        _, theirs = m.run_with_cache(CLEAN)
        for name in ours:
            if name.endswith(("hook_q", "hook_k", "hook_v", "hook_z", "hook_head_result", "_input")):
                assert theirs[name].shape == ours[name].transpose(0, 2, 1, 3).shape
                np.testing.assert_array_equal(theirs[name], ours[name].transpose(0, 2, 1, 3))
            else:
                assert theirs[name].shape == ours[name].shape
        # A ported TransformerLens hook, z[:, :, head] = 0, zeroes the head, not a position.

        def zero_tl(z, hook):
            z = z.copy()
            z[:, :, 1] = 0
            return z
        tl = m.run_with_hooks(CLEAN, fwd_hooks=[("blocks.0.attn.hook_z", zero_tl)])
    finally:
        m.layout = "qkv"

    def zero_qkv(z, hook):
        z = z.copy()
        z[:, 1] = 0
        return z
    np.testing.assert_array_equal(tl, m.run_with_hooks(CLEAN, fwd_hooks=[("blocks.0.attn.hook_z", zero_qkv)]))
    with pytest.raises(ValueError, match="layout: expected one of"):
        m.layout = "bthd"


def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * w + b


def test_the_weights_in_transformer_lens_shapes_give_the_cached_activations(grammar):
    m = grammar
    c = m.cfg
    assert m.W_Q.shape == (c.n_layers, c.n_heads, c.d_model, c.d_head) == m.W_K.shape == m.W_V.shape
    assert m.W_O.shape == (c.n_layers, c.n_heads, c.d_head, c.d_model)
    assert m.W_U.shape == (c.d_model, c.d_vocab_out) and m.b_O.shape == (c.n_layers, c.d_model)
    assert not m.W_Q.flags.writeable
    assert (c.attn_only, c.normalization_type, c.positional_embedding_type, c.act_fn) == (False, "LN", "standard", "gelu")
    _, cache = m.run_with_cache(CLEAN)
    sd = m.state_dict()
    for L in range(c.n_layers):
        x = layer_norm(cache[f"blocks.{L}.hook_resid_pre"].astype(np.float64), sd[f"blocks.{L}.norm1.weight"],
                       sd[f"blocks.{L}.norm1.bias"])
        for h in range(c.n_heads):
            q = x @ m.W_Q[L, h] + m.b_Q[L, h]
            np.testing.assert_allclose(q, cache[f"blocks.{L}.attn.hook_q"][:, h], atol=2e-5)
            v = x @ m.W_V[L, h] + m.b_V[L, h]
            np.testing.assert_allclose(v, cache[f"blocks.{L}.attn.hook_v"][:, h], atol=2e-5)
            np.testing.assert_allclose(cache[f"blocks.{L}.attn.hook_z"][:, h] @ m.W_O[L, h],
                                       cache[f"blocks.{L}.attn.hook_head_result"][:, h], atol=2e-5)
            np.testing.assert_allclose(m.ov_circuit(L, h), m.W_V[L, h].astype(np.float64) @ m.W_O[L, h], rtol=1e-6)
        # The QK circuit is the scores' bilinear form (biases set apart): x_i QK x_j^T.
        qk = m.qk_circuit(L, 0)
        k = x @ m.W_K[L, 0] + m.b_K[L, 0]
        q = x @ m.W_Q[L, 0] + m.b_Q[L, 0]
        scores = (q @ k.transpose(0, 2, 1))[0]
        bilinear = x[0] @ qk @ x[0].T + (x[0] @ m.W_Q[L, 0] @ m.b_K[L, 0])[:, None] \
            + (m.b_Q[L, 0] @ m.W_K[L, 0].T @ x[0].T)[None, :] + m.b_Q[L, 0] @ m.b_K[L, 0]
        np.testing.assert_allclose(bilinear, scores, atol=1e-4)
        np.testing.assert_allclose(scores / math.sqrt(c.d_head), cache[f"blocks.{L}.attn.hook_attn_scores"][0, 0],
                                   atol=1e-4)
    assert m.qk_circuit(0, 0, full=True).shape == (c.d_vocab_embed, c.d_vocab_embed)
    assert m.ov_circuit(0, 0, full=True).shape == (c.d_vocab_embed, c.d_vocab_out)
    logits = m(CLEAN)
    final = layer_norm(cache["blocks.1.hook_resid_post"].astype(np.float64), sd["norm.weight"], sd["norm.bias"])
    np.testing.assert_allclose(final @ m.W_U + m.b_U, logits, atol=1e-4)


class NumpyEncoder:
    """The grammar encoder (pre-LN, learned positions, GELU) in float64 from its weights, its
    residual stream taken apart per head, every write and every head's inputs replaceable."""

    def __init__(self, m):
        self.m, self.sd = m, {k: v.astype(np.float64) for k, v in m.state_dict().items()}
        self.L, self.H, self.D = m.cfg.n_layers, m.cfg.n_heads, m.cfg.d_head

    def run(self, resid, results=None, mlps=None, inputs=None, final=None, record=None):
        """Logits (T, V) of the stream `resid` (T, C) entering block 0. results[(l, h)],
        mlps[l]: replace a head's result or an MLP's output; inputs[(l, h, "q")]: a head's input;
        final: the last block's output. `record` gathers every head result, MLP output and input."""
        sd, results, mlps, inputs = self.sd, results or {}, mlps or {}, inputs or {}
        record = {} if record is None else record
        for l in range(self.L):
            p = f"blocks.{l}."
            attn = sd[p + "attn.w_o.bias"].copy()
            for h in range(self.H):
                x = {}
                for w in "qkv":
                    x[w] = inputs.get((l, h, w), resid)
                    record[(l, h, w)] = x[w]
                    x[w] = layer_norm(x[w], sd[p + "norm1.weight"], sd[p + "norm1.bias"])
                rows = slice(h * self.D, (h + 1) * self.D)
                q, k, v = (x[w] @ sd[p + f"attn.w_{w}.weight"][rows].T + sd[p + f"attn.w_{w}.bias"][rows] for w in "qkv")
                s = q @ k.T / math.sqrt(self.D)
                e = np.exp(s - s.max(-1, keepdims=True))
                z = (e / e.sum(-1, keepdims=True)) @ v
                r = results.get((l, h), z @ sd[p + "attn.w_o.weight"][:, rows].T)
                record[(l, h)] = r
                attn = attn + r
            resid = resid + attn
            u = layer_norm(resid, sd[p + "norm2.weight"], sd[p + "norm2.bias"]) @ sd[p + "ff.fc1.weight"].T \
                + sd[p + "ff.fc1.bias"]
            u = 0.5 * u * (1 + np.vectorize(math.erf)(u / math.sqrt(2)))
            out = mlps.get(l, u @ sd[p + "ff.fc2.weight"].T + sd[p + "ff.fc2.bias"])
            record[l] = out
            resid = resid + out
        record["final"] = resid
        resid = final if final is not None else resid
        return layer_norm(resid, sd["norm.weight"], sd["norm.bias"]) @ sd["head.weight"].T + sd["head.bias"]


def test_path_patching_is_the_numpy_reimplementation_from_the_weights(grammar):
    m = grammar
    net = NumpyEncoder(m)
    _, cc = m.run_with_cache(CLEAN, names_filter="blocks.0.hook_resid_pre")
    _, xc = m.run_with_cache(CORRUPT, names_filter="blocks.0.hook_resid_pre")
    e_clean, e_corrupt = (c["blocks.0.hook_resid_pre"][0].astype(np.float64) for c in (cc, xc))
    clean, corrupt = {}, {}
    np.testing.assert_allclose(net.run(e_clean, record=clean), m(CLEAN)[0], atol=2e-4)  # the reimplementation holds
    z_corrupt = net.run(e_corrupt, record=corrupt)
    r = qkv.path_patch(m, CLEAN, CORRUPT, (0, 1), answer="吃", wrong="喝")
    p, a, w = r["position"], r["answer"], r["wrong"]
    metric = lambda z: z[p, a] - z[p, w]
    m_clean, m_corrupt = metric(net.run(e_clean)), metric(z_corrupt)
    assert r["clean"] == pytest.approx(m_clean, abs=1e-3) and r["corrupt"] == pytest.approx(m_corrupt, abs=1e-3)
    # Step 2: the corrupted run, head 0.1's result clean, every other write frozen at the corrupted run's.
    frozen = {k: v for k, v in corrupt.items() if isinstance(k, tuple) and len(k) == 2}
    frozen[(0, 1)] = clean[(0, 1)]
    mlps = {l: corrupt[l] for l in range(net.L)}
    heard = {}
    net.run(e_corrupt, results=frozen, mlps=mlps, record=heard)
    # Step 3: each receiver's input replaced alone.
    for name, share in r["restored"].items():
        if name == "logits":
            z = net.run(e_corrupt, final=heard["final"])
        else:
            l, h, which = int(name[0]), int(name[2]), name[4]
            z = net.run(e_corrupt, inputs={(l, h, which): heard[(l, h, which)]})
        ours = (metric(z) - m_corrupt) / (m_clean - m_corrupt)
        assert share == pytest.approx(ours, abs=2e-4), name
    assert max(abs(v) for v in r["restored"].values()) > 1e-3
