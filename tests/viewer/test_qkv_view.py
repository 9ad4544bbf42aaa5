#!/usr/bin/python3
"""qkv view end to end: pages written by the C++ command, checked as data and in a real browser.

    test_qkv_view.py --qkv BUILD/qkv --workdir DIR

1. A tiny sort encoder trained with snapshots (and an encoder-decoder, 1b): `qkv view RUN/best.h5 --out page.html` must be
   the compiled-in template (share/viewer/viewer.html) with its placeholder replaced by JSON
   that follows docs/viewer.md (format, version, Tq*Tk weight bytes per head, rows summing to
   255 up to rounding, the run's snapshots), and must pass tests/viewer/browser_test.py
   --expect-snapshots; --no-snapshots leaves them out.
2. A tiny character-level decoder trained on Chinese and English lines: `qkv view --text
   我爱吃苹果` must label the tokens with the characters, and pass --expect-cjk (CJK glyphs, not
   tofu, with fonts-wqy-microhei).
3. Bad input exits non-zero with the reason on stderr and writes no page.
Exit 0 when every check passed.
"""
import argparse
import csv
import base64
import json
import subprocess
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PLACEHOLDER = "/*QKV_DATA*/"
failures = []


def check(what, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}{': ' + str(detail) if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def browser_result(res):
    """What a browser_test run said: its last line, and its stderr when it failed."""
    said = res.stdout.strip().splitlines()[-1:]
    if res.returncode != 0 and res.stderr.strip():
        said.append("stderr: " + res.stderr.strip()[-3000:])
    return said


def run(args, want=0):
    r = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if want is not None and r.returncode != want:
        print(f"command {' '.join(map(str, args))} exited {r.returncode}, expected {want}\n"
              f"stdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}", flush=True)
        sys.exit(1)
    return r


def page_data(path):
    """The JSON inside the page, and the page with it put back to the placeholder."""
    text = Path(path).read_text(encoding="utf-8")
    start_tag = '<script id="qkv-data" type="application/json">'
    a = text.index(start_tag) + len(start_tag)
    b = text.index("</script>", a)
    return json.loads(text[a:b]), text[:a] + PLACEHOLDER + text[b:]


def check_layers(doc):
    rows_ok, sizes_ok = True, True
    for layer in doc["layers"]:
        tq, tk = len(layer["query_tokens"]), len(layer["key_tokens"])
        for head in layer["heads"]:
            w = base64.b64decode(head["weights"])
            sizes_ok &= len(w) == tq * tk
            for i in range(tq):  # each byte is round(255 w): a row sums to 255 within Tk / 2
                rows_ok &= abs(sum(w[i * tk:(i + 1) * tk]) - 255) <= tk / 2
    check("every head holds Tq*Tk weight bytes", sizes_ok)
    check("every weight row sums to 255 up to rounding", rows_ok)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True, type=Path)
    a = ap.parse_args()
    qkv, work = a.qkv, a.workdir
    shutil.rmtree(work, ignore_errors=True)  # qkv refuses to train into a directory holding a run
    work.mkdir(parents=True)
    template = (ROOT / "share" / "viewer" / "viewer.html").read_text(encoding="utf-8")
    browser = [sys.executable, str(HERE / "browser_test.py")]

    # 1. an encoder with snapshots
    run_dir = work / "sort"
    run([qkv, "train", str(ROOT / "configs" / "sort.yaml"), "--out", str(run_dir), "--quiet", "--threads", "1",
         "--set", "train.steps=40", "--set", "schedule.warmup_steps=5", "--set", "train.eval_every=20",
         "--set", "train.snapshot_every=20", "--set", "task.eval_size=64"])
    page = work / "sort.html"
    r = run([qkv, "view", str(run_dir / "best.h5"), "--out", str(page), "--example", "3"])
    check("qkv view names the page and the snapshots", "3 training snapshots" in r.stdout, r.stdout.strip())
    doc, rest = page_data(page)
    check("the page is the template with the data in its placeholder", rest == template)
    check("format and version", doc.get("format") == "qkv-viewer" and doc.get("version") == 1)
    check("the model summary", doc["model"] == {"arch": "encoder", "d_model": 64, "layers": 2, "heads": 4,
                                                "head_dim": 16}, doc["model"])
    check("the title names the example", doc["title"].endswith("held-out example 3"), doc["title"])
    check("one entry per attention layer", [l["name"] for l in doc["layers"]] == ["blocks.0.attn", "blocks.1.attn"])
    check("encoder layers are self-attention", all(l["kind"] == "self" for l in doc["layers"]))
    check_layers(doc)
    snaps = doc.get("snapshots", {})
    check("the run's snapshots are in the page", snaps.get("steps") == [0, 20, 40], snaps.get("steps"))
    check("each snapshot head has one weight string per step",
          all(len(h["weights"]) == 3 for l in snaps.get("layers", []) for h in l["heads"]))
    res = run(browser + [str(page), "--expect-snapshots"], want=None)
    check("the encoder page passes the browser test", res.returncode == 0, browser_result(res))
    # The page and `qkv heads` show the same labels and scores (both on the first 64 test examples).
    heads_csv = work / "sort_heads.csv"
    run([qkv, "heads", str(run_dir / "best.h5"), "--csv", str(heads_csv)])
    with open(heads_csv, newline="") as f:
        table = [r for r in csv.DictReader(f) if r["layer"] != "baseline"]
    shown = [(l["name"], h.get("label", ""), round(h["scores"].get("entropy", -1), 6))
             for l in doc["layers"] for h in l["heads"]]
    listed = [(r["layer"], r["label"], round(float(r["entropy"]), 6)) for r in table]
    check("the page's labels and entropies are those of qkv heads", shown == listed, f"{shown} vs {listed}")
    check("no induction score for a model that does not predict the next token",
          all("induction" not in h["scores"] for l in doc["layers"] for h in l["heads"]))
    bare = work / "bare.html"
    run([qkv, "view", str(run_dir / "best.h5"), "--out", str(bare), "--no-snapshots"])
    check("--no-snapshots leaves them out", "snapshots" not in page_data(bare)[0])

    # 1b. an encoder-decoder: encoder self-attention, decoder causal self-attention, cross-attention
    s2s = work / "s2s"
    run([qkv, "train", str(ROOT / "configs" / "seq2seq_reverse.yaml"), "--out", str(s2s), "--quiet", "--threads", "1",
         "--set", "train.steps=10", "--set", "schedule.warmup_steps=2", "--set", "train.eval_every=10",
         "--set", "train.snapshot_every=5", "--set", "task.eval_size=16"])
    s2s_page = work / "s2s.html"
    run([qkv, "view", str(s2s / "best.h5"), "--out", str(s2s_page)])
    d, _ = page_data(s2s_page)
    kinds = {l["name"]: l["kind"] for l in d["layers"]}
    check("encoder-decoder layers: self, causal and cross",
          kinds.get("encoder.blocks.0.attn") == "self" and kinds.get("decoder.blocks.0.self_attn") == "causal"
          and kinds.get("decoder.blocks.0.cross_attn") == "cross", kinds)
    cross = next(l for l in d["layers"] if l["kind"] == "cross")
    enc = next(l for l in d["layers"] if l["kind"] == "self")
    check("cross-attention: queries from the target (<bos> first), keys from the source",
          cross["query_tokens"][0] == "<bos>" and cross["key_tokens"] == enc["query_tokens"])
    check_layers(d)
    res = run(browser + [str(s2s_page), "--expect-snapshots"], want=None)
    check("the encoder-decoder page passes the browser test", res.returncode == 0, browser_result(res))

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
    run([qkv, "train", str(config), "--quiet"])
    zh_page = work / "zh.html"
    run([qkv, "view", str(work / "zh" / "last.h5"), "--text", "我爱吃苹果", "--out", str(zh_page)])
    zh, _ = page_data(zh_page)
    check("the tokens are the characters of the text", zh["layers"][0]["query_tokens"] == list("我爱吃苹果"),
          zh["layers"][0]["query_tokens"])
    check("decoder layers are causal", all(l["kind"] == "causal" for l in zh["layers"]))
    check_layers(zh)
    w = base64.b64decode(zh["layers"][0]["heads"][0]["weights"])
    check("causal: no weight on a later key", all(w[i * 5 + j] == 0 for i in range(5) for j in range(i + 1, 5)))
    res = run(browser + [str(zh_page), "--expect-cjk"], want=None)
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
        r = run([qkv, "view", str(work / "zh" / "last.h5"), "--out", str(out)] + args, want=None)
        check(f"qkv view {' '.join(args)[:40]} exits {want} naming the problem",
              r.returncode == want and needle in r.stderr and not out.exists(), r.stderr.strip()[:200])
    r = run([qkv, "view", str(work / "zh" / "last.h5"), "--text", "我", "--out", str(work / "no" / "dir" / "p.html")],
            want=None)
    check("an unwritable page path exits 1 naming it", r.returncode == 1 and "p.html" in r.stderr, r.stderr.strip())

    print(f"test_qkv_view: {'PASS' if not failures else 'FAIL: ' + '; '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
