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
    ("blocks.0.hook_attn_out", "blocks.0.attn.hook_result"),
    ("blocks.1.hook_attn_out", "blocks.1.attn.hook_result"),
    ("hook_embed", "tok_emb"),
    ("hook_pos_embed", "pos"),
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


def test_the_residual_stream_has_transformer_lens_names_and_adds_up(grammar):
    """In a pre-LN block, resid_mid = resid_pre + attn.hook_result and resid_post = resid_mid +
    hook_mlp_out; resid_post is the block's output, resid_pre of block 0 what the embeddings give,
    resid_pre of block L the output of block L-1, hook_mlp_out the feed-forward's output, and
    softmax(hook_attn_scores) over the keys is hook_pattern."""
    assert grammar.config["model"]["norm_first"] is True
    _, c = grammar.run_with_cache(SENTENCE, names_filter=grammar.hook_names + ["emb_drop", "blocks.0", "blocks.1",
                                                                               "blocks.0.ff", "blocks.1.ff"])
    for layer in (0, 1):
        b = f"blocks.{layer}"
        pre, mid, post = (c[f"{b}.hook_resid_{p}"] for p in ("pre", "mid", "post"))
        assert pre.shape == mid.shape == post.shape == (1, 6, 32)
        np.testing.assert_allclose(mid, pre + c[b + ".attn.hook_result"], atol=2e-5)
        np.testing.assert_allclose(post, mid + c[b + ".hook_mlp_out"], atol=2e-5)
        np.testing.assert_array_equal(post, c[b])
        np.testing.assert_array_equal(c[b + ".hook_mlp_out"], c[b + ".ff"])
        np.testing.assert_array_equal(pre, c["emb_drop"] if layer == 0 else c["blocks.0.hook_resid_post"])
        scores = c[b + ".attn.hook_attn_scores"]
        e = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(e / e.sum(-1, keepdims=True), c[b + ".attn.hook_pattern"], atol=1e-6)
        assert np.abs(c[b + ".hook_mlp_out"]).max() > 1e-3  # the sums are not carried by one term alone


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
