"""What the studio's Python tests share: tiny trained checkpoints, a `qkv serve` process on a free
loopback port, an HTTP client, and the qkv command's own numbers to compare the page's with.

Standard library only. Every process started here is ended by its own id.
"""
import http.client
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
QUICK = ["--set", "schedule.warmup_steps=5", "--set", "train.threads=1", "--quiet", "--overwrite"]


class Checks:
    """Named checks printed as they are made; `failed` lists the names of those that failed."""

    def __init__(self):
        self.failed = []

    def __call__(self, name, ok, detail=""):
        print(f"  {'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail != "" else ""), flush=True)
        if not ok:
            self.failed.append(name)
        return ok


def train(qkv, config, out, steps, *extra):
    """Train `config` for `steps` steps into `out` (a run directory); returns out/best.h5."""
    args = [qkv, "train", str(ROOT / "configs" / config), "--out", str(out), "--set", f"train.steps={steps}",
            "--set", f"train.eval_every={max(1, steps // 3)}", "--set", f"train.checkpoint_every={steps}", *QUICK, *extra]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {r.returncode}: {r.stderr[-2000:]}")
    return Path(out) / "best.h5"


def tiny_grammar(qkv, out, steps=30):
    """A masked encoder of the Chinese grammar (configs/grammar_zh.yaml, narrower), with snapshots."""
    return train(qkv, "grammar_zh.yaml", out, steps, "--set", "model.d_model=32", "--set", "model.d_ff=64",
                 "--set", "model.layers=2", "--set", "task.eval_size=64", "--set", f"train.snapshot_every={max(1, steps // 3)}")


def tiny_induction(qkv, out, steps=20):
    """A decoder on token ids (configs/induction.yaml, narrower)."""
    return train(qkv, "induction.yaml", out, steps, "--set", "model.d_model=32", "--set", "task.eval_size=64")


def cli(qkv, *args, json_out=False):
    """Run a qkv command; its stdout (parsed JSON with json_out). Raises on a non-zero exit."""
    r = subprocess.run([qkv, *map(str, args)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"qkv {' '.join(map(str, args))} exited {r.returncode}: {r.stderr[-1000:]}")
    return json.loads(r.stdout) if json_out else r.stdout


class Server:
    """`qkv serve ARGS --port 0` until stop(): its URL from the first line it prints."""

    def __init__(self, qkv, *args, timeout=120):
        self.proc = subprocess.Popen([qkv, "serve", *map(str, args), "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out, self.err = [], []
        self.url = None
        ready = threading.Event()

        def drain(stream, sink, watch):
            for line in stream:
                sink.append(line)
                if watch and line.startswith("qkv studio: http://"):
                    self.url = line.split()[2].rstrip("/")
                    ready.set()
            ready.set()

        threading.Thread(target=drain, args=(self.proc.stdout, self.out, True), daemon=True).start()
        threading.Thread(target=drain, args=(self.proc.stderr, self.err, False), daemon=True).start()
        ready.wait(timeout)
        if not self.url:
            self.stop()
            raise RuntimeError(f"qkv serve did not start: {''.join(self.out)} {''.join(self.err)}")
        self.host, port = self.url[len("http://"):].rsplit(":", 1)
        self.port = int(port)

    def pid(self):
        return self.proc.pid

    def rss_kb(self):
        """Resident memory of the server process (VmRSS, kB)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        """Ctrl-C (the server stops and exits 0), then a kill if it does not end; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Client:
    """One keep-alive HTTP/1.1 connection to the server."""

    def __init__(self, server, timeout=60):
        self.server = server
        self.conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None):
        """(status, parsed JSON or text, headers)."""
        h = {"Host": f"{self.server.host}:{self.server.port}"}
        data = raw
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                payload = r.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # the server closed a kept-alive connection (its limit or timeout): one more try
                self.conn.close()
                if attempt:
                    raise
        ctype = r.getheader("Content-Type", "")
        value = json.loads(payload) if ctype.startswith("application/json") and payload else payload.decode("utf-8", "replace")
        return r.status, value, dict(r.getheaders())

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def close(self):
        self.conn.close()


def wait_file(path, timeout=60):
    end = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > end:
            raise RuntimeError(f"{path} did not appear within {timeout} s")
        time.sleep(0.1)


def environment_ok():
    """(True, '') when Chromium and Debian's python3 with matplotlib are there, else (False, why)."""
    if not Path("/usr/bin/chromium").exists():
        return False, "/usr/bin/chromium not found: apt-get install chromium fonts-wqy-microhei (scripts/install-deps.sh)"
    return True, ""


os.environ.setdefault("OMP_NUM_THREADS", "1")
