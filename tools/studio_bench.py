#!/usr/bin/python3
"""The studio's numbers (docs/studio.md, "Speed and memory"): a benchmark, not a timed test.

    tools/studio_bench.py --qkv build/qkv --workdir /tmp/studio-bench [--checkpoint CKPT] [--out FILE.md]

On a model of configs/zh.yaml's shape (3 layers, width 128, 4 heads, vocabulary of the corpus, about
5.4k characters; trained for a few steps unless --checkpoint is given) served by `qkv serve` at
1 thread, with a 64-token input:
  1. server: POST /api/analyze with a query (every head's weights, the answer, the explanation of
     one query), and the same with one head removed (a toggle), timed by the client on a kept-alive
     loopback connection and by the server (its "ms"); medians and the 90th percentile;
  2. page: headless Chromium, one keystroke at a time (Input.insertText, then Backspace) on a
     64-token input: from the keystroke's event time to the frame after the 12 heads are redrawn,
     as the page measures it, and as seen over the DevTools protocol;
  3. memory: the server's resident set after a warm-up of 500 requests and after 10,000 more
     (good and bad requests mixed).
Prints a Markdown report (its first line names the CPU from /proc/cpuinfo, as bench/results/README.md
asks) and writes it to --out.
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "studio"))
import studio_util as su  # noqa: E402

spec = importlib.util.spec_from_file_location("viewer_browser_test", ROOT / "tests" / "viewer" / "browser_test.py")
bt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bt)

CORPUS = "/usr/share/games/fortunes/chinese"


def cpu():
    info = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if ":" in line:
            k, v = (x.strip() for x in line.split(":", 1))
            info.setdefault(k, v)
    avx512 = "avx512f" in info.get("flags", "")
    return (f"{info.get('model name', platform.processor())} (family {info.get('cpu family', '?')}, model "
            f"{info.get('model', '?')}, {'AVX-512' if avx512 else 'no AVX-512'}), {os.cpu_count()} cores")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs):
    return f"median {statistics.median(xs):.1f}, p90 {pct(xs, 0.9):.1f}, max {max(xs):.1f} (n = {len(xs)})"


def text64(client):
    """64 characters the model reads: the first run of Chinese characters of the corpus that it
    takes whole (the corpus starts in the training split)."""
    chars = [c for c in Path(CORPUS).read_text(encoding="utf-8", errors="replace")[:20000] if "\u4e00" <= c <= "\u9fff"]
    for start in range(0, len(chars) - 64, 16):
        t = "".join(chars[start:start + 64])
        s, r, _ = client.post("/api/analyze", {"input": {"text": t}})
        if s == 200 and len(r["tokens"]) == 64:
            return t
    raise RuntimeError("no 64 characters of the corpus that the model reads")


def server_side(client, text, runs):
    q = {"layer": 2, "head": 0, "position": 63}
    full, full_srv, toggle, toggle_srv = [], [], [], []
    for i in range(runs + 20):
        t = time.perf_counter()
        s, r, _ = client.post("/api/analyze", {"input": {"text": text}, "query": q})
        dt = 1000 * (time.perf_counter() - t)
        assert s == 200, r
        if i >= 20:
            full.append(dt), full_srv.append(r["ms"])
        head = [[i % 3, (i // 3) % 4]]
        t = time.perf_counter()
        s, r, _ = client.post("/api/analyze", {"input": {"text": text}, "query": q, "ablate": {"heads": head}})
        dt = 1000 * (time.perf_counter() - t)
        assert s == 200, r
        if i >= 20:
            toggle.append(dt), toggle_srv.append(r["ms"])
    size = len(json.dumps(r))
    return full, full_srv, toggle, toggle_srv, size


def page_side(server, text, keys):
    browser = bt.start_browser("/usr/bin/chromium")
    page = bt.Page(browser)
    try:
        page.navigate(server.url + "/")
        page.wait_for("window.qkvStudio && qkvStudio.ready && qkvStudio.state().explain", 60)
        drawn = "(() => { const s = qkvStudio.state(); return s.drawnSeq === s.seq && !s.inflight; })()"
        page.eval(f"(() => {{ const e = document.getElementById('text'); e.focus(); e.value = {json.dumps(text[:63])};"
                  " e.dispatchEvent(new Event('input')); })()")
        page.wait_for(drawn, 30)
        page.eval("(() => { const e = document.getElementById('text'); e.setSelectionRange(63, 63); })()")
        heads = page.eval("document.querySelectorAll('#grid .cell canvas').length")
        inpage, cdp, sizes = [], [], []
        for i in range(keys):
            for step in ("type", "back"):
                t = time.perf_counter()
                if step == "type":
                    page.call("Input.insertText", {"text": text[63]})
                else:
                    for kind in ("rawKeyDown", "keyUp"):
                        page.call("Input.dispatchKeyEvent", {"type": kind, "key": "Backspace", "code": "Backspace",
                                                             "windowsVirtualKeyCode": 8, "nativeVirtualKeyCode": 8})
                page.wait_for(drawn, 30)
                cdp.append(1000 * (time.perf_counter() - t))
                st = page.eval("qkvStudio.state()")
                inpage.append(st["timings"]["latency"])
                sizes.append(len(st["tokens"]))
        # head toggles: the real mouse on each head's switch, twice (off, then on again)
        toggles = []
        for rep in range(2):
            for l in range(3):
                for h in range(4):
                    b = page.eval(f"qkvStudio.box(\"#grid .cell[data-layer='{l}'][data-head='{h}'] .sw\")")
                    seq = page.eval("qkvStudio.state().seq")
                    page.click(b["x"] + b["w"] / 2, b["y"] + b["h"] / 2)
                    page.wait_for(f"qkvStudio.state().seq > {seq} && {drawn}", 30)
                    toggles.append(page.eval("qkvStudio.state().timings.latency"))
        errors = page.page_errors()
        return inpage, cdp, heads, sorted(set(sizes)), errors, toggles
    finally:
        page.close()
        browser.close()


def memory(server, client, text, n):
    mix = [("POST", "/api/analyze", {"input": {"text": text}, "query": {"layer": 1, "head": 2, "position": 10}}),
           ("POST", "/api/analyze", {"input": {"text": text[:40]}, "ablate": {"heads": [[0, 1], [2, 3]]}}),
           ("POST", "/api/explain", {"input": {"text": text[:20]}, "query": {"layer": 0, "head": 0, "position": 5}}),
           ("POST", "/api/analyze", {"input": {"text": text + "猫"}}),           # too long: 400
           ("POST", "/api/analyze", {"input": {"text": "Ω"}, "x": 1}),            # unknown field: 400
           ("GET", "/api/models", None)]
    for i in range(500):
        m, p, b = mix[i % len(mix)]
        client.request(m, p, b)
    before = server.rss_kb()
    t = time.perf_counter()
    statuses = {}
    for i in range(n):
        m, p, b = mix[i % len(mix)]
        s = client.request(m, p, b)[0]
        statuses[s] = statuses.get(s, 0) + 1
    dt = time.perf_counter() - t
    return before, server.rss_kb(), statuses, dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True, type=Path)
    ap.add_argument("--checkpoint", type=Path, help="a zh.yaml-shaped checkpoint (default: train one for --steps)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--keys", type=int, default=30, help="keystroke pairs (type, Backspace) in the page")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    qkv = str(Path(a.qkv).resolve())
    a.workdir.mkdir(parents=True, exist_ok=True)
    ckpt = a.checkpoint
    if not ckpt:
        t = time.monotonic()
        ckpt = su.train(qkv, "zh.yaml", a.workdir / "zh", a.steps)
        print(f"trained configs/zh.yaml for {a.steps} steps in {time.monotonic() - t:.0f} s", flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    load0 = os.getloadavg()
    lines = [f"# {time.strftime('%Y-%m-%d', time.gmtime())}: the studio (qkv serve) on {cpu()}", "",
             f"CPU: {cpu()}. Code: {commit}. Command: `tools/studio_bench.py --qkv build/qkv` (checkpoint: "
             f"configs/zh.yaml, {'trained ' + str(a.steps) + ' steps' if not a.checkpoint else a.checkpoint}); "
             f"qkv serve at 1 thread; load average {load0[0]:.2f} at the start (a shared machine).", ""]
    with su.Server(qkv, ckpt, "--threads", "1") as server:
        client = su.Client(server)
        _, models, _ = client.get("/api/models")
        m = models["models"][0]
        lines.append(f"Model: {m['arch']}, {len(m['layers'])} layers x {m['layers'][0]['heads']} heads, width "
                     f"{m['d_model']}, vocabulary {m['input_vocab']}, context {m['context']}.")
        text = text64(client)
        lines += ["", "## Server (64-token input, one thread)", "",
                  "| request | client round trip, ms | server, ms |", "|---|---|---|"]
        full, full_srv, toggle, toggle_srv, size = server_side(client, text, a.runs)
        lines.append(f"| analyze: 12 heads' weights, the answer, the explanation of one query | {summary(full)} | "
                     f"{summary(full_srv)} |")
        lines.append(f"| the same with one head removed (a toggle) | {summary(toggle)} | {summary(toggle_srv)} |")
        lines += ["", f"Response size: {size / 1024:.0f} KiB (12 heads x 64 x 64 float32 weights in base64, the "
                  "answer's 5 most likely tokens at 64 positions, the explanation with every q, k and v)."]
        print("\n".join(lines), flush=True)

        inpage, cdp, heads, sizes, errors, toggles = page_side(server, text, a.keys)
        page_lines = ["", f"## Page (headless Chromium, {heads} heads at {sizes} tokens)", "",
                      "| keystroke to redrawn grid | ms |", "|---|---|",
                      f"| in the page: the input event's time to the frame after the grid is drawn | {summary(inpage)} |",
                      f"| over the DevTools protocol: the command sent to the page reporting it drawn (includes "
                      f"polling) | {summary(cdp)} |",
                      f"| a head's switch clicked to the frame after the grid is drawn (24 clicks: every head off, "
                      f"then on again) | {summary(toggles)} |"]
        if errors:
            page_lines.append(f"\nErrors from the page: {errors[:3]}")
        print("\n".join(page_lines), flush=True)
        lines += page_lines

        before, after, statuses, dt = memory(server, client, text, a.requests)
        mem_lines = ["", "## Memory", "",
                     f"Resident set of the server after 500 warm-up requests: {before / 1024:.1f} MB; after "
                     f"{a.requests} more: {after / 1024:.1f} MB ({after - before:+d} kB). Statuses: "
                     f"{dict(sorted(statuses.items()))}; {a.requests / dt:.0f} requests/s on one connection."]
        print("\n".join(mem_lines), flush=True)
        lines += mem_lines
        client.close()
    load1 = os.getloadavg()
    med = statistics.median
    grew = after - before
    rows = [("server: 64-token analyze (every head, the answer, one query's explanation), 1 thread", "< 30 ms",
             f"{med(full_srv):.1f} ms in the server, {med(full):.1f} ms round trip (medians)", med(full) < 30),
            ("server: a head toggle", "< 30 ms", f"{med(toggle_srv):.1f} ms in the server, {med(toggle):.1f} ms round trip",
             med(toggle) < 30),
            (f"page: keystroke to a redrawn grid of {heads} heads at 64 tokens", "< 100 ms",
             f"{med(inpage):.1f} ms in the page (p90 {pct(inpage, 0.9):.1f}), {med(cdp):.1f} ms over DevTools",
             med(inpage) < 100),
            (f"memory over {a.requests} requests", "flat", f"{grew:+d} kB ({before / 1024:.1f} -> {after / 1024:.1f} MB)",
             grew < 4096)]
    lines += ["", "## Against the targets", "", "| target | wanted | measured | met |", "|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]} | {'yes' if r[3] else 'NO'} |" for r in rows]
    lines += ["", f"Load average at the end: {load1[0]:.2f}."]
    if a.out:
        a.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
