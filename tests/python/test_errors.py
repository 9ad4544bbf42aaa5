"""Bad input from Python gets a Python exception with qkv's message (what was expected, what was
found, where), never a crash; and the interpreter's process is left as it was."""
import ctypes
import signal

import numpy as np
import pytest

import qkv

from conftest import SOURCE

SENTENCE = "我爱吃苹果"


def test_a_missing_damaged_or_foreign_file_is_an_io_error(workdir, grammar_ckpt):
    with pytest.raises(qkv.IoError, match="no-such.h5") as e:
        qkv.load(workdir / "no-such.h5")
    assert isinstance(e.value, OSError)
    damaged = workdir / "damaged.h5"
    damaged.write_bytes(grammar_ckpt.read_bytes()[:5000])
    with pytest.raises(qkv.IoError, match="damaged.h5.*truncated"):
        qkv.load(damaged)
    with pytest.raises(qkv.IoError, match="not a qkv checkpoint"):
        qkv.load(SOURCE / "configs/sort.yaml")


def test_a_bad_config_is_a_config_error_naming_file_line_and_key(workdir):
    bad = workdir / "bad.yaml"
    bad.write_text("model:\n  d_model: 32\n  headz: 4\n")
    with pytest.raises(qkv.ConfigError, match=r"bad.yaml:3: model.headz: .*did you mean 'heads'") as e:
        qkv.train(bad, out=workdir / "never_made", verbose=False)
    assert isinstance(e.value, ValueError)
    assert not (workdir / "never_made").exists()
    with pytest.raises(qkv.ConfigError, match=r'config dict:1: train.steps: expected a non-negative integer, found the string "many"'):
        qkv.train({"train": {"steps": "many"}}, out=workdir / "never_made", verbose=False)
    with pytest.raises(qkv.ConfigError, match=r"--set model.layers=0"):
        qkv.train(SOURCE / "configs/sort.yaml", overrides=["model.layers=0"], out=workdir / "never_made", verbose=False)
    with pytest.raises(qkv.IoError, match="resume"):
        qkv.train(SOURCE / "configs/sort.yaml", resume=workdir / "no-such.h5", out=workdir / "never_made", verbose=False)
    with pytest.raises(qkv.ConfigError, match="only task"):
        qkv.load(workdir / "grammar" / "best.h5", task_overrides={"model.heads": 2})


def test_a_directory_holding_a_run_is_refused(workdir, grammar_ckpt):
    with pytest.raises(ValueError, match="grammar"):
        qkv.train(SOURCE / "configs/grammar_zh.yaml", out=grammar_ckpt.parent, verbose=False)
    assert grammar_ckpt.exists()


def test_bad_text_and_ids_name_what_is_wrong(grammar, text_model):
    with pytest.raises(ValueError, match="1 character is not in the vocabulary .*'é' U\\+00E9"):
        text_model.run_with_cache("我爱é")
    with pytest.raises(ValueError, match="'é' starts no word of the zh lexicon"):  # the grammar analyses its text
        grammar.run_with_cache("我爱吃苹果é")
    with pytest.raises(ValueError, match="id 999 at \\(0, 1\\) is outside the vocabulary \\[0, 155\\)"):
        grammar.run_with_cache(np.array([[1, 999, 3]]))
    with pytest.raises(ValueError, match="more than the model's context of 32"):
        text_model([1] * 40)
    with pytest.raises(TypeError, match="integer token ids"):
        grammar([0.5, 1.5])
    with pytest.raises(ValueError, match="text: empty"):
        text_model("")
    with pytest.raises(ValueError, match="no sentence given"):
        grammar("")


def test_hooks_name_their_mistakes(grammar):
    with pytest.raises(ValueError, match="no hook point or module named 'blocks.0.atn.hook_z'; "
                                         "did you mean 'blocks.0.attn.hook_z'"):
        grammar.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.atn.hook_z", lambda z, h: None)])
    with pytest.raises(ValueError, match=r"hook 'blocks.1.attn.hook_pattern' returned an array of shape \(1, 4, 6\), "
                                         r"expected \(1, 4, 6, 6\)"):
        grammar.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.1.attn.hook_pattern", lambda p, h: p[..., 0])])
    with pytest.raises(TypeError, match="hook 'blocks.0.attn.hook_z' returned a str: expected None or an array of numbers"):
        grammar.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, h: "zero")])
    with pytest.raises(ValueError, match="read-only view"):
        grammar.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", lambda z, h: z.fill(0))])
    with pytest.raises(TypeError, match="pairs"):
        grammar.run_with_hooks(SENTENCE, fwd_hooks=["blocks.0.attn.hook_z"])

    def fails(z, hook):
        return 1 / 0

    with pytest.raises(ZeroDivisionError):
        grammar.run_with_hooks(SENTENCE, fwd_hooks=[("blocks.0.attn.hook_z", fails)])
    # Nothing stays installed after a failure.
    _, cache = grammar.run_with_cache(SENTENCE)
    np.testing.assert_array_equal(grammar(SENTENCE), grammar.run_with_hooks(SENTENCE))


def test_instruments_name_bad_arguments(grammar, text_model):
    with pytest.raises(ValueError, match="layer 5: the model has 2 attention layers"):
        qkv.explain(grammar, SENTENCE, layer=5, head=0, query=0)
    with pytest.raises(ValueError, match="query 9"):
        qkv.explain(grammar, SENTENCE, layer=0, head=0, query=9)
    with pytest.raises(ValueError, match="heads: 9.0: the model has no attention layer 9"):
        qkv.ablate(grammar, heads="9.0")
    with pytest.raises(ValueError, match="mode: expected one of zero, mean, found 'mena'; did you mean 'mean'"):
        qkv.ablate(grammar, mode="mena")
    with pytest.raises(ValueError, match="fill needs a masked language model"):
        qkv.fill(text_model, "我[MASK]")
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        qkv.fill(grammar, SENTENCE)
    with pytest.raises(ValueError, match="generate continues text with a decoder-only language model"):
        qkv.generate(grammar, "我")
    with pytest.raises(ValueError, match="temperature"):
        qkv.generate(text_model, "我", temperature=-1)
    with pytest.raises(ValueError, match="split: expected 'validation' or 'test', found 'tset'; did you mean 'test'"):
        grammar.held_out("tset")


def c_environment():
    libc = ctypes.CDLL(None)
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    out, i = [], 0
    while env[i]:
        out.append(env[i])
        i += 1
    return sorted(out)


def c_sigint_handler():
    """The process's SIGINT handler as the C library sees it (sigaction, not Python's view)."""
    libc = ctypes.CDLL(None, use_errno=True)
    old = ctypes.create_string_buffer(256)  # struct sigaction; its first member is the handler
    assert libc.sigaction(signal.SIGINT, None, old) == 0
    return bytes(old.raw[:8])


def test_the_process_is_left_as_it_was(grammar, workdir):
    env, handler, threads = c_environment(), c_sigint_handler(), qkv.num_threads()
    python_handler = signal.getsignal(signal.SIGINT)
    qkv.train(SOURCE / "configs/sort.yaml", overrides={"train.steps": 4, "train.eval_every": 2,
              "schedule.warmup_steps": 1, "task.eval_size": 16}, out=workdir / "process", threads=1, verbose=False)
    grammar.run_with_cache(SENTENCE)
    qkv.heads(grammar, examples=8)
    assert c_environment() == env
    assert c_sigint_handler() == handler and signal.getsignal(signal.SIGINT) is python_handler
    assert qkv.num_threads() == threads


def test_info_says_which_kernel_runs_and_how_to_get_the_fast_one():
    i = qkv.info()
    assert i["version"] == qkv.__version__ and i["threads"] == qkv.num_threads()
    assert i["blas"].startswith("OpenBLAS") and i["blas_kernel"]
    if i["cpu_core_type"] and i["blas_kernel"].lower() != i["cpu_core_type"].lower():
        assert f"OPENBLAS_CORETYPE={i['cpu_core_type']}" in i["fast_kernel_hint"]
    else:
        assert i["fast_kernel_hint"] == ""
    with pytest.raises(ValueError, match="at least 1 thread"):
        qkv.set_num_threads(0)


def c_handler(signum):
    """A signal's handler as the C library sees it (sigaction)."""
    libc = ctypes.CDLL(None, use_errno=True)
    old = ctypes.create_string_buffer(256)
    assert libc.sigaction(signum, None, old) == 0
    return bytes(old.raw[:8])


def test_damaged_files_from_several_threads_are_io_errors_and_nothing_forks(workdir, grammar_ckpt):
    """qkv.load reads a checkpoint in this process, without a child (docs/python.md, "Damaged
    files"): the header and checksum are verified before HDF5 parses a byte, so truncated, flipped
    and foreign files are IoErrors, also from several threads at once; no process is forked, no
    signal handler installed."""
    import concurrent.futures
    import os

    good = grammar_ckpt.read_bytes()
    variants = {"truncated_4k": good[:4096], "truncated_half": good[:len(good) // 2], "empty": b"",
                "flipped": good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 0x40]) + good[len(good) // 2 + 1:],
                "garbage": bytes((i * 131 + 7) % 256 for i in range(len(good))), "hdf5_alone": good[512:]}
    paths = []
    for name, data in variants.items():
        p = workdir / f"damaged_{name}.h5"
        p.write_bytes(data)
        paths.append(p)
    handlers = {s: c_handler(s) for s in (signal.SIGSEGV, signal.SIGCHLD, signal.SIGINT, signal.SIGPIPE)}

    def load(p):
        try:
            qkv.load(p)
        except qkv.IoError as e:
            return str(e)
        return "loaded"

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        errors = list(pool.map(load, paths * 3))
    for p, e in zip(paths * 3, errors):
        assert p.name in e and e != "loaded", e
    with pytest.raises(ChildProcessError):  # no child was ever started
        os.waitpid(-1, os.WNOHANG)
    assert {s: c_handler(s) for s in handlers} == handlers
    qkv.load(grammar_ckpt)  # and the interpreter goes on


def test_the_module_links_the_library_alone():
    """The extension holds no part of the qkv command (its server, its child-process probe)."""
    import subprocess

    so = qkv._qkv.__file__
    symbols = subprocess.run(["nm", "-C", str(so)], capture_output=True, text=True, check=True).stdout
    assert "qkv::python::" in symbols  # the check reads real symbols
    assert "qkv::app::" not in symbols and "httplib::" not in symbols and "probe_checkpoint" not in symbols
    needed = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, check=True).stdout
    assert "NEEDED" in needed and "httplib" not in needed
