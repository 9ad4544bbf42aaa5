"""A compiled program (qkv compile, docs/compile.md) opens in Python as any checkpoint does: its
config carries the program, its heads attend where the program says, and its circuit file and
/compiled group describe the same residual stream."""
import json
import pathlib

import h5py
import numpy as np

import qkv

SOURCE = pathlib.Path(__file__).resolve().parents[2]


def test_a_compiled_induction_program_loads_runs_and_describes_itself(cli, workdir):
    out = workdir / "induction.h5"
    cli.run("compile", SOURCE / "programs/induction.rasp", "--out", out, "--check", "1000")
    m = qkv.load(out)
    assert m.task == "program" and m.arch == "decoder"
    assert m.config["model"]["norm"] == "none" and m.config["model"]["activation"] == "relu"
    assert m.config["task"]["program"] == (SOURCE / "programs/induction.rasp").read_text()
    assert m.vocab == ["a", "b", "c", "d", "BOS", "PAD"]
    bos = m.vocab.index("BOS")
    a, b, c = 0, 1, 2
    tokens = np.array([[bos, a, b, a, c, a]])  # at the second a: what followed the first one, b
    logits, cache = m.run_with_cache(tokens)
    assert logits[0, 3].argmax() == b
    prev = cache["blocks.0.attn.hook_pattern"][0, 0]  # the previous-token head
    assert all(prev[q, q - 1] > 0.99 for q in range(2, 6))
    induction = cache["blocks.1.attn.hook_pattern"][0, 0]
    assert induction[3, 2] > 0.99  # the key whose previous token is the query's (a): b at position 2

    circuit = json.loads((workdir / "induction.circuit.json").read_text())
    assert circuit["format"] == "qkv-circuit" and circuit["model"]["layers"] == 2
    assert {"from": "0.0", "to": "1.0", "port": "k", "sop": "prev_token"} in circuit["edges"]
    with h5py.File(out, "r") as f:
        residual = f["compiled/residual"][()].decode().splitlines()
    assert residual == circuit["residual"] and len(residual) == m.cfg.d_model

    # The walk in the program's words, as qkv explain gives it: the induction head at the second
    # a reads, at its query, the token a, and at its heaviest key (b) the previous token a.
    e = qkv.explain(m, tokens[0], layer=1, head=0, query=3)
    words = e["program_words"]
    assert words[0].startswith("head 1.0 computes induction (aggregate, line ")
    assert any(w.startswith("the query 3 'a' holds tokens = a") for w in words), words
    assert any(w.startswith("the heaviest key 2 'b' holds prev_token = a") for w in words), words
