"""What a TransformerLens user reaches for works as there: to_tokens / to_str_tokens, cfg,
run_with_cache(remove_batch_dim=True), add_hook / reset_hooks / `with m.hooks(...)`, and
TransformerLens's own names for points qkv names otherwise get qkv's name back."""
import numpy as np
import pytest

import qkv

SENTENCE = "我爱吃苹果"


def zero_head_1(z, hook):
    z = z.copy()
    z[:, 1] = 0
    return z


def test_cfg_holds_the_sizes_under_transformer_lens_names(grammar, text_model):
    c = grammar.cfg
    assert (c.n_layers, c.n_heads, c.d_model, c.d_head, c.d_mlp) == (2, 4, 32, 8, 64)
    assert (c.d_vocab, c.d_vocab_out, c.n_ctx) == (grammar.vocab_size, grammar.num_classes, grammar.context)
    assert grammar.config["model"]["layers"] == c.n_layers
    with pytest.raises(AttributeError):
        c.n_layers = 3  # read from the checkpoint, not a setting
    t = text_model.cfg
    assert (t.n_layers, t.n_heads, t.d_vocab_out) == (2, 4, text_model.num_classes)


def test_remove_batch_dim_gives_the_same_arrays_without_their_batch_axis(grammar):
    logits, cache = grammar.run_with_cache(SENTENCE)
    logits1, cache1 = grammar.run_with_cache(SENTENCE, remove_batch_dim=True)
    np.testing.assert_array_equal(logits1, logits)
    assert logits1.shape == (1, 6, grammar.num_classes)  # the logits keep theirs, as in TransformerLens
    assert list(cache1) == list(cache)
    for name in cache:
        assert cache1[name].shape == cache[name].shape[1:]
        np.testing.assert_array_equal(cache1[name], cache[name][0])
        assert not cache1[name].flags.owndata  # still a view of qkv's buffer
    assert cache1["pattern", 1].shape == (4, 6, 6)
    with pytest.raises(ValueError, match="remove_batch_dim: expected one row, found 2"):
        grammar.run_with_cache(np.concatenate([grammar.to_tokens(SENTENCE)] * 2), remove_batch_dim=True)


def test_added_hooks_run_in_every_forward_pass_until_reset(grammar):
    m = grammar
    intact = m(SENTENCE)
    ablated = m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)])
    assert not np.array_equal(ablated, intact)
    m.add_hook("blocks.0.attn.hook_z", zero_head_1)
    try:
        np.testing.assert_array_equal(m(SENTENCE), ablated)
        logits, cache = m.run_with_cache(SENTENCE, names_filter="blocks.0.attn.hook_z")
        np.testing.assert_array_equal(logits, ablated)
        assert not cache["blocks.0.attn.hook_z"][:, 1].any()
        # The added hook runs before a call's own hooks: they see what it left.
        seen = []
        m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, h: seen.append(z[:, 1].any()))])
        assert seen == [False]
        assert m.evaluate() == m.evaluate(fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)])
        # The C++ instruments would not see it: they refuse instead of giving the intact numbers.
        with pytest.raises(ValueError, match=r"qkv.heads: the model has hooks added .*blocks.0.attn.hook_z.*reset_hooks"):
            qkv.heads(m, examples=4)
        with pytest.raises(ValueError, match="qkv.ablate: the model has hooks added"):
            qkv.ablate(m, heads="0.1")
        with pytest.raises(ValueError, match="qkv.fill: the model has hooks added"):
            qkv.fill(m, "我爱[MASK]苹果")
    finally:
        m.reset_hooks()
    np.testing.assert_array_equal(m(SENTENCE), intact)
    qkv.heads(m, examples=4)


def test_the_hooks_context_removes_its_hooks_at_the_end_even_on_an_error(grammar):
    m = grammar
    intact = m(SENTENCE)
    ablated = m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)])
    m.add_hook("*.hook_pattern", lambda p, h: None)  # one added before stays after the block
    try:
        with m.hooks(fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)]) as inside:
            assert inside is m
            np.testing.assert_array_equal(m(SENTENCE), ablated)
        np.testing.assert_array_equal(m(SENTENCE), intact)
        with pytest.raises(ZeroDivisionError):
            with m.hooks(fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)]):
                1 / 0
        np.testing.assert_array_equal(m(SENTENCE), intact)
        assert [name for name, _ in m._added_hooks] == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
        # A bad name is refused when the hook is added, not at the next forward pass.
        entered = []
        with pytest.raises(ValueError, match="hooks: no hook point or module named 'blocks.0.attn.hook_zz'; "
                                             "did you mean 'blocks.0.attn.hook_z'"):
            with m.hooks(fwd_hooks=[("blocks.0.attn.hook_zz", zero_head_1)]):
                entered.append(True)
        assert not entered
        with pytest.raises(ValueError, match="add_hook: no hook point or module named 'blocks.0.atn.hook_z'"):
            m.add_hook("blocks.0.atn.hook_z", zero_head_1)
        with pytest.raises(TypeError, match="not callable"):
            m.add_hook("blocks.0.attn.hook_z", "zero")
        assert len(m._added_hooks) == 2
    finally:
        m.reset_hooks()
    assert m._added_hooks == []


@pytest.mark.parametrize("theirs, ours", [
    ("blocks.1.hook_resid_post", "blocks.1"),
    ("blocks.1.hook_resid_pre", "blocks.0"),
    ("blocks.0.hook_resid_pre", "pos"),
    ("blocks.0.hook_attn_out", "blocks.0.attn.hook_result"),
    ("blocks.1.hook_mlp_out", "blocks.1.ff"),
    ("hook_embed", "tok_emb"),
])
def test_transformer_lens_names_get_qkvs_name(grammar, theirs, ours):
    assert ours in grammar.module_names + grammar.hook_names
    message = f"'{theirs}' is TransformerLens's name; qkv's is '{ours}'"
    with pytest.raises(ValueError, match=message):
        grammar.run_with_cache(SENTENCE, names_filter=[theirs])
    with pytest.raises(ValueError, match=message):
        grammar.run_with_hooks(SENTENCE, fwd_hooks=[(theirs, lambda a, h: None)])
    with pytest.raises(ValueError, match=message):
        grammar.add_hook(theirs, lambda a, h: None)


def test_qkvs_names_hold_what_the_hints_say(grammar):
    """TransformerLens's resid_post = resid_pre + attn_out + mlp_out in a pre-LN block, with qkv's
    names: blocks.L = (blocks.L-1, or pos for L = 0) + blocks.L.attn.hook_result + blocks.L.ff."""
    assert grammar.config["model"]["norm_first"] is True
    _, c = grammar.run_with_cache(SENTENCE, names_filter=["pos", "blocks.0", "blocks.1", "blocks.0.attn.hook_result",
                                                          "blocks.1.attn.hook_result", "blocks.0.ff", "blocks.1.ff"])
    for layer, before in ((0, "pos"), (1, "blocks.0")):
        b = f"blocks.{layer}"
        assert c[b].shape == c[before].shape == (1, 6, 32)
        np.testing.assert_allclose(c[b], c[before] + c[b + ".attn.hook_result"] + c[b + ".ff"], atol=2e-5)
    assert np.abs(c["blocks.1.ff"]).max() > 1e-3  # the sum is not carried by one term alone
    with pytest.raises(ValueError, match="hook_attn_scores' is TransformerLens's name: qkv records the weights"):
        grammar.run_with_cache(SENTENCE, names_filter="blocks.0.attn.hook_attn_scores")


def test_transformer_lens_layouts_are_views_and_the_per_head_result_sums_to_hook_result(grammar):
    """docs/python.md's recipes: TransformerLens's (batch, pos, head, d_head) layout of hook_z is a
    transposed view, and its per-head hook_result (batch, pos, head, d_model) is z through each
    head's slice of w_o, which summed over heads plus w_o's bias is qkv's hook_result."""
    _, cache = grammar.run_with_cache(SENTENCE, names_filter=["blocks.1.attn.hook_z", "blocks.1.attn.hook_result"])
    z = cache["blocks.1.attn.hook_z"]                       # (B, H, T, D)
    z_tl = z.transpose(0, 2, 1, 3)                          # (B, T, H, D)
    assert z_tl.shape == (1, 6, 4, 8) and np.shares_memory(z_tl, z)
    sd = grammar.state_dict()
    W_O = sd["blocks.1.attn.w_o.weight"].reshape(32, 4, 8)  # (C, H, D)
    per_head = np.einsum("bhtd,chd->bthc", z, W_O)          # (B, T, H, C)
    assert per_head.shape == (1, 6, 4, 32)
    np.testing.assert_allclose(per_head.sum(2) + sd["blocks.1.attn.w_o.bias"], cache["blocks.1.attn.hook_result"],
                               atol=2e-5)
