#!/usr/bin/python3
"""`qkv serve` over real HTTP on loopback: every endpoint's good and bad input, the limits httplib
enforces, parallel clients, reloading a checkpoint that changes on disk, a bounded soak with the
server's memory before and after, and the command's own errors.

    test_server.py --qkv BUILD/qkv --workdir DIR [--soak N]

The handler's every field error is tested in C++ (tests/studio/test_serve.cpp); here the same
requests travel through cpp-httplib. Exit 0 when every check passed.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import studio_util as su  # noqa: E402

check = su.Checks()
failures = check.failed


def strip_ms(v):
    if isinstance(v, dict):
        return {k: strip_ms(x) for k, x in v.items() if k != "ms"}
    return v


def endpoints(srv, c, work):
    s, page, h = c.get("/")
    check("GET / is the page, with a strict Content-Security-Policy", s == 200 and "<script src=\"/studio.js\"" in page and
          h.get("Content-Security-Policy", "").startswith("default-src 'none'"), h.get("Content-Security-Policy", "")[:60])
    for path, kind in (("/studio.js", "text/javascript"), ("/studio.css", "text/css")):
        s, body, h = c.get(path)
        check(f"GET {path}", s == 200 and h["Content-Type"].startswith(kind) and len(body) > 1000, f"{len(body)} bytes")
    s, m, _ = c.get("/api/models")
    check("GET /api/models lists both checkpoints", s == 200 and [x["task"] for x in m["models"]] == ["grammar", "sort"]
          and m["run"] is True)

    s, r, _ = c.post("/api/analyze", {"input": {"text": "猫喜欢追逐老鼠"}, "query": {"layer": 1, "head": 0, "position": 3}})
    check("POST /api/analyze: weights of every head, the answer, the explanation",
          s == 200 and len(r["layers"]) == 2 and len(r["layers"][0]["weights"]) == 4 and r["explain"]["query"] == 3,
          f"server {r.get('ms', 0):.1f} ms" if s == 200 else r)
    s, r, _ = c.post("/api/explain", {"input": {"text": "猫喜欢追逐老鼠"}, "query": {"layer": 0, "head": 1, "position": 0}})
    check("POST /api/explain", s == 200 and r["explain"]["head"] == 1 and "layers" not in r)
    s, r, _ = c.post("/api/heldout", {"model": 1, "examples": 16, "ablate": {"heads": [[0, 1]], "mode": "mean"}})
    check("POST /api/heldout", s == 200 and r["examples"] == 16 and r["ablated"]["loss"] > 0)
    s, r, _ = c.post("/api/patch", {"model": 1, "clean": {"ids": [1, 2, 3]}, "corrupt": {"ids": [1, 4, 3]},
                                    "position": 1, "answer": 2, "wrong": 4})
    check("POST /api/patch", s == 200 and len(r["patching"]["layers"]) == 1 and r["patching"]["position"] == 1)
    s, r, _ = c.get("/api/run")
    check("GET /api/run: metrics and snapshots of the run", s == 200 and r["metrics"]["columns"][0] == "step" and
          r["snapshots"]["steps"][-1] == 30, f"{len(r['metrics']['rows'])} rows, steps {r['snapshots']['steps']}")
    s, r, _ = c.get("/api/snapshot?step=0&example=1")
    check("GET /api/snapshot?step=0&example=1", s == 200 and r["step"] == 0 and r["example"] == 1 and
          len(r["layers"][0]["weights"]) == 4)

    bad = [
        (c.post("/api/analyze", None, raw=b'{"input": {"text": "\xe7\x8c"}}', headers={"Content-Type": "application/json"}),
         400, "body: invalid UTF-8"),
        (c.post("/api/analyze", {"input": {"text": "猫"}, "qurey": 1}), 400, "qurey: unknown field; did you mean 'query'?"),
        (c.post("/api/analyze", {"input": {"text": "猫" * 40}}), 400, "more than the model's context of 32"),
        (c.post("/api/analyze", {"input": {"text": "猫"}}, headers={"Content-Type": "text/plain"}), 415,
         "expected a body of Content-Type application/json"),
        (c.post("/api/analyze", None, raw=b" " * 70000, headers={"Content-Type": "application/json"}), 413,
         "larger than the 65536 bytes"),
        (c.get("/api/analyze"), 405, "expected method POST, found GET"),
        (c.request("DELETE", "/api/models"), 405, "expected method GET, found DELETE"),
        (c.get("/etc/passwd"), 404, "no such page: /etc/passwd"),
        (c.get("/../../etc/passwd"), 404, "no such page"),
        (c.get("/api/models", headers={"Host": "attacker.example:80"}), 403, "not this server's"),
        (c.get("/api/snapshot?step=99"), 400, "step: expected a whole number in [0, 3], found 99"),
        (c.get("/api/snapshot?stepp=1"), 400, "unknown query parameter 'stepp'"),
        (c.post("/api/patch", {"clean": {"text": "我爱吃苹果"}, "corrupt": {"text": "我爱吃"}}), 400,
         "patching needs a clean and a corrupted input of the same length"),
        (c.post("/api/heldout", {"model": 5}), 400, "model: expected a whole number in [0, 1], found 5"),
        (c.post("/api/reload", {"model": "0"}), 400, "model: expected a whole number in [0, 1], found the string '0'"),
    ]
    for (status, body, _), want, text in bad:
        msg = body.get("error", "") if isinstance(body, dict) else str(body)
        check(f"{want}: {text}", status == want and text in msg, f"{status} {msg[:110]}")
    # an over-long request line: httplib answers 414 itself, with a JSON body too
    s, body, _ = c.get("/api/models?" + "x" * 9000)
    check("an over-long request line gets 414 with a JSON error", s == 414 and isinstance(body, dict) and "error" in body,
          f"{s} {str(body)[:80]}")
    c.close()


def parallel(srv):
    reqs = [("/api/analyze", {"input": {"text": "猫喜欢追逐老鼠", "masks": [5]}, "query": {"layer": 1, "head": 3, "position": 3}}),
            ("/api/analyze", {"input": {"text": "我爱吃苹果"}, "ablate": {"heads": [[0, 0], [1, 2]]}}),
            ("/api/analyze", {"model": 1, "input": {"ids": [7, 3, 1, 0]}, "ablate": {"heads": [[0, 1]], "mode": "mean"}}),
            ("/api/explain", {"model": 1, "input": {"example": 2}, "query": {"layer": 0, "head": 0, "position": 5}}),
            ("/api/patch", {"clean": {"text": "我爱[MASK]苹果"}, "corrupt": {"text": "我爱[MASK]牛奶"}, "answer": "吃", "wrong": "喝"}),
            ("/api/heldout", {"model": 1, "examples": 8, "ablate": {"heads": [[0, 0]]}})]
    c = su.Client(srv)
    ref = [strip_ms(c.post(p, b)[1]) for p, b in reqs]
    c.close()

    def client(k):
        cl = su.Client(srv)
        bad = 0
        for i in range(30):
            j = (k + i) % len(reqs)
            s, v, _ = cl.post(*reqs[j])
            bad += s != 200 or strip_ms(v) != ref[j]
        cl.close()
        return bad

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        bad = sum(ex.map(client, range(8)))
    check("8 parallel clients x 30 requests on both models: every answer equals the one-at-a-time answer",
          bad == 0, f"{bad} differ; {240 / (time.monotonic() - t0):.0f} requests/s")


def reload(qkv, srv, served, other):
    c = su.Client(srv)
    body = {"input": {"text": "猫喜欢追逐老鼠"}}
    before = c.post("/api/analyze", body)[1]["layers"][0]["weights"]
    # The file served is replaced by another checkpoint, atomically (as qkv train writes one).
    tmp = served.with_suffix(".tmp")
    shutil.copyfile(other, tmp)
    os.replace(tmp, served)
    still = c.post("/api/analyze", body)[1]["layers"][0]["weights"]
    check("a checkpoint rewritten on disk is not read until reloaded", still == before)
    s, r, _ = c.post("/api/reload", {"model": 0})
    after = c.post("/api/analyze", body)[1]["layers"][0]["weights"]
    check("POST /api/reload loads the new file whole, then swaps", s == 200 and after != before, str(r)[:80])
    # A damaged file: the reload fails naming it, and the model served stays as it was.
    data = served.read_bytes()
    served.write_bytes(data[: len(data) // 2])
    s, r, _ = c.post("/api/reload", {"model": 0})
    again = c.post("/api/analyze", body)[1]["layers"][0]["weights"]
    check("a damaged checkpoint is refused (500 naming it) and the loaded model keeps serving",
          s == 500 and str(served) in r["error"] and again == after, f"{s} {r['error'][:120]}")
    served.write_bytes(data)
    c.close()


def run_files(srv, run_dir):
    """--run: a snapshots.h5 replaced by a damaged file keeps the last good snapshots on screen,
    with the error; the good file again clears it. metrics.csv is read as it is at each request."""
    c = su.Client(srv)
    snaps = run_dir / "snapshots.h5"
    good = snaps.read_bytes()
    s, before, _ = c.get("/api/run")
    _, w0, _ = c.get("/api/snapshot?step=1")
    tmp = run_dir / "snapshots.h5.tmp"
    tmp.write_bytes(good[: len(good) // 2])  # as a crashed writer would leave it, published by rename
    os.replace(tmp, snaps)
    s, during, _ = c.get("/api/run")
    s2, w1, _ = c.get("/api/snapshot?step=1")
    check("--run: a damaged snapshots.h5 keeps the last good snapshots, with the error naming the file",
          s == 200 and during["snapshots"]["steps"] == before["snapshots"]["steps"] and "snapshots.h5" in
          during["snapshots_note"] and s2 == 200 and w1["layers"] == w0["layers"], during.get("snapshots_note", "")[:120])
    tmp.write_bytes(good)
    os.replace(tmp, snaps)
    s, after, _ = c.get("/api/run")
    check("--run: the good file again clears the error", s == 200 and after["snapshots_note"] == "" and
          after["snapshots"]["steps"] == before["snapshots"]["steps"], after.get("snapshots_note", "")[:120])
    metrics = run_dir / "metrics.csv"
    rows = metrics.read_text().splitlines()
    tmp = run_dir / "metrics.csv.tmp"
    tmp.write_text("\n".join(rows[:2]) + "\n")
    os.replace(tmp, metrics)
    s, fewer, _ = c.get("/api/run")
    check("--run: metrics.csv is read again at each request", s == 200 and len(fewer["metrics"]["rows"]) == 1 and
          len(before["metrics"]["rows"]) == len(rows) - 1, f"{len(fewer['metrics']['rows'])} rows of {len(rows) - 1}")
    tmp.write_text("\n".join(rows) + "\n")
    os.replace(tmp, metrics)
    c.close()


def soak(srv, n, sanitized=False):
    """n mixed requests (good and bad) on one keep-alive connection; RSS after a warm-up and at the end
    (not under a sanitizer, whose quarantine keeps freed memory on purpose: then no 5xx is checked)."""
    c = su.Client(srv)
    mix = [("POST", "/api/analyze", {"input": {"text": "猫喜欢追逐老鼠"}, "query": {"layer": 0, "head": 1, "position": 3}}),
           ("POST", "/api/analyze", {"input": {"text": "我爱吃苹果", "masks": [2]}, "ablate": {"heads": [[1, 1]]}}),
           ("POST", "/api/analyze", {"model": 1, "input": {"ids": [3, 1, 2, 5]}}),
           ("POST", "/api/explain", {"input": {"text": "我爱吃苹果"}, "query": {"layer": 1, "head": 2, "position": 2}}),
           ("POST", "/api/analyze", {"input": {"text": "我爱吃Ω"}}),
           ("POST", "/api/analyze", {"input": {"text": "猫"}, "bogus": 1}),
           ("GET", "/api/models", None),
           ("GET", "/api/run", None),
           ("GET", "/nowhere", None)]
    warm = min(500, n // 5)
    rss = []
    statuses = {}
    t0 = time.monotonic()
    for i in range(n):
        if i == warm:
            rss.append(srv.rss_kb())
        m, p, b = mix[i % len(mix)]
        s = c.request(m, p, b)[0]
        statuses[s] = statuses.get(s, 0) + 1
    rss.append(srv.rss_kb())
    dt = time.monotonic() - t0
    c.close()
    grew = rss[1] - rss[0]
    detail = f"RSS {rss[0] / 1024:.1f} MB -> {rss[1] / 1024:.1f} MB ({grew:+d} kB); statuses {statuses}; {n / dt:.0f} requests/s"
    if sanitized:
        check(f"soak: {n} requests, every answer below 500 (a sanitizer build: its quarantine grows the RSS)",
              all(code < 500 for code in statuses), detail)
    else:
        check(f"soak: {n} requests, the server's memory flat after a warm-up of {warm}", grew < 4096, detail)
    return rss, statuses, dt


def command_errors(qkv, ckpt, work):
    def run(*args):
        return subprocess.run([qkv, "serve", *map(str, args)], capture_output=True, text=True, timeout=120)

    r = run(ckpt, "--run", work / "nothing-here", "--port", "0")
    check("--run that is not a directory: exit 2 naming it", r.returncode == 2 and "--run" in r.stderr, r.stderr.strip()[:100])
    r = run(work / "missing.h5", "--port", "0")
    check("a checkpoint that does not exist: exit 1 naming it", r.returncode == 1 and "missing.h5" in r.stderr,
          r.stderr.strip()[:100])
    r = run(ckpt, "--host", "192.0.2.1", "--port", "0")
    check("an address that is not this machine's: a clear error", r.returncode == 1 and "cannot listen on 192.0.2.1" in r.stderr,
          r.stderr.strip()[:120])
    r = run(ckpt, "--port", "70000")
    check("--port out of range: exit 2", r.returncode == 2 and "--port" in r.stderr, r.stderr.strip()[:100])
    with su.Server(qkv, ckpt) as first:
        r = run(ckpt, "--port", str(first.port))
        check("a port another server holds: exit 1, saying so", r.returncode == 1 and "cannot listen" in r.stderr,
              r.stderr.strip()[:120])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True, type=Path)
    ap.add_argument("--soak", type=int, default=1500, help="requests in the soak (default 1500)")
    ap.add_argument("--sanitized", action="store_true", help="a sanitizer build: the soak checks answers, not memory")
    a = ap.parse_args()
    qkv = str(Path(a.qkv).resolve())
    work = a.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    g = su.tiny_grammar(qkv, work / "gzh", steps=30)
    g2 = su.tiny_grammar(qkv, work / "gzh2", steps=12)
    sort = su.train(qkv, "sort.yaml", work / "sort", 10, "--set", "model.d_model=16", "--set", "model.heads=2",
                    "--set", "model.layers=1", "--set", "task.length=8", "--set", "task.eval_size=32")
    served = work / "served.h5"
    shutil.copyfile(g, served)
    print(f"  trained three tiny models in {time.monotonic() - t0:.1f} s", flush=True)
    with su.Server(qkv, served, sort, "--run", work / "gzh") as srv:
        endpoints(srv, su.Client(srv), work)
        parallel(srv)
        reload(qkv, srv, served, g2)
        run_files(srv, work / "gzh")
        soak(srv, a.soak, a.sanitized)
        status = srv.stop()
        check("Ctrl-C stops the server with status 0", status == 0 and "stopped" in "".join(srv.out), f"status {status}")
        check("no 5xx but the deliberate one logged", "".join(srv.err).count("qkv serve: POST /api/reload") == 1 and
              "".join(srv.err).count(": {\"error\"") == 1, "".join(srv.err)[-300:])
    command_errors(qkv, g, work)
    print(f"test_server: {'PASS' if not failures else 'FAIL'} in {time.monotonic() - t0:.1f} s"
          + (f"; failed: {', '.join(failures)}" if failures else ""))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
