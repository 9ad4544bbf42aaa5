#!/usr/bin/python3
"""qkv view end to end: the studio's page, saved by the C++ command, checked as data, against the
command line's numbers, and in a real browser.

    test_qkv_view.py --qkv BUILD/qkv --workdir DIR

1. A tiny sort encoder trained with snapshots (and an encoder-decoder, 1b): `qkv view RUN/best.h5
   --out page.html` must be the studio's page (share/studio/, as scripts/studio_page.py writes it)
   with its data in <script id="qkv-data">: format and version, the model summary, per layer every
   head's float32 weights (rows summing to 1), equal to `qkv explain --json`'s weights of the same
   input; the head scores and labels equal to `qkv heads --json`'s; the run's snapshots and metrics;
   and it must pass tests/viewer/browser_test.py --expect-snapshots (the page's numbers are the
   data's). --no-snapshots leaves them out; snapshots of another model are refused.
2. A tiny character-level decoder trained on Chinese and English lines: `qkv view --text
   我爱吃苹果` must label the tokens with the characters, and pass --expect-cjk (CJK glyphs, not
   tofu, with fonts-wqy-microhei).
3. Bad input exits non-zero with the reason on stderr and writes no page.
Exit 0 when every check passed.
"""
import argparse
import base64
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
failures = []
sys.dont_write_bytecode = True
spec = importlib.util.spec_from_file_location("studio_page", ROOT / "scripts" / "studio_page.py")
studio_page = importlib.util.module_from_spec(spec)
spec.loader.exec_module(studio_page)


def check(what, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}{': ' + str(detail) if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def browser_result(res):
    """What a browser_test run said: its last line, and its stderr when it failed."""
    said = res.stdout.strip().splitlines()[-1:]
    if res.returncode != 0:
        said = [l for l in res.stdout.splitlines() if "FAIL" in l][:4] + said
        if res.stderr.strip():
            said.append("stderr: " + res.stderr.strip()[-3000:])
    return said


def run(args, want=0):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=900)
    if want is not None and r.returncode != want:
        print(f"command {' '.join(map(str, args))} exited {r.returncode}, expected {want}\n"
              f"stdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}", flush=True)
        sys.exit(1)
    return r


def page_data(path):
    """The JSON inside the page, and the page checked against scripts/studio_page.py's assembly."""
    text = Path(path).read_text(encoding="utf-8")
    a = text.index(studio_page.DATA_TAG) + len(studio_page.DATA_TAG)
    raw = text[a:text.index("</script>", a)]
    return json.loads(raw), text == studio_page.page(None, raw=raw)


def weights(layer, h):
    Tq, Tk = len(layer["query_tokens"]), len(layer["key_tokens"])
    return np.frombuffer(base64.b64decode(layer["weights"][h]), "<f4").reshape(Tq, Tk)


def check_layers(analysis):
    rows_ok, sizes_ok = True, True
    for layer in analysis["layers"]:
        tq, tk = len(layer["query_tokens"]), len(layer["key_tokens"])
        sizes_ok &= layer["encoding"] == "float32"
        for h in range(len(layer["weights"])):
            sizes_ok &= len(base64.b64decode(layer["weights"][h])) == 4 * tq * tk
            rows_ok &= bool(np.all(np.abs(weights(layer, h).astype(np.float64).sum(axis=1) - 1) < 1e-5))
    check("every head holds Tq*Tk float32 weights", sizes_ok)
    check("every weight row sums to 1", rows_ok)


def check_against_commands(qkv, ckpt, doc, input_args, query=0):
    """The page's weights are qkv explain's (the layer's own float32 weights, every head, one query);
    its head scores and labels are qkv heads'."""
    cli = json.loads(run([qkv, "explain", ckpt, *input_args, "--query", query, "--json"]).stdout)
    ok, n = True, 0
    for e in cli:
        w = weights(doc["analysis"]["layers"][e["layer_index"]], e["head"])[e["query"]]
        for k in e["keys"]:
            ok &= float(w[k["key"]]) == k["model_weight"]
            n += 1
    check("the page's weights are qkv explain --json's, to the bit", ok and n > 0, f"{len(cli)} heads, {n} weights")
    heads = json.loads(run([qkv, "heads", ckpt, "--json"]).stdout)
    page = doc["heads"]
    same = page is not None and [h["label"] for h in page["heads"]] == [h["label"] for h in heads["heads"]]
    check("the page's labels are qkv heads --json's", same,
          f"{[h['label'] for h in heads['heads']]}")
    check("the page's head scores are qkv heads --json's (the same object)", page == heads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True, type=Path)
    a = ap.parse_args()
    qkv, work = a.qkv, a.workdir
    shutil.rmtree(work, ignore_errors=True)  # qkv refuses to train into a directory holding a run
    work.mkdir(parents=True)
    browser = [sys.executable, str(HERE / "browser_test.py")]

    # 1. an encoder with snapshots
    run_dir = work / "sort"
    run([qkv, "train", ROOT / "configs" / "sort.yaml", "--out", run_dir, "--quiet", "--threads", "1",
         "--set", "train.steps=40", "--set", "schedule.warmup_steps=5", "--set", "train.eval_every=20",
         "--set", "train.snapshot_every=20", "--set", "task.eval_size=64"])
    page = work / "sort.html"
    r = run([qkv, "view", run_dir / "best.h5", "--out", page, "--example", "3"])
    check("qkv view names the page and the snapshots", "3 training snapshots" in r.stdout, r.stdout.strip())
    doc, same = page_data(page)
    check("the page is the studio's (share/studio/) with the data in its element, as studio_page.py writes it", same)
    check("no network: the page's policy allows none, and it loads nothing",
          "default-src 'none'" in page.read_text(encoding="utf-8") and 'src="/' not in page.read_text(encoding="utf-8")
          and 'href="/' not in page.read_text(encoding="utf-8"))
    check("format and version", doc.get("format") == "qkv-studio-page" and doc.get("version") == 1)
    summary = doc["models"]["models"][0]
    check("the model summary (as /api/models gives it)", summary["task"] == "sort" and summary["arch"] == "encoder"
          and summary["with_data"] and [l["name"] for l in summary["layers"]] == ["blocks.0.attn", "blocks.1.attn"],
          {k: summary[k] for k in ("task", "arch", "with_data")})
    check("the title names the example", doc["title"].endswith("held-out example 3"), doc["title"])
    check("the input is the example", doc["input"] == {"example": 3}, doc["input"])
    A = doc["analysis"]
    check("one entry per attention layer", [l["name"] for l in A["layers"]] == ["blocks.0.attn", "blocks.1.attn"])
    check("encoder layers are self-attention", all(l["kind"] == "self" for l in A["layers"]))
    check("the answer scores every position of the example", A["answer"]["kind"] == "labels" and A["scored"] == len(A["tokens"]),
          A["scored"])
    check_layers(A)
    check_against_commands(qkv, run_dir / "best.h5", doc, ["--example", 3], query=2)
    check("no induction score for a model that does not predict the next token",
          all(h["induction"] is None for h in doc["heads"]["heads"]))
    snaps = doc.get("snapshots") or []
    check("the run's snapshots are in the page, every step of one held-out example",
          [s["step"] for s in snaps] == [0, 20, 40] and all(s["example"] == 0 for s in snaps), [s["step"] for s in snaps])
    check("the run's metrics come along", doc["run"] and doc["run"]["metrics"] and
          "eval_loss" in doc["run"]["metrics"]["columns"])
    res = run(browser + [page, "--expect-snapshots"], want=None)
    check("the encoder page passes the browser test", res.returncode == 0, browser_result(res))
    bare = work / "bare.html"
    run([qkv, "view", run_dir / "best.h5", "--out", bare, "--no-snapshots"])
    check("--no-snapshots leaves them out", page_data(bare)[0]["snapshots"] is None)

    # 1b. an encoder-decoder: encoder self-attention, decoder causal self-attention, cross-attention
    s2s = work / "s2s"
    run([qkv, "train", ROOT / "configs" / "seq2seq_reverse.yaml", "--out", s2s, "--quiet", "--threads", "1",
         "--set", "train.steps=10", "--set", "schedule.warmup_steps=2", "--set", "train.eval_every=10",
         "--set", "train.snapshot_every=5", "--set", "task.eval_size=16"])
    s2s_page = work / "s2s.html"
    run([qkv, "view", s2s / "best.h5", "--out", s2s_page])
    d, _ = page_data(s2s_page)
    kinds = {l["name"]: l["kind"] for l in d["analysis"]["layers"]}
    check("encoder-decoder layers: self, causal and cross",
          kinds.get("encoder.blocks.0.attn") == "self" and kinds.get("decoder.blocks.0.self_attn") == "causal"
          and kinds.get("decoder.blocks.0.cross_attn") == "cross", kinds)
    cross = next(l for l in d["analysis"]["layers"] if l["kind"] == "cross")
    enc = next(l for l in d["analysis"]["layers"] if l["kind"] == "self")
    check("cross-attention: queries from the target (<bos> first), keys from the source",
          cross["query_tokens"][0] == "<bos>" and cross["key_tokens"] == enc["query_tokens"])
    check_layers(d["analysis"])
    res = run(browser + [s2s_page, "--expect-snapshots"], want=None)
    check("the encoder-decoder page passes the browser test", res.returncode == 0, browser_result(res))
    r = run([qkv, "view", run_dir / "best.h5", "--out", work / "never.html", "--snapshots", s2s / "snapshots.h5"],
            want=None)
    check("snapshots of another model are refused, named", r.returncode != 0 and "another model" in r.stderr
          and not (work / "never.html").exists(), r.stderr.strip()[:200])

    # 2. Chinese text
    corpus = work / "zh.txt"
    corpus.write_text("".join(f"我爱吃苹果。猫喜欢追逐老鼠。the cat chases the mouse {i % 10}.\n" for i in range(300)),
                      encoding="utf-8")
    config = work / "zh.yaml"
    config.write_text("model: {arch: decoder, d_model: 32, heads: 2, layers: 2, d_ff: 64, positional: rope}\n"
                      f"task: {{name: text, path: {corpus}, length: 32, eval_size: 16}}\n"
                      "optimizer: {lr: 0.003}\nschedule: {warmup_steps: 5}\n"
                      "train: {steps: 30, batch_size: 16, eval_every: 30, threads: 1}\n"
                      f"run: {{out: {work / 'zh'}}}\n", encoding="utf-8")
    run([qkv, "train", config, "--quiet"])
    zh_page = work / "zh.html"
    run([qkv, "view", work / "zh" / "last.h5", "--text", "我爱吃苹果", "--out", zh_page])
    zh, _ = page_data(zh_page)
    layers = zh["analysis"]["layers"]
    check("the tokens are the characters of the text", layers[0]["query_tokens"] == list("我爱吃苹果"),
          layers[0]["query_tokens"])
    check("the input is the text", zh["input"].get("text") == "我爱吃苹果", zh["input"])
    check("decoder layers are causal", all(l["kind"] == "causal" for l in layers))
    check_layers(zh["analysis"])
    w = weights(layers[0], 0)
    check("causal: no weight on a later key", all(w[i, j] == 0 for i in range(5) for j in range(i + 1, 5)))
    check("a text model whose corpus is here gets its head labels", zh["heads"] is not None, zh["heads_note"])
    check_against_commands(qkv, work / "zh" / "last.h5", zh, ["--text", "我爱吃苹果"], query=2)
    res = run(browser + [zh_page, "--expect-cjk"], want=None)
    check("the Chinese page passes the browser test with CJK glyphs", res.returncode == 0,
          browser_result(res))

    # 3. bad input
    for args, want, needle in [
        (["--text", "我爱吃香蕉"], 2, "香"),                       # characters outside the vocabulary
        (["--text", "我" * 40], 2, "32"),                          # longer than the context
        (["--example", "99999"], 2, "99999"),
        (["--text", "我", "--snapshots", str(work / "missing.h5")], 1, "missing.h5"),
    ]:
        out = work / "never.html"
        r = run([qkv, "view", work / "zh" / "last.h5", "--out", out] + args, want=None)
        check(f"qkv view {' '.join(args)[:40]} exits {want} naming the problem",
              r.returncode == want and needle in r.stderr and not out.exists(), r.stderr.strip()[:200])
    r = run([qkv, "view", work / "zh" / "last.h5", "--text", "我", "--out", work / "no" / "dir" / "p.html"],
            want=None)
    check("an unwritable page path exits 1 naming it", r.returncode == 1 and "p.html" in r.stderr, r.stderr.strip())

    print(f"test_qkv_view: {'PASS' if not failures else 'FAIL: ' + '; '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
