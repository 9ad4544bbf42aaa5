#!/usr/bin/python3
"""The studio in Firefox (headless, over WebDriver BiDi): the page loads, draws, answers keys and
clicks, switches language and patches, without an error.

    firefox_test.py --qkv BUILD/qkv --workdir DIR [--firefox /usr/bin/firefox-esr] [--shot FILE.png]

Debian's firefox-esr speaks WebDriver BiDi on --remote-debugging-port, a WebSocket; Python's
standard library has no WebSocket client, so a minimal one (RFC 6455: the handshake, masked text
frames out, unmasked frames in, pings answered) is below. Real key and pointer input goes through
input.performActions. Exit 0 when every check passed.
"""
import argparse
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import studio_util as su  # noqa: E402

check = su.Checks()
failures = check.failed


class WebSocket:
    """A WebSocket client for one text-message protocol (RFC 6455), blocking, with a reader thread."""

    def __init__(self, host, port, path, timeout=30):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("WebSocket handshake: connection closed")
            head += chunk
        status, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in status.split(b"\r\n")[0]:
            raise RuntimeError(f"WebSocket handshake refused: {status[:200]!r}")
        self.sock.settimeout(None)
        self.lock = threading.Lock()

    def send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
                                  if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        with self.lock:
            self.sock.sendall(header + mask + masked)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """The next text message (continuations joined, pings answered); None when closed."""
        parts = []
        while True:
            try:
                b0, b1 = self._read(2)
            except (EOFError, OSError):  # closed (by Firefox, or by close())
                return None
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if op == 0x8:
                return None
            if op == 0x9:  # ping -> pong
                with self.lock:
                    self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if op in (0x1, 0x0, 0x2):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Firefox:
    def __init__(self, firefox):
        self.profile = tempfile.mkdtemp(prefix="qkv-firefox-")
        # No network beyond loopback: no updates, telemetry, captive-portal or connectivity checks.
        prefs = {"app.update.enabled": False, "datareporting.policy.dataSubmissionEnabled": False,
                 "toolkit.telemetry.enabled": False, "network.captive-portal-service.enabled": False,
                 "network.connectivity-service.enabled": False, "browser.shell.checkDefaultBrowser": False,
                 "extensions.update.enabled": False, "browser.safebrowsing.malware.enabled": False,
                 "browser.safebrowsing.phishing.enabled": False, "remote.prefs.recommended": True}
        Path(self.profile, "user.js").write_text(
            "".join(f'user_pref("{k}", {json.dumps(v)});\n' for k, v in prefs.items()))
        self.log = open(Path(self.profile) / "firefox.log", "w+")
        self.proc = subprocess.Popen([firefox, "--headless", "--remote-debugging-port", "0", "--profile", self.profile,
                                      "--no-remote", "--width", "1400", "--height", "1000"],
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        end = time.monotonic() + 90
        url = None
        while time.monotonic() < end and not url:
            time.sleep(0.2)
            self.log.seek(0)
            m = re.search(r"WebDriver BiDi listening on (ws://[\d.]+:\d+)", self.log.read())
            url = m.group(1) if m else None
            if self.proc.poll() is not None:
                break
        if not url:
            self.log.seek(0)
            tail = self.log.read()[-1500:]
            self.close()
            raise RuntimeError(f"{firefox} did not start WebDriver BiDi: {tail}")
        host, port = url[len("ws://"):].split(":")
        self.ws = WebSocket(host, int(port), "/session")
        self.next_id = 0
        self.replies, self.events = {}, []
        self.cond = threading.Condition()
        threading.Thread(target=self._reader, daemon=True).start()
        self.call("session.new", {"capabilities": {}})
        self.call("session.subscribe", {"events": ["log.entryAdded"]})
        self.context = self.call("browsingContext.getTree", {})["contexts"][0]["context"]

    def _reader(self):
        while True:
            msg = self.ws.recv()
            with self.cond:
                if msg is None:
                    self.replies[None] = True
                    self.cond.notify_all()
                    return
                m = json.loads(msg)
                if "id" in m and m.get("type") in ("success", "error"):
                    self.replies[m["id"]] = m
                else:
                    self.events.append(m)
                self.cond.notify_all()

    def call(self, method, params, timeout=60):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        end = time.monotonic() + timeout
        with self.cond:
            while mid not in self.replies:
                if None in self.replies:
                    raise RuntimeError(f"{method}: Firefox closed the connection")
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"{method}: no answer within {timeout} s")
                self.cond.wait(left)
            m = self.replies.pop(mid)
        if m["type"] == "error":
            raise RuntimeError(f"{method}: {m.get('error')}: {m.get('message')}")
        return m["result"]

    def eval(self, expr):
        """The value of a JavaScript expression, through JSON."""
        r = self.call("script.evaluate", {"expression": f"JSON.stringify({expr})", "target": {"context": self.context},
                                          "awaitPromise": True, "resultOwnership": "none"})
        if r.get("type") == "exception":
            raise RuntimeError(f"evaluating {expr[:80]}: {r['exceptionDetails'].get('text')}")
        v = r["result"].get("value")
        return None if v is None else json.loads(v)

    def wait_for(self, expr, timeout=30):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.eval(expr):
                return True
            time.sleep(0.05)
        return False

    def keys(self, text):
        acts = []
        for ch in text:
            acts += [{"type": "keyDown", "value": ch}, {"type": "keyUp", "value": ch}]
        self.call("input.performActions", {"context": self.context, "actions": [{"type": "key", "id": "kb", "actions": acts}]})

    def click(self, selector):
        b = self.eval(f"qkvStudio.box({json.dumps(selector)})")
        if not b:
            raise RuntimeError(f"no element {selector}")
        x, y = int(b["x"] + b["w"] / 2), int(b["y"] + b["h"] / 2)
        self.call("input.performActions", {"context": self.context, "actions": [{
            "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [{"type": "pointerMove", "x": x, "y": y}, {"type": "pointerDown", "button": 0},
                        {"type": "pointerUp", "button": 0}]}]})

    def errors(self):
        return [e["params"] for e in self.events if e.get("method") == "log.entryAdded" and
                e["params"].get("level") == "error"]

    def screenshot(self, path):
        data = self.call("browsingContext.captureScreenshot", {"context": self.context})["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self):
        try:
            if hasattr(self, "ws"):
                try:
                    self.ws.send(json.dumps({"id": 0, "method": "browser.close", "params": {}}))
                except OSError:
                    pass
                self.ws.close()
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True, type=Path)
    ap.add_argument("--firefox", default="/usr/bin/firefox-esr")
    ap.add_argument("--shot", type=Path)
    a = ap.parse_args()
    qkv = str(Path(a.qkv).resolve())
    if not Path(a.firefox).exists():
        print(f"firefox_test: {a.firefox} not found (apt-get install firefox-esr)")
        return 1
    shutil.rmtree(a.workdir, ignore_errors=True)
    a.workdir.mkdir(parents=True)
    t0 = time.monotonic()
    g = su.tiny_grammar(qkv, a.workdir / "gzh", steps=30)
    with su.Server(qkv, g, "--run", a.workdir / "gzh") as server:
        ff = Firefox(a.firefox)
        try:
            ff.call("browsingContext.navigate", {"context": ff.context, "url": server.url + "/", "wait": "complete"})
            check("page ready in Firefox", ff.wait_for("window.qkvStudio && qkvStudio.ready && qkvStudio.state().explain", 60))
            drawn = "(() => { const s = qkvStudio.state(); return s.drawnSeq === s.seq && !s.inflight; })()"
            ff.wait_for(drawn)
            check("the grid: a canvas per head, painted",
                  ff.eval("document.querySelectorAll('#grid .cell canvas').length") == 8 and
                  ff.eval("(() => { const c = document.querySelector('#grid .cell canvas');"
                          " return c.getContext('2d').getImageData(0, 0, 1, 1).data[3]; })()") == 255)
            ff.eval("(() => { const e = document.getElementById('text'); e.focus(); e.select(); return true; })()")
            ff.keys("我爱吃苹果")
            check("typed with real keys: the grid shows the sentence",
                  ff.wait_for(f"qkvStudio.state().tokens && qkvStudio.state().tokens.join('') === '我爱吃苹果。' && {drawn}"),
                  "".join(ff.eval("qkvStudio.state().tokens") or []))
            ff.wait_for("(() => { const s = qkvStudio.state(); return s.explain && s.explainFor === s.resultSeq; })()")
            ff.click("#queries .tok[data-i='2']")
            check("a clicked query is explained",
                  ff.wait_for("qkvStudio.state().explain && qkvStudio.state().explain.query === 2 && "
                              "document.querySelectorAll('#step-body tr[data-key]').length === 6"))
            ff.click("#grid .cell[data-layer='0'][data-head='1'] .sw")
            check("a head removed with its switch: the held-out metrics follow",
                  ff.wait_for("qkvStudio.state().heldout && qkvStudio.state().heldout.ablated && qkvStudio.state().heldout.ablated.heads.length === 1", 60))
            ff.click("#langs button[data-lang='zh']")
            check("中文", ff.eval("document.querySelector(\"#tabs button[data-tab='look']\").textContent") == "看注意力")
            ff.click("#tabs button[data-tab='patch']")
            check("patching", ff.wait_for("qkvStudio.state().patch && qkvStudio.state().patch.layers.length === 2", 60))
            ff.click("#tabs button[data-tab='train']")
            check("training view", ff.wait_for("qkvStudio.state().snap && qkvStudio.state().snap.step === 30", 30))
            ff.click("#tabs button[data-tab='look']")
            if a.shot:
                ff.screenshot(a.shot)
            errs = ff.errors()
            check("no error from the page", not errs and not ff.eval("qkvStudio.errors.length"),
                  "; ".join(str(e.get("text"))[:120] for e in errs[:3]))
        finally:
            ff.close()
    print(f"firefox_test: {'PASS' if not failures else 'FAIL'} in {time.monotonic() - t0:.1f} s"
          + (f"; failed: {', '.join(failures)}" if failures else ""))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
