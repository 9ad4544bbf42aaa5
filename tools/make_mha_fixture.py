#!/usr/bin/python3
"""Write tests/fixtures/mha_torch.txt: torch.nn.MultiheadAttention(batch_first=True) cases that the
C++ test tests/nn/test_mha_parity.cpp replays through qkv::nn::MultiHeadAttention.

Run with /usr/bin/python3 (torch 1.13). The test suite only reads the text file.

Format: one tensor per line, "<name> <ndim> <dims...> <values...>" (row-major, float64 printed in
Python's shortest round-trip repr; boolean masks as 0/1). Names are "<case>.<tensor>". Lines starting
with '#' are comments.

Cases (float64, eval mode, dropout 0):
  self:  E=8, H=2, B=2, T=5, key_padding_mask (true = ignore) -> out, weights_avg, weights (per head)
  selfm: the same module and input with a boolean attn_mask (T, T) in PyTorch polarity (true = may
         NOT attend) -> out
  cross: E=6, H=3, kdim=4, vdim=5, B=2, Tq=3, Tk=4, key_padding_mask -> out, weights_avg
"""
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "mha_torch.txt")


def emit(lines, name, t):
    t = t.detach()
    if t.dtype == torch.bool:
        t = t.to(torch.float64)
    vals = " ".join(repr(float(x)) if float(x) != int(x) else str(int(x)) for x in t.reshape(-1).tolist())
    lines.append(f"{name} {t.dim()} {' '.join(str(d) for d in t.shape)} {vals}")


def emit_params(lines, case, mha):
    if mha._qkv_same_embed_dim:
        emit(lines, f"{case}.in_proj_weight", mha.in_proj_weight)
    else:
        emit(lines, f"{case}.q_proj_weight", mha.q_proj_weight)
        emit(lines, f"{case}.k_proj_weight", mha.k_proj_weight)
        emit(lines, f"{case}.v_proj_weight", mha.v_proj_weight)
    emit(lines, f"{case}.in_proj_bias", mha.in_proj_bias)
    emit(lines, f"{case}.out_proj_weight", mha.out_proj.weight)
    emit(lines, f"{case}.out_proj_bias", mha.out_proj.bias)


def main():
    torch.manual_seed(1234)
    lines = [f"# torch {torch.__version__}: torch.nn.MultiheadAttention(batch_first=True), float64; "
             "see tools/make_mha_fixture.py"]

    # (a) self attention with key padding.
    E, H, B, T = 8, 2, 2, 5
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).double().eval()
    with torch.no_grad():  # nonzero biases, so the mapping of biases is tested too
        mha.in_proj_bias.uniform_(-0.5, 0.5)
        mha.out_proj.bias.uniform_(-0.5, 0.5)
    x = torch.randn(B, T, E, dtype=torch.float64)
    kpm = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])
    out, w_avg = mha(x, x, x, key_padding_mask=kpm, need_weights=True, average_attn_weights=True)
    _, w = mha(x, x, x, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
    emit_params(lines, "self", mha)
    for name, t in [("x", x), ("key_padding_mask", kpm), ("out", out), ("weights_avg", w_avg), ("weights", w)]:
        emit(lines, f"self.{name}", t)

    # (a') same module, boolean attn_mask in PyTorch polarity (true = not allowed).
    attn_mask = torch.rand(T, T) < 0.4
    attn_mask.fill_diagonal_(False)  # every query keeps at least one key
    out_m, _ = mha(x, x, x, attn_mask=attn_mask, need_weights=False)
    emit(lines, "selfm.attn_mask", attn_mask)
    emit(lines, "selfm.out", out_m)

    # (b) cross attention with kdim, vdim != embed_dim.
    E, H, kdim, vdim, B, Tq, Tk = 6, 3, 4, 5, 2, 3, 4
    mha = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, batch_first=True).double().eval()
    with torch.no_grad():
        mha.in_proj_bias.uniform_(-0.5, 0.5)
        mha.out_proj.bias.uniform_(-0.5, 0.5)
    q = torch.randn(B, Tq, E, dtype=torch.float64)
    k = torch.randn(B, Tk, kdim, dtype=torch.float64)
    v = torch.randn(B, Tk, vdim, dtype=torch.float64)
    kpm = torch.tensor([[False, False, True, False], [False, False, False, False]])
    out, w_avg = mha(q, k, v, key_padding_mask=kpm, need_weights=True, average_attn_weights=True)
    emit_params(lines, "cross", mha)
    for name, t in [("q", q), ("k", k), ("v", v), ("key_padding_mask", kpm), ("out", out), ("weights_avg", w_avg)]:
        emit(lines, f"cross.{name}", t)

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
