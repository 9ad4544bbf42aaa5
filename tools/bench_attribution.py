#!/usr/bin/python3
"""How well the gradient estimates find what activation patching finds, and what they cost.

    tools/bench_attribution.py --induction CKPT --grammar CKPT --text CKPT [--pairs 40] [--steps 5,20]
                               [--out bench/results/DATE-CPU-attribution.md]
    tools/bench_attribution.py --train DIR [...]   train the three models first (configs/induction.yaml,
                                                   configs/grammar_zh.yaml, configs/zh.yaml, as shipped)

For each model, `--pairs` clean/corrupted pairs from its test split: the clean row as it is, the
corrupted row with one token before the measured position replaced by another (induction: the
earlier occurrence of the query's token, which the previous-token head reads and the induction head
matches, so the whole circuit must carry the answer; grammar and text: a token chosen at random
among the earlier ones). The position is the first mask (masked models) or the last scored
position (decoders); answer is the clean run's most likely token, wrong the corrupted run's (the
clean run's second when they agree); pairs whose logit difference moves by less than 0.5 are
skipped.

For each pair: activation patching of every head's output (qkv.patch, the reference) and the
estimates of qkv.attribute: attribution patching (EAP's node scores are the same numbers) and EAP-IG
with each of `--steps`.
Reported per model and method: Pearson's r between the estimate and activation patching over all
(pair, head) scores pooled, its 95% bootstrap interval over pairs, the median per-pair r, the
head that activation patching ranks first found first (top-1 agreement), and the cost in forward
and backward passes and in CPU time of the calling thread (median per pair, 1 thread).

The studio's latency: EAP-IG (5 steps) of every head on a 64-token row of the text model through
`qkv serve --threads 1`, the server's own "ms" (median of 20 requests), against the 50 ms target.
"""
import argparse
import datetime
import http.client
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import machine  # noqa: E402


def thread_seconds():
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


def pairs_of(m, kind, n, rng):
    """(clean ids, corrupted ids, position) candidate pairs from the first 8 n rows of the test split."""
    batch = m.held_out("test", 8 * n)
    out = []
    for i in range(batch["inputs"].shape[0]):
        ids, targets = batch["inputs"][i].tolist(), batch["targets"][i]
        scored = np.nonzero(targets >= 0)[0]
        if len(scored) == 0:
            continue
        if m.mask_token >= 0:
            masks = [t for t, x in enumerate(ids) if x == m.mask_token]
            if not masks:
                continue
            p = masks[0]
        else:
            p = int(scored[-1])
            ids = ids[:p + 1]  # the row up to the measured position: its next token is the answer
        if kind == "induction":
            # The earlier occurrence of the query's token: the previous-token head reads it at the
            # position after it, whose token is the answer; the induction head finds it by that.
            earlier = [t for t in range(p) if ids[t] == ids[p]]
            if not earlier or earlier[-1] + 1 >= p:
                continue
            at = earlier[-1]
        else:
            # an encoder reads both sides of p, a decoder the tokens before it
            span = range(len(ids)) if m.mask_token >= 0 else range(p)
            choices = [t for t in span if t != p and ids[t] != m.mask_token and ids[t] < m.num_classes]
            if not choices:
                continue
            at = int(rng.choice(choices))
        corrupt = list(ids)
        while corrupt[at] == ids[at] or corrupt[at] == m.mask_token:
            corrupt[at] = int(rng.integers(0, m.vocab_size))
        out.append((ids, corrupt, p))
    return out


def pearson(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def bench_model(qkv, name, path, kind, n, steps, rng):
    m = qkv.load(path)
    # EAP's node scores are attribution patching's (its edges differ): one row for both.
    methods = ["attribution"] + [f"eap-ig {k}" for k in steps]
    rows = {k: [] for k in ["patch"] + methods}
    cost = {k: [] for k in rows}
    passes = {}
    used = 0
    for clean, corrupt, p in pairs_of(m, kind, n, rng):
        # answer: the clean run's most likely token; wrong: the corrupted run's, or when they agree
        # the clean run's second; a pair whose metric barely moves (< 0.5) is skipped.
        zc, zx = m(clean)[0, p], m(corrupt)[0, p]
        answer = int(np.argmax(zc))
        wrong = int(np.argmax(zx)) if int(np.argmax(zx)) != answer else int(np.argsort(zc)[-2])
        if abs((zc[answer] - zc[wrong]) - (zx[answer] - zx[wrong])) < 0.5:
            continue
        if used == n:
            break
        t0 = thread_seconds()
        ref = qkv.patch(m, clean, corrupt, position=p, answer=answer, wrong=wrong)
        cost["patch"].append(thread_seconds() - t0)
        used += 1
        rows["patch"].append(ref["scores"].ravel())
        passes["patch"] = (2 + ref["scores"].size, 0)
        for method in methods:
            kind_, k = (method.split(" ") + ["1"])[:2]
            t0 = thread_seconds()
            r = qkv.attribute(m, clean, corrupt, method=kind_, steps=int(k), position=p, answer=answer, wrong=wrong)
            cost[method].append(thread_seconds() - t0)
            rows[method].append(r["heads"].ravel())
            passes[method] = (r["forward_passes"], r["backward_passes"])
    ref = np.array(rows["patch"])
    out = []
    for method in methods:
        est = np.array(rows[method])
        pooled = pearson(est.ravel(), ref.ravel())
        boots = []
        for _ in range(1000):
            idx = rng.integers(0, len(ref), len(ref))
            boots.append(pearson(est[idx].ravel(), ref[idx].ravel()))
        lo, hi = np.nanpercentile(boots, [2.5, 97.5])
        per_pair = np.nanmedian([pearson(e, r) for e, r in zip(est, ref)])
        top1 = np.mean([np.argmax(e) == np.argmax(r) for e, r in zip(est, ref)])
        out.append({"model": name, "method": method, "pairs": used, "heads": ref.shape[1], "r": pooled, "lo": lo,
                    "hi": hi, "per_pair": per_pair, "top1": top1, "passes": passes[method],
                    "ms": 1e3 * float(np.median(cost[method])), "patch_passes": passes["patch"],
                    "patch_ms": 1e3 * float(np.median(cost["patch"]))})
    return out


def studio_latency(qkv_bin, path, repeats):
    import qkv
    m = qkv.load(path)
    row = m.held_out("test", 1)["inputs"][0].tolist()
    T = min(64, len(row))
    clean = row[:T]
    corrupt = list(clean)
    corrupt[T // 2] = (corrupt[T // 2] + 1) % m.vocab_size
    proc = subprocess.Popen([qkv_bin, "serve", path, "--port", "0", "--threads", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().split("http://", 1)[1].split()[0].rstrip("/")
        host = url
        ms = []
        body = json.dumps({"clean": {"ids": clean}, "corrupt": {"ids": corrupt}, "answer": 1, "wrong": 2,
                           "method": "eap-ig"})
        for _ in range(repeats + 2):
            c = http.client.HTTPConnection(host, timeout=120)
            c.request("POST", "/api/attribute", body, {"Content-Type": "application/json", "Host": host})
            reply = json.loads(c.getresponse().read().decode())
            ms.append(reply["ms"])
        return T, float(np.median(ms[2:])), float(np.min(ms[2:]))
    finally:
        proc.terminate()
        proc.wait()


def train(qkv_bin, directory):
    paths = {}
    for name, config in (("induction", "induction.yaml"), ("grammar", "grammar_zh.yaml"), ("text", "zh.yaml")):
        out = os.path.join(directory, name)
        if not os.path.exists(os.path.join(out, "best.h5")):
            subprocess.run([qkv_bin, "train", os.path.join(ROOT, "configs", config), "--out", out, "--quiet"], check=True)
        paths[name] = os.path.join(out, "best.h5")
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default=os.path.join(ROOT, "build", "qkv"))
    ap.add_argument("--induction")
    ap.add_argument("--grammar")
    ap.add_argument("--text")
    ap.add_argument("--train", help="train the three shipped configs into this directory first (when missing)")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--steps", default="5,20", help="EAP-IG's steps, one row each (default 5,20)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    machine.restart_with_blas_env("QKV_BENCH_ATTRIBUTION")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(a.qkv)), "python"))
    import qkv
    qkv.set_num_threads(1)
    paths = train(a.qkv, a.train) if a.train else {}
    for name in ("induction", "grammar", "text"):
        if getattr(a, name):
            paths[name] = getattr(a, name)
    rng = np.random.default_rng(a.seed)
    rows = []
    for name in ("induction", "grammar", "text"):
        if name in paths:
            rows += bench_model(qkv, name, paths[name], name, a.pairs, [int(x) for x in a.steps.split(",")], rng)
    info = subprocess.run([a.qkv, "info"], capture_output=True, text=True).stdout.splitlines()
    cpu = next((x.strip() for x in info if x.strip().startswith("CPU:")), "CPU: " + machine.cpu_info()[0])
    lines = [f"# Attribution against activation patching ({datetime.date.today()})", "",
             f"{cpu}; 1 thread; `tools/bench_attribution.py --pairs {a.pairs} --steps {a.steps} --seed {a.seed}`.", "",
             "| model | method | pairs x heads | r with activation patching [95% CI] | median per-pair r | top-1 agrees | "
             "passes (fwd / bwd) | ms per pair | activation patching: passes, ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['method']} | {r['pairs']} x {r['heads']} | {r['r']:.3f} [{r['lo']:.3f}, "
                     f"{r['hi']:.3f}] | {r['per_pair']:.3f} | {100 * r['top1']:.0f}% | {r['passes'][0]} / "
                     f"{r['passes'][1]} | {r['ms']:.1f} | {r['patch_passes'][0]}, {r['patch_ms']:.1f} |")
    if "text" in paths:
        T, median, best = studio_latency(a.qkv, paths["text"], a.repeats)
        lines += ["", f"Studio: EAP-IG (5 steps) of every head on a {T}-token row of the text model, "
                      f"`qkv serve --threads 1`, the server's own time: median {median:.1f} ms, best {best:.1f} ms "
                      f"over {a.repeats} requests (target: under 50 ms)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
