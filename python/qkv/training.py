"""Training from Python: the run `qkv train` makes, bit for bit, in this interpreter."""

import json
import os
from collections.abc import Mapping

from . import _qkv
from .model import _override_list


def train(config, overrides=None, out=None, resume=None, callback=None, threads=None, overwrite=False, stop_after=0,
          verbose=True):
    """Train as `qkv train CONFIG --set ... --out OUT --resume CKPT` does, with the same bits.

    config: a YAML file's path, or a dict of sections ({"model": {"d_model": 64}, "train":
    {"steps": 200}, "seed": 3}; missing keys keep their defaults, docs/config.md).
    overrides: "section.key=value" strings (as --set) or a {"section.key": value} dict.
    out: the run directory (default: run.out of the config); a directory that already holds a run
    is refused unless `overwrite` (its old files are removed) or resuming one of its checkpoints.
    resume: a checkpoint of the run to continue exactly. threads: as --threads (default
    train.threads, else all cores), for this call only. stop_after: stop after that many steps of
    this call (as --stop-after). verbose: print the lines `qkv train` prints at its start and at
    every evaluation.

    callback(step, metrics) runs after every evaluation, metrics the row just added to
    metrics.csv (a dict by column). Return False (or raise StopIteration) to stop: the run stops
    after that step with last.h5 saved, stop_reason "callback". Another exception stops it the
    same way and is raised again once last.h5 is saved.

    Ctrl-C stops the run after the current step, saves last.h5 and raises KeyboardInterrupt (as
    a PyTorch loop does), its message naming the checkpoint to resume from and its `.result` the
    dict below. No signal handler is installed: Python's own is polled between steps.

    Returns a dict: stop_reason ("steps", "target", "stopped", "callback", "diverged"), step,
    last and best held-out metrics (loss, token_accuracy, sequence_accuracy), steps_to_target,
    wall_seconds, tokens_per_s, message (what diverged), run_dir, last_checkpoint,
    best_checkpoint. A run that diverges is not an exception: stop_reason "diverged" (nothing saved
    for the failed step; the last good checkpoint stays).
    Raises qkv.ConfigError (file:line: key: what was expected and found), ValueError, qkv.IoError.
    """
    a = _qkv.TrainArgs()
    if isinstance(config, Mapping):
        a.text = json.dumps(config)  # JSON is YAML: errors name "config dict:1: section.key"
        a.source = "config dict"
    else:
        a.path = os.fspath(config)
    a.overrides = _override_list(overrides)
    if out is not None:
        a.out, a.has_out = os.fspath(out), True
    if resume is not None:
        a.resume = os.fspath(resume)
    a.overwrite = bool(overwrite)
    if threads is not None:
        if int(threads) < 1:
            raise ValueError(f"threads: expected at least 1, found {threads}")
        a.threads = int(threads)
    a.stop_after = int(stop_after)
    log = (lambda line: print(line, flush=True)) if verbose else None
    try:
        return _with_paths(_qkv.train(a, callback, log))
    except KeyboardInterrupt as e:
        if isinstance(getattr(e, "result", None), dict):
            e.result = _with_paths(e.result)
        raise


def _with_paths(result):
    result = dict(result)
    result["last_checkpoint"] = os.path.join(result["run_dir"], "last.h5")
    result["best_checkpoint"] = os.path.join(result["run_dir"], "best.h5")
    return result
