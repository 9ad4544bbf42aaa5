#!/usr/bin/python3
"""The walk of docs/python.md, run: train the small Chinese masked model, look at 我爱吃苹果 from
Python, and draw the figures the page shows (docs/images/python_*.png).

    tools/python_walk.py [--qkv build/qkv] [--checkpoint CKPT] [--images docs/images] [--run DIR]

Without --checkpoint it trains configs/grammar_zh.yaml for 600 steps (warm-up 20) into --run
(default runs/grammar_zh_walk) with qkv.train. Prints every number the page quotes. It restarts
itself with the OpenBLAS kernel and OMP_WAIT_POLICY the qkv command would use (tools/machine.py).
Needs /usr/bin/python3 with numpy and matplotlib, and the WenQuanYi font for the Chinese labels
(fonts-wqy-microhei).
"""
import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SENTENCE = "我爱吃苹果"


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qkv", default=str(ROOT / "build" / "qkv"), help="the qkv command (its build holds the module)")
    p.add_argument("--checkpoint", help="a grammar_zh checkpoint (default: train one)")
    p.add_argument("--images", default=str(ROOT / "docs" / "images"))
    p.add_argument("--run", default=str(ROOT / "runs" / "grammar_zh_walk"))
    return p.parse_args(argv)


def main(argv):
    a = parse(argv)
    sys.path.insert(0, str(ROOT / "tools"))
    import machine
    machine.restart_with_blas_env("QKV_PYTHON_WALK_RESTARTED")  # the command's kernel, passive waiting
    sys.path.insert(0, str(pathlib.Path(a.qkv).resolve().parent / "python"))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager
    import numpy as np
    import qkv

    if any("WenQuanYi" in f.name for f in font_manager.fontManager.ttflist):
        plt.rcParams["font.sans-serif"] = ["WenQuanYi Micro Hei", "DejaVu Sans"]
    else:
        print("warning: no WenQuanYi font (apt-get install fonts-wqy-microhei): Chinese labels will not show")
    print(qkv.info()["blas"])

    # 1. A model.
    checkpoint = a.checkpoint
    if not checkpoint:
        r = qkv.train(ROOT / "configs/grammar_zh.yaml", overrides={"train.steps": 600, "schedule.warmup_steps": 20},
                      out=a.run, overwrite=True)
        print(f"trained: {r['stop_reason']} after {r['step']} steps, {r['wall_seconds']:.1f} s; best masked accuracy "
              f"{100 * r['best']['token_accuracy']:.2f}%")
        checkpoint = r["best_checkpoint"]
    m = qkv.load(checkpoint)
    print(m)

    # 2. The cache of 我爱吃苹果.
    tokens = m.to_str_tokens(SENTENCE)
    logits, cache = m.run_with_cache(SENTENCE)
    print("tokens:", tokens)
    print("logits:", logits.shape, "cache:", len(cache), "arrays,", cache.nbytes, "bytes")
    print("pattern shape:", cache["pattern", 0].shape)
    L, H = len(m.attention_layers), m.attention_layers[0]["heads"]
    eat = tokens.index("吃")
    fig, axes = plt.subplots(L, H, figsize=(2.1 * H, 2.1 * L), squeeze=False)
    for layer in range(L):
        w = cache["pattern", layer][0]
        for head in range(H):
            ax = axes[layer][head]
            ax.imshow(w[head], cmap="Blues", vmin=0, vmax=1)
            ax.set_xticks(range(len(tokens)), tokens, fontsize=8)
            ax.set_yticks(range(len(tokens)), tokens, fontsize=8)
            ax.set_title(f"{layer}.{head}", fontsize=9)
            ax.add_patch(plt.Rectangle((-0.5, eat - 0.5), len(tokens), 1, fill=False, ec="tab:red", lw=1))
    fig.suptitle(f"{SENTENCE}: every head's weights (rows: queries; the row of 吃 outlined)", fontsize=10)
    fig.tight_layout()
    out = pathlib.Path(a.images)
    fig.savefig(out / "python_patterns.png", dpi=80)
    plt.close(fig)

    print(f"where 吃 (query {eat}) looks, per head (weights on 苹 and 果):")
    best = None
    for layer in range(L):
        w = cache["pattern", layer][0, :, eat]
        for head in range(H):
            apple = w[head, tokens.index("苹")] + w[head, tokens.index("果")]
            print(f"  {layer}.{head}: top key {tokens[int(w[head].argmax())]} {w[head].max():.3f}, 苹+果 {apple:.3f}")
            if best is None or apple > best[0]:
                best = (apple, layer, head)
    print(f"the head that puts most weight from 吃 on 苹果: {best[1]}.{best[2]} ({best[0]:.3f})")

    # 3. Fill, ablate, patch.
    for text in ("我爱吃[MASK]果", "我爱[MASK]苹果", "我爱[MASK]牛奶"):
        f = qkv.fill(m, text, k=3)
        print(f"fill {text}:", [(t, round(p, 3)) for t, _, p in f[0]["top"]])
    table = qkv.heads(m)
    roles = table.array("verb->object")
    best_role = np.unravel_index(np.nanargmax(roles), roles.shape)
    print("verb->object role score per head (rows: layers):")
    for layer in range(L):
        print("  layer", layer, " ".join(f"{s:.3f}" for s in roles[layer]))
    base = table.baselines["verb->object"]
    print(f"best: {best_role[0]}.{best_role[1]} ({roles[best_role]:.3f}, label "
          f"{table[best_role[0] * H + best_role[1]]['label']!r}); best fixed offset {base['offset']:+d}: "
          f"{base['share']:.3f} of {base['count']} tokens")
    ablation = qkv.ablate(m)
    print(f"intact: loss {ablation['intact']['loss']:.4f}, accuracy {100 * ablation['intact']['token_accuracy']:.2f}%")
    change = np.zeros((L, H))
    for row in ablation["each"]:
        change[row["layer"], row["head"]] = row["loss_change"]
    worst = np.unravel_index(change.argmax(), change.shape)
    print(f"most harmful to remove: {worst[0]}.{worst[1]} (+{change[worst]:.4f} loss)")

    def zero_head(z, hook):
        z = z.copy()
        z[:, worst[1]] = 0
        return z

    hooked = m.evaluate(fwd_hooks=[(f"blocks.{worst[0]}.attn.hook_z", zero_head)])
    print(f"the same with a Python hook: loss {hooked['loss']:.4f}")
    with m.hooks(fwd_hooks=[(f"blocks.{worst[0]}.attn.hook_z", zero_head)]):
        print(f"the same inside m.hooks(): loss {m.evaluate()['loss']!r}")
    print(f"after it: loss {m.evaluate()['loss']!r}")
    patch = qkv.patch(m, "我爱[MASK]苹果", "我爱[MASK]牛奶", answer="吃", wrong="喝")
    print(f"patch: logit(吃) - logit(喝) at the mask, clean {patch['clean']:.3f}, corrupt {patch['corrupt']:.3f}")
    for layer in range(L):
        print("  layer", layer, " ".join(f"{s:+.3f}" for s in patch["scores"][layer]))

    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 2.8))
    for ax, data, title, cmap in (
            (left, change, "loss change, each head removed (zero ablation)", "Reds"),
            (right, patch["scores"], "patching hook_z: 我爱[MASK]牛奶 <- 我爱[MASK]苹果\nshare of logit(吃) - logit(喝) restored",
             "RdBu")):
        lim = np.abs(data).max() or 1
        im = ax.imshow(data, cmap=cmap, vmin=0 if cmap == "Reds" else -lim, vmax=lim)
        ax.set_xticks(range(H), [f"head {h}" for h in range(H)], fontsize=8)
        ax.set_yticks(range(L), [f"layer {l}" for l in range(L)], fontsize=8)
        for (i, j), v in np.ndenumerate(data):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if abs(v) > 0.6 * lim else "black")
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(out / "python_heads.png", dpi=80)
    plt.close(fig)
    print("wrote", out / "python_patterns.png", "and", out / "python_heads.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
