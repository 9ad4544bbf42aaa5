"""qkv.load and the forward passes: config and vocabulary, the cache (names, shapes, filters, no
copy), hooks (what they receive, replacements, what they leave unchanged)."""
import pathlib
import tracemalloc

import numpy as np
import pytest

import qkv
from qkv import _qkv

SENTENCE = "我爱吃苹果"
SOURCE = pathlib.Path(__file__).resolve().parents[2]


def test_load_gives_the_config_the_vocabulary_and_the_hook_points(grammar):
    m = grammar
    assert m.arch == "encoder" and m.task == "grammar"
    assert m.config["model"]["d_model"] == 32 and m.config["model"]["layers"] == 2
    assert m.config["task"]["language"] == "zh" and m.config["train"]["steps"] == 60
    assert m.config_yaml.startswith("# qkv resolved config")
    assert len(m.vocab) == m.vocab_size and m.vocab[m.mask_token] == "[MASK]"
    assert m.attention_layers == [
        {"name": f"blocks.{i}.attn", "index": i, "kind": "self", "heads": 4, "head_dim": 8, "value_dim": 8}
        for i in range(2)]
    attn = ["hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z", "hook_head_result",
            "hook_result"]
    block = ["hook_resid_pre", "hook_q_input", "hook_k_input", "hook_v_input", "hook_resid_mid", "hook_mlp_in",
             "hook_mlp_out", "hook_resid_post"]
    assert m.hook_names == [f"blocks.{i}.{p}" for i in range(2) for p in [f"attn.{a}" for a in attn] + block]
    assert "blocks.0" in m.module_names and "blocks.0.attn.hook_z" not in m.module_names
    sd = m.state_dict()
    assert sd["blocks.0.attn.w_q.weight"].shape == (32, 32) and not sd["blocks.0.attn.w_q.weight"].flags.writeable


def test_tokens_round_trip_and_the_row_the_model_reads(grammar):
    m = grammar
    ids = m.tokenize(SENTENCE)
    assert len(ids) == 5 and m.decode(ids) == SENTENCE
    assert m.to_str_tokens(SENTENCE) == ["我", "爱", "吃", "苹", "果", "。"]  # the grammar's row ends its sentence
    tokens = m.to_tokens(SENTENCE)  # TransformerLens's to_tokens: (B, T) ids of the row the model reads
    assert tokens.shape == (1, 6) and tokens.dtype == np.int64 and tokens[0, :5].tolist() == ids
    assert m.vocab[tokens[0, 5]] == "。"
    assert m.tokenize("我爱[MASK]苹果")[2] == m.mask_token
    assert m.decode(m.tokenize("我爱[MASK]苹果")) == "我爱[MASK]苹果"
    row = m.input_row(SENTENCE)
    assert row["inputs"].dtype == np.int64 and row["inputs"].shape == (1, 6)


def test_the_cache_holds_every_hook_point_with_its_documented_shape(grammar):
    m = grammar
    logits, cache = m.run_with_cache(SENTENCE)
    T, H, D, C = 6, 4, 8, 32
    assert logits.shape == (1, T, m.num_classes) and logits.dtype == np.float32
    assert sorted(cache) == sorted(m.hook_names)
    order = list(cache)  # in the order the forward pass produced them
    assert order.index("blocks.0.hook_resid_pre") < order.index("blocks.0.attn.hook_q") < \
        order.index("blocks.0.hook_resid_mid") < order.index("blocks.0.hook_resid_post") < order.index("blocks.1.attn.hook_q")
    for i in range(2):
        a = f"blocks.{i}.attn."
        assert cache[a + "hook_q"].shape == (1, H, T, D)
        assert cache[a + "hook_k"].shape == (1, H, T, D)
        assert cache[a + "hook_v"].shape == (1, H, T, D)
        assert cache[a + "hook_pattern"].shape == (1, H, T, T)
        assert cache[a + "hook_z"].shape == (1, H, T, D)
        assert cache[a + "hook_result"].shape == (1, T, C)
        assert cache[a + "hook_attn_scores"].shape == (1, H, T, T)
        assert cache[a + "hook_head_result"].shape == (1, H, T, C)
        for p in ("q_input", "k_input", "v_input"):
            assert cache[f"blocks.{i}.hook_{p}"].shape == (1, H, T, C)
        for p in ("resid_pre", "resid_mid", "resid_post", "mlp_in", "mlp_out"):
            assert cache[f"blocks.{i}.hook_{p}"].shape == (1, T, C)
        np.testing.assert_allclose(cache[a + "hook_pattern"].sum(-1), 1, rtol=1e-5)
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    assert cache["hook_z", 0] is cache["blocks.0.attn.hook_z"]
    with pytest.raises(KeyError, match="did you mean 'blocks.0.attn.hook_pattern'"):
        cache["blocks.0.attn.hook_patern"]
    # The pattern is softmax(q k^T / sqrt(D)) of the cached q and k, z = pattern v.
    q, k, v = (cache[f"blocks.1.attn.hook_{x}"].astype(np.float64) for x in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(w, cache["blocks.1.attn.hook_pattern"], atol=2e-6)
    np.testing.assert_allclose(w @ v, cache["blocks.1.attn.hook_z"], atol=2e-5)


def test_a_batch_of_ids_and_a_list_of_ids_run_like_the_text(grammar):
    m = grammar
    row = m.input_row(SENTENCE)["inputs"]
    one = m(SENTENCE)
    np.testing.assert_array_equal(m(row), one)
    np.testing.assert_array_equal(m(row[0].tolist()), one)
    two = m(np.concatenate([row, row]))
    assert two.shape == (2,) + one.shape[1:]
    np.testing.assert_allclose(two[1], one[0], atol=1e-5)


def test_names_filter_records_only_what_it_names(grammar):
    m = grammar
    patterns = [f"blocks.{i}.attn.hook_pattern" for i in range(2)]
    for f in ("*.hook_pattern", patterns, lambda name: name.endswith("hook_pattern")):
        _, cache = m.run_with_cache(SENTENCE, names_filter=f)
        assert list(cache) == patterns
    _, cache = m.run_with_cache(SENTENCE, names_filter="blocks.1.attn.hook_z")
    assert list(cache) == ["blocks.1.attn.hook_z"]
    # Module outputs by name: block 0's output is the residual stream after it.
    _, cache = m.run_with_cache(SENTENCE, names_filter=["blocks.0", "tok_emb"])
    assert cache["blocks.0"].shape == (1, 6, 32) and cache["tok_emb"].shape == (1, 6, 32)
    with pytest.raises(ValueError, match="'blocks.0.attn' produced no value"):
        m.run_with_cache(SENTENCE, names_filter="blocks.0.attn")
    with pytest.raises(ValueError, match="matches no hook point"):
        m.run_with_cache(SENTENCE, names_filter="*.hook_patern")


def test_the_cache_is_qkvs_buffers_not_a_copy(grammar):
    """The arrays are views over qkv's buffers: a pass recording the patterns only holds exactly
    the patterns' bytes in qkv's pool afterwards, and Python allocates nothing of their size."""
    m = grammar
    row = m.held_out("test", 64)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(2)]
    m.run_with_cache(row, names_filter=names)  # warm the pool
    before = _qkv.pool_stats()["in_use_bytes"]
    tracemalloc.start()
    logits, cache = m.run_with_cache(row, names_filter=names)
    _, python_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    held = _qkv.pool_stats()["in_use_bytes"] - before
    for a in cache.values():
        assert not a.flags.owndata and not a.flags.writeable  # views, read-only: the record stays what was computed
    assert not logits.flags.owndata and logits.flags.writeable
    # The pool rounds each block to a multiple of 64 bytes (at most 1/8 more above 4 KiB).
    exact = cache.nbytes + logits.nbytes
    assert exact <= held <= exact * 1.125 + 64 * 3, (held, exact)
    assert python_peak < 64 * 1024 < cache.nbytes, (python_peak, cache.nbytes)
    del cache, logits, a
    assert _qkv.pool_stats()["in_use_bytes"] == before


def test_a_hook_gets_a_read_only_view_and_the_hook_point(grammar):
    m = grammar
    seen = []

    def look(z, hook):
        seen.append((hook.name, hook.layer(), z.shape, z.flags.writeable, z.flags.owndata))
        return None

    plain = m(SENTENCE)
    hooked = m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.1.attn.hook_z", look)])
    np.testing.assert_array_equal(hooked, plain)  # observing changes nothing, bit for bit
    assert seen == [("blocks.1.attn.hook_z", 1, (1, 4, 6, 8), False, False)]
    # A glob or a filter function names several points, each hook called with its own.
    seen.clear()
    m.run_with_hooks(SENTENCE, fwd_hooks=[("*.hook_pattern", look)])
    assert [s[0] for s in seen] == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    # Returning the view itself is observing too.
    np.testing.assert_array_equal(m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_q", lambda x, h: x)]), plain)


def test_a_replacement_flows_on_and_the_cache_sees_it(grammar):
    m = grammar

    def zero_head_1(z, hook):
        z = z.copy()
        z[:, 1] = 0
        return z

    logits, cache = m.run_with_cache(SENTENCE, names_filter="blocks.0.attn.hook_z",
                                     fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)])
    assert not cache["blocks.0.attn.hook_z"][:, 1].any() and cache["blocks.0.attn.hook_z"][:, 0].any()
    assert not np.array_equal(logits, m(SENTENCE))
    np.testing.assert_array_equal(logits, m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_1)]))
    # Steering: add a vector to the residual stream after block 0 (a module's output).
    direction = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    steered = m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0", lambda x, h: x + 3 * direction)])
    assert np.abs(steered - m(SENTENCE)).max() > 1e-3
    # A float64 replacement is taken as float32.
    np.testing.assert_array_equal(
        m.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, h: z.astype(np.float64))]), m(SENTENCE))


def test_a_replaced_pattern_is_what_the_layer_attends_with(grammar):
    m = grammar
    _, cache = m.run_with_cache(SENTENCE, names_filter=["blocks.1.attn.hook_v", "blocks.1.attn.hook_pattern"])
    uniform = np.full(cache["blocks.1.attn.hook_pattern"].shape, 1 / 6, np.float32)
    _, after = m.run_with_cache(SENTENCE, names_filter=["blocks.1.attn.hook_z"],
                                fwd_hooks=[("blocks.1.attn.hook_pattern", lambda p, h: uniform)])
    np.testing.assert_allclose(after["blocks.1.attn.hook_z"], uniform @ cache["blocks.1.attn.hook_v"], atol=1e-5)


def test_the_gil_is_released_while_the_model_runs(grammar):
    """Two Python threads run forward passes at once; a hook in one still gets the GIL."""
    import threading

    m = grammar
    row = m.held_out("test", 64)
    expected = m(row)
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(m.run_with_hooks(row, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, h: None)]))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 10
    for r in results:
        np.testing.assert_array_equal(r, expected)


def _longest_pause_of_this_thread(work):
    """Run work() in another thread and spin here meanwhile: (seconds work took, the longest time
    this thread went without running a Python line). A call that kept the GIL would stop this
    thread for as long as it ran."""
    import threading
    import time

    took, errors = [], []

    def run():
        t0 = time.perf_counter()
        try:
            work()
        except BaseException as e:  # raised below, in the test's thread
            errors.append(e)
        took.append(time.perf_counter() - t0)

    t = threading.Thread(target=run)
    last, longest = time.perf_counter(), 0.0
    t.start()
    while t.is_alive():
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    t.join()
    if errors:
        raise errors[0]
    return took[0], longest


def test_a_forward_pass_and_training_leave_the_gil_to_other_threads(grammar, workdir):
    m = grammar
    test = m.held_out("test")
    big = {k: np.concatenate([v] * 40) for k, v in test.items()}
    took, pause = _longest_pause_of_this_thread(lambda: m.evaluate(big, batch_size=len(big["inputs"])))
    assert took > 0.2, f"the forward pass took {took:.3f} s: too short to tell"
    assert pause < took / 3, (took, pause)
    took, pause = _longest_pause_of_this_thread(lambda: qkv.train(
        SOURCE / "configs/sort.yaml", overrides={"train.steps": 60, "train.eval_every": 60, "schedule.warmup_steps": 5},
        out=workdir / "gil_run", overwrite=True, verbose=False, threads=1))
    assert took > 0.2, f"training took {took:.3f} s: too short to tell"
    assert pause < took / 3, (took, pause)
