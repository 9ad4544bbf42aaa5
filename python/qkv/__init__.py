"""qkv from Python: the engine and the instruments of the qkv command, in a notebook.

Load a checkpoint, run it with a cache of every activation under its hook-point name, change
activations with Python functions (ablation, patching, steering), run the instruments and train,
with the same numbers as the `qkv` command:

    import qkv
    m = qkv.load("runs/grammar_zh/best.h5")
    logits, cache = m.run_with_cache("我爱吃苹果")
    cache["blocks.0.attn.hook_pattern"]          # numpy (1, H, T, T)
    qkv.heads(m)                                 # the table of `qkv heads`
    qkv.train("configs/sort.yaml", overrides={"train.steps": 200}, out="runs/sort")

Arrays are numpy arrays over qkv's own buffers (no copy). The GIL is released while a model runs
and while training, and taken back only to call your hooks and callbacks. The module leaves the
interpreter's process as it found it: no signal handler (Ctrl-C stays Python's KeyboardInterrupt),
no environment change. docs/python.md is the guide.
"""

from ._qkv import ConfigError, Error, IoError, ShapeError, __version__
from .instruments import (HeadTable, ablate, analyze, attribute, evaluate, explain, fill, generate, head_similarity,
                          heads, logit_lens, patch, path_patch, swap)
from .metrics import Metric, logit_diff, loss
from .model import ActivationCache, Config, HookPoint, Model, load
from .runtime import info, num_threads, set_num_threads
from .training import train

__all__ = [
    "load", "Model", "Config", "ActivationCache", "HookPoint",
    "heads", "HeadTable", "head_similarity", "ablate", "swap", "evaluate", "explain", "fill", "generate", "patch",
    "analyze", "attribute", "path_patch", "logit_lens", "Metric", "logit_diff", "loss",
    "train", "info", "num_threads", "set_num_threads",
    "Error", "ConfigError", "IoError", "ShapeError", "__version__",
]
