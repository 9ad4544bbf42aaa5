"""qkv.train: the run `qkv train` makes, bit for bit; stopping it from a callback and with Ctrl-C
(last.h5 saved, and resuming it gives the run that was never stopped)."""
import os
import signal
import subprocess
import textwrap

import h5py
import numpy as np
import pytest

import qkv

from conftest import SOURCE

# A tiny sort model with dropout (the dropout stream must be the command's too) and training
# snapshots (app::run_training's part), evaluated and checkpointed often.
TINY = {"model.d_model": 32, "model.d_ff": 64, "model.layers": 2, "model.heads": 2, "model.dropout": 0.1,
        "task.vocab": 8, "task.length": 8, "task.eval_size": 64, "train.batch_size": 16, "train.steps": 30,
        "train.eval_every": 10, "train.checkpoint_every": 10, "schedule.warmup_steps": 5,
        "train.snapshot_every": 10}
WALL_TIME = {"tokens_per_s", "elapsed_s"}  # the only columns that differ from one run to the next


def sets(overrides):
    return [x for k, v in overrides.items() for x in ("--set", f"{k}={v}")]


def contents(path):
    """Every dataset and attribute of an HDF5 file, by path (metrics' wall-time columns left out)."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for k, v in obj.attrs.items():
                out[f"{name}@{k}"] = v
            if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] not in WALL_TIME:
                out[name] = obj[()]
        visit("/", f)
        f.visititems(visit)
    return out


def assert_same_file(a, b):
    ca, cb = contents(a), contents(b)
    assert sorted(ca) == sorted(cb)
    for k in ca:
        x, y = np.asarray(ca[k]), np.asarray(cb[k])
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f"{a} and {b} differ at {k}"


def metrics_rows(path):
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    keep = [i for i, c in enumerate(header) if c not in WALL_TIME]
    return [[line.split(",")[i] for i in keep] for line in lines]


def test_train_equals_qkv_train_bit_for_bit(cli, workdir):
    cli.run("train", SOURCE / "configs/sort.yaml", *sets(TINY), "--out", workdir / "cli_run", "--quiet")
    r = qkv.train(SOURCE / "configs/sort.yaml", overrides=TINY, out=workdir / "py_run", verbose=False)
    assert r["stop_reason"] == "steps" and r["step"] == 30
    assert r["last_checkpoint"] == os.path.join(workdir / "py_run", "last.h5")
    for name in ("last.h5", "best.h5", "checkpoints/step_0000020.h5", "snapshots.h5"):
        assert_same_file(workdir / "cli_run" / name, workdir / "py_run" / name)
    assert metrics_rows(workdir / "cli_run" / "metrics.csv") == metrics_rows(workdir / "py_run" / "metrics.csv")
    assert (workdir / "cli_run" / "config.yaml").read_text() == (workdir / "py_run" / "config.yaml").read_text()
    # The model it saved runs in Python with the command's numbers; a task without a tokenizer
    # takes token ids.
    m = qkv.load(r["best_checkpoint"])
    assert m.evaluate(m.held_out("validation"), batch_size=16)["loss"] == pytest.approx(r["best"]["loss"], abs=0)
    assert m.tokenizer is None and m.to_str_tokens([3, 1, 2]) == ["3", "1", "2"] and m.decode([3, 1, 2]) == "3 1 2"
    assert m([3, 1, 2, 7, 0, 5, 4, 6]).shape == (1, 8, 8)
    with pytest.raises(ValueError, match="has no vocabulary .*give token ids"):
        m.tokenize("3 1 2")


def test_a_config_dict_and_the_file_give_the_same_run(workdir):
    base = {"model": {"d_model": 32, "d_ff": 64, "layers": 1, "heads": 2}, "task": {"name": "sort", "vocab": 8, "length": 8,
            "eval_size": 32}, "train": {"steps": 12, "batch_size": 16, "eval_every": 6}, "schedule": {"warmup_steps": 2}, "seed": 5}
    r = qkv.train(base, out=workdir / "dict_run", verbose=False)
    (workdir / "dict.yaml").write_text(
        "seed: 5\nmodel: {d_model: 32, d_ff: 64, layers: 1, heads: 2}\ntask: {name: sort, vocab: 8, length: 8, eval_size: 32}\n"
        "train: {steps: 12, batch_size: 16, eval_every: 6}\nschedule: {warmup_steps: 2}\n")
    r2 = qkv.train(workdir / "dict.yaml", out=workdir / "yaml_run", verbose=False)
    assert r["last"] == r2["last"]
    assert_same_file(workdir / "dict_run" / "last.h5", workdir / "yaml_run" / "last.h5")


def test_a_callback_sees_each_evaluation_and_can_stop_the_run(workdir):
    seen = []

    def callback(step, metrics):
        seen.append((step, metrics["eval_loss"], metrics["step"]))
        return step < 20  # False at step 20: stop

    r = qkv.train(SOURCE / "configs/sort.yaml", overrides=TINY, out=workdir / "stopped", callback=callback, verbose=False)
    assert [s[0] for s in seen] == [10, 20] and all(s[0] == s[2] for s in seen)
    assert r["stop_reason"] == "callback" and r["step"] == 20
    with h5py.File(workdir / "stopped" / "last.h5", "r") as f:
        assert f.attrs["step"] == 20
    # Resumed, it finishes as the run that was never stopped.
    r = qkv.train(SOURCE / "configs/sort.yaml", overrides=TINY, out=workdir / "stopped",
                  resume=workdir / "stopped" / "last.h5", verbose=False)
    assert r["stop_reason"] == "steps" and r["step"] == 30
    straight = qkv.train(SOURCE / "configs/sort.yaml", overrides=TINY, out=workdir / "straight", verbose=False)
    assert r["last"] == straight["last"]
    assert_same_file(workdir / "stopped" / "last.h5", workdir / "straight" / "last.h5")


def test_stop_iteration_stops_and_another_exception_is_raised_after_saving(workdir):
    def stop(step, metrics):
        raise StopIteration

    r = qkv.train(SOURCE / "configs/sort.yaml", overrides=TINY, out=workdir / "si", callback=stop, verbose=False)
    assert r["stop_reason"] == "callback" and r["step"] == 10

    def broken(step, metrics):
        raise RuntimeError("the callback broke")

    with pytest.raises(RuntimeError, match="the callback broke"):
        qkv.train(SOURCE / "configs/sort.yaml", overrides=TINY, out=workdir / "broken", callback=broken, verbose=False)
    with h5py.File(workdir / "broken" / "last.h5", "r") as f:
        assert f.attrs["step"] == 10


def test_ctrl_c_stops_after_the_step_saves_last_h5_and_the_run_resumes_exactly(cli, workdir):
    """SIGINT to a Python process training with qkv.train: KeyboardInterrupt naming last.h5 (saved
    at the step it stopped), and the run resumed from it ends as the run never interrupted."""
    long = dict(TINY, **{"train.steps": 3000, "train.eval_every": 5, "train.checkpoint_every": 1000,
                         "train.snapshot_every": 0})
    out = workdir / "interrupted"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(os.environ["QKV_BUILD_DIR"] + "/python")!r})
        import qkv
        def ready(step, metrics):
            if step == 5:
                print("ready", flush=True)
        try:
            qkv.train({str(SOURCE / "configs/sort.yaml")!r}, overrides={long!r}, out={str(out)!r}, callback=ready,
                      verbose=False, threads=1)
        except KeyboardInterrupt as e:
            print("interrupted:", e, "|", e.result["stop_reason"], e.result["step"], flush=True)
            sys.exit(0)
        print("finished without an interrupt", flush=True)
        sys.exit(3)
    """)
    p = subprocess.Popen(["/usr/bin/python3", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=cli.env)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stdout + stderr
    assert stdout.startswith("interrupted: training interrupted at step "), stdout
    step = int(stdout.split("|")[1].split()[1])
    assert stdout.split("|")[1].split()[0] == "interrupted" and 5 <= step < 3000
    assert f"saved {out}/last.h5" in stdout
    with h5py.File(out / "last.h5", "r") as f:
        assert f.attrs["step"] == step
    # Resumed for 10 more steps, it is the run never interrupted, stopped at the same step.
    r = qkv.train(SOURCE / "configs/sort.yaml", overrides=long, out=out, resume=out / "last.h5", stop_after=10,
                  verbose=False)
    assert r["stop_reason"] == "stopped" and r["step"] == step + 10
    never = qkv.train(SOURCE / "configs/sort.yaml", overrides=long, out=workdir / "never", stop_after=step + 10,
                      verbose=False)
    assert never["step"] == step + 10
    assert_same_file(out / "last.h5", workdir / "never" / "last.h5")
