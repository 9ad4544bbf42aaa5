"""The PyTorch bridge (docs/pytorch.md): qkv checkpoints as PyTorch models and back.

    qkv_torch.py   the command: check, export, import, import-mha
    qkv_mirror.py  qkv's models written in PyTorch (its names, layout, init and schedule)
    qkv_tasks.py   qkv's synthetic tasks, example for example
    text_corpus.py qkv's text pipeline: files, cleaning, vocabulary, split, windows

The modules import each other by name: put this directory on sys.path (the command does it
itself), or import it as a package (`from pytorch import qkv_mirror` with scripts/ on the path).
"""
