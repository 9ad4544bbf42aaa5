"""An encoder-decoder model from Python: its hook points (encoder and decoder, self- and
cross-attention), batches with decoder inputs, and the instruments against the command."""
import csv
import io
import json

import numpy as np
import pytest

import qkv

from conftest import SOURCE


@pytest.fixture(scope="module")
def seq2seq(cli, workdir):
    cli.run("train", SOURCE / "configs/seq2seq_reverse.yaml", "--set", "model.d_model=32", "--set", "model.d_ff=64",
            "--set", "model.layers=1", "--set", "train.steps=20", "--set", "train.eval_every=20",
            "--set", "schedule.warmup_steps=2", "--set", "task.eval_size=32", "--out", workdir / "seq2seq", "--quiet")
    return workdir / "seq2seq" / "last.h5"


def test_an_encoder_decoder_model_runs_with_its_decoder_inputs(seq2seq, cli):
    m = qkv.load(seq2seq)
    assert m.arch == "encoder_decoder"
    kinds = [(layer["name"], layer["kind"]) for layer in m.attention_layers]
    assert kinds == [("encoder.blocks.0.attn", "self"), ("decoder.blocks.0.self_attn", "causal"),
                     ("decoder.blocks.0.cross_attn", "cross")]
    batch = m.held_out("validation", 3)
    S, T = batch["inputs"].shape[1], batch["decoder_inputs"].shape[1]
    logits, cache = m.run_with_cache(batch, names_filter="*.hook_pattern")
    assert logits.shape == (3, T, m.num_classes + 1)  # the decoder vocabulary: BOS too
    H = m.attention_layers[0]["heads"]
    assert cache["encoder.blocks.0.attn.hook_pattern"].shape == (3, H, S, S)
    assert cache["decoder.blocks.0.self_attn.hook_pattern"].shape == (3, H, T, T)
    assert cache["decoder.blocks.0.cross_attn.hook_pattern"].shape == (3, H, T, S)
    assert not np.triu(cache["decoder.blocks.0.self_attn.hook_pattern"][0, 0], 1).any()
    with pytest.raises(ValueError, match="encoder-decoder model.*decoder_inputs"):
        m(batch["inputs"])
    # The instruments, as the command.
    r = cli.run("explain", seq2seq, "--example", 1, "--layer", 2, "--head", 0, "--query", 2, "--json")
    assert qkv.explain(m, example=1, layer=2, head=0, query=2) == json.loads(r.stdout)
    r = cli.run("ablate", seq2seq, "--heads", "2.0", "--examples", 16)
    loss = qkv.ablate(m, heads="2.0", examples=16)["ablated"]["loss"]
    assert f"loss {loss:.4f}" in r.stdout.splitlines()[-1]
