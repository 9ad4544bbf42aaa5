#!/usr/bin/python3
"""Write tests/fixtures/torch_import/: a checkpoint written by scripts/pytorch/qkv_torch.py from PyTorch,
and the logits PyTorch computes with it, for the C++ suite (which has no torch).

    /usr/bin/python3 tools/make_torch_fixture.py [--out tests/fixtures/torch_import]

Deterministic (torch.manual_seed(0)); rerunning it rewrites the same files. What it does:
  1. builds the mirror (scripts/pytorch/qkv_mirror.py) of CONFIG below, an encoder of width 16, 2 heads,
     1 layer, vocabulary 8, and moves every parameter off its initial value (+0.1 N(0, 1));
  2. torch.save's {"config", "state_dict"} and runs `qkv_torch.py import` on it -> base.h5;
  3. builds a torch.nn.MultiheadAttention(16, 2, batch_first=True) with nonzero biases, saves
     the module, and runs `qkv_torch.py import-mha --layer blocks.0.attn` on it -> model.h5;
  4. computes, in float64, the logits of the first 4 held-out examples of the config (the tokens
     `qkv logits model.h5 --count 4` also prints) with the mirror whose blocks.0.attn is the
     torch module itself, and writes them to logits.txt.
docs/pytorch.md describes the files and what the C++ test compares.
"""
import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "pytorch"))
import qkv_tasks  # noqa: E402
import qkv_torch  # noqa: E402

# run.out: qkv validates it even when it only evaluates a checkpoint (its nearest existing
# ancestor must be a writable directory), so it names a directory under /tmp.
CONFIG = """\
# A model built in PyTorch by tools/make_torch_fixture.py (docs/pytorch.md)
seed: 1
model:
  arch: encoder
  d_model: 16
  heads: 2
  layers: 1
  d_ff: 32
task:
  name: sort
  vocab: 8
  length: 6
  eval_size: 4
run:
  out: /tmp/qkv-torch-fixture
"""
COUNT = 4


def make(out_dir):
    torch.manual_seed(0)
    model, *_ = qkv_torch.build(CONFIG)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.uniform_(-0.5, 0.5)
        mha.out_proj.bias.uniform_(-0.5, 0.5)
    mha.eval()

    os.makedirs(out_dir, exist_ok=True)
    ckpt = os.path.join(out_dir, "model.h5")
    with tempfile.TemporaryDirectory() as tmp:
        sd_path, mha_path, base = (os.path.join(tmp, n) for n in ("model.pt", "mha.pt", "base.h5"))
        torch.save({"config": CONFIG, "state_dict": model.state_dict()}, sd_path)
        torch.save(mha, mha_path)
        for argv in (["import", sd_path, base],
                     ["import-mha", mha_path, "--into", base, "--layer", "blocks.0.attn", "--out", ckpt]):
            if qkv_torch.main(argv) != 0:
                sys.exit(f"make_torch_fixture: qkv_torch.py {argv[0]} failed")

    task = qkv_tasks.make_task({"name": "sort", "vocab": 8, "length": 6})
    tokens = task.examples(qkv_tasks.eval_stream(1), 0, COUNT)["inputs"]
    qkv_torch.use_torch_mha(model, "blocks.0.attn", mha)
    with torch.no_grad():
        logits = model.double().eval()(torch.from_numpy(tokens)).numpy()
    qkv_torch.write_logits_file(os.path.join(out_dir, "logits.txt"), tokens, logits)
    return ckpt, logits.shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(qkv_torch.REPO, "tests", "fixtures", "torch_import"))
    a = ap.parse_args()
    ckpt, shape = make(a.out)
    print(f"wrote {ckpt} and logits.txt {shape} in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
