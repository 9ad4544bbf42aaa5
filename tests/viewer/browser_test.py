#!/usr/bin/env python3
"""Real-browser test of the studio's page, saved (the page `qkv view` writes: share/studio/ with the
page's data embedded; docs/viewer.md).

    browser_test.py PAGE.html [--expect-snapshots] [--expect-cjk] [--chromium /usr/bin/chromium]
                    [--shots DIR] [--timeout 60]
    browser_test.py --self-test [--shots DIR]

Drives headless Chromium through the DevTools protocol over --remote-debugging-pipe (fd 3: our
commands, fd 4: its replies and events, each message JSON ended by a NUL byte), opens the page
from a file:// URL and checks, with real mouse and keyboard events where a user would use them:
the page becomes ready, reports no data problem, the grid shows heatmap colours, the labels on
the squares and the numbers of the row-per-head view and of the hovered weights are those of the
page's data, clicking a row of the head's weights makes it the query, the arrow keys move, (--expect-snapshots)
the step slider redraws the snapshot grid, (--expect-cjk) CJK tokens render as glyphs rather
than tofu, and the page raised no error at all (console.error, uncaught exceptions, error log
entries, its own qkvStudio.errors). --self-test proves the checks can fail: it builds broken
pages (scripts/studio_page.py over tests/viewer/make_sample.py's data) and expects the right
check to fail on each. Exit 0 when everything passed, 1 otherwise.

The Browser and Page classes are the DevTools client of the studio's tests too
(tests/studio/browser_test.py, tools/studio_bench.py, tools/studio_screenshots.py).
Python standard library, plus matplotlib to decode the screenshots (PNG) into numpy arrays.
"""
import argparse
import base64
import copy
import fcntl
import importlib.util
import io
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import matplotlib.image
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
WIDTH, HEIGHT = 1400, 1000
STARTUP_TIMEOUT = 90.0  # seconds for Chromium to answer on the DevTools pipe (about 1 s when idle)


class CDPError(Exception):
    pass


# ------------------------------------------------------------------------------------ browser
class Browser:
    """One headless Chromium speaking the DevTools protocol over a pipe pair."""

    def __init__(self, chromium="/usr/bin/chromium", timeout=STARTUP_TIMEOUT):
        self.tmp = tempfile.mkdtemp(prefix="qkv-viewer-test-")
        self.log_path = Path(self.tmp) / "chromium.log"
        cmd_r, cmd_w = os.pipe()    # we write commands, Chromium reads them on its fd 3
        ev_r, ev_w = os.pipe()      # Chromium writes on its fd 4, we read
        # Chromium's ends, moved to fds >= 10 so that the redirections below cannot collide
        # (bash, not dash: dash reads only one-digit fd numbers).
        child_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(ev_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(cmd_r)
        os.close(ev_w)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage",  # /tmp, not /dev/shm (small in containers)
                 f"--user-data-dir={self.tmp}/profile", f"--window-size={WIDTH},{HEIGHT}",
                 "--remote-debugging-pipe"]
        shell = f'exec "$@" 3<&{child_r} 4>&{child_w} {child_r}<&- {child_w}>&-'
        self.log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(["/bin/bash", "-c", shell, "bash", chromium] + flags,
                                         pass_fds=(child_r, child_w), stdin=subprocess.DEVNULL,
                                         stdout=self.log, stderr=subprocess.STDOUT)
        except OSError as e:
            raise CDPError(f"cannot start {chromium}: {e.strerror}") from e
        finally:
            os.close(child_r)
            os.close(child_w)
        self.w, self.r = cmd_w, ev_r
        self.inbox = queue.Queue()
        self.events = {}            # sessionId -> [event message]
        self.next_id = 0
        threading.Thread(target=self._reader, daemon=True).start()
        try:
            self.send("Target.setDiscoverTargets", {"discover": False}, timeout=timeout)
        except CDPError as e:
            try:  # read before close(), which removes the profile and the log
                tail = self.log_path.read_text(errors="replace")[-2000:] or "(empty)"
            except OSError:
                tail = "(unreadable)"
            self.close()
            raise CDPError(f"{chromium} did not answer on the DevTools pipe ({e}); "
                           f"the end of its log:\n{tail}") from e

    def _reader(self):
        parts = []
        while True:
            try:
                chunk = os.read(self.r, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                self.inbox.put(None)
                return
            while True:
                k = chunk.find(b"\0")
                if k < 0:
                    parts.append(chunk)
                    break
                parts.append(chunk[:k])
                self.inbox.put(json.loads(b"".join(parts)))
                parts = []
                chunk = chunk[k + 1:]

    def _take(self, timeout):
        try:
            msg = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return False, None
        if msg is None:
            raise CDPError(f"Chromium closed the DevTools pipe (exit code {self.proc.poll()})")
        if "id" not in msg:
            self.events.setdefault(msg.get("sessionId"), []).append(msg)
        return True, msg

    def send(self, method, params=None, session=None, timeout=30.0):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            try:
                data = data[os.write(self.w, data):]
            except OSError as e:  # Chromium has exited: say so, with its exit code
                raise CDPError(f"{method}: cannot write to the DevTools pipe ({e.strerror}; "
                               f"Chromium's exit code {self.proc.poll()})") from e
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise CDPError(f"{method}: no answer within {timeout:.0f} s")
            got, m = self._take(left)
            if got and m.get("id") == mid:
                if "error" in m:
                    raise CDPError(f"{method}: {m['error'].get('message')} {m['error'].get('data', '')}".strip())
                return m.get("result", {})

    def pump(self, seconds):
        """Let events arrive for a while."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._take(max(0.0, end - time.monotonic()))

    def close(self):
        try:
            data = json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0"
            os.write(self.w, data)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.w, self.r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def start_browser(chromium, timeout=STARTUP_TIMEOUT, attempts=2):
    """A started Browser. A first start on a loaded machine (the sanitizer suite runs trainings
    beside this test) can miss the DevTools pipe's first answer: try again once with a fresh
    profile, and report every attempt's error if none answers."""
    errors = []
    for _ in range(attempts):
        try:
            return Browser(chromium, timeout)
        except CDPError as e:
            errors.append(str(e))
    raise CDPError("\n".join(f"attempt {i + 1}: {e}" for i, e in enumerate(errors)))


class Page:
    """One tab: its own DevTools session, with the page's errors collected."""

    def __init__(self, browser):
        self.b = browser
        self.target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send("Target.attachToTarget", {"targetId": self.target, "flatten": True})["sessionId"]
        for m in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(m)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        self.call("Emulation.setFocusEmulationEnabled", {"enabled": True})
        self.call("Page.bringToFront")
        self.url = None

    def call(self, method, params=None, timeout=30.0):
        return self.b.send(method, params, session=self.session, timeout=timeout)

    def events(self):
        return self.b.events.get(self.session, [])

    def navigate(self, url, timeout=60.0):
        self.url = url
        n0 = len(self.events())
        r = self.call("Page.navigate", {"url": url}, timeout=timeout)
        if r.get("errorText"):
            raise CDPError(f"Page.navigate {url}: {r['errorText']}")
        end = time.monotonic() + timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self.events()[n0:]):
            if time.monotonic() > end:
                raise CDPError(f"{url}: no load event within {timeout:.0f} s")
            self.b.pump(0.05)

    def eval(self, expr, await_promise=False, timeout=30.0):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                            "awaitPromise": await_promise}, timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text")
            raise CDPError(f"evaluating {expr[:80]!r}: {text}")
        return r["result"].get("value")

    def wait_for(self, expr, timeout):
        end = time.monotonic() + timeout
        while True:
            if self.eval(expr):
                return True
            if time.monotonic() > end:
                return False
            self.b.pump(0.05)

    def settle(self, timeout=60.0):
        """Two more frames (the page draws synchronously; the frames let the browser paint)."""
        self.eval("new Promise((r) => { let d = 0; const f = () => { if (!d) { d = 1; r(true); } };"
                  " requestAnimationFrame(() => requestAnimationFrame(f)); setTimeout(f, 300); })",
                  await_promise=True)

    def screenshot(self, save=None):
        data = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"}, timeout=60)["data"])
        if save:
            Path(save).write_bytes(data)
        img = matplotlib.image.imread(io.BytesIO(data), format="png")
        if img.dtype != np.uint8:
            img = np.clip(img * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return img[:, :, :3]

    def rect(self, selector, clip_to=None):
        """Viewport box (x0, y0, x1, y1) in CSS pixels of an element, cut to the viewport (and clip_to)."""
        js = ("(() => { const e = document.querySelector(%s); if (!e) return null;"
              " const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; })()")
        r = self.eval(js % json.dumps(selector))
        if r is None:
            return None
        x0, y0, x1, y1 = max(0, r[0]), max(0, r[1]), min(WIDTH, r[2]), min(HEIGHT, r[3])
        if clip_to:
            c = self.rect(clip_to)
            if c:
                x0, y0, x1, y1 = max(x0, c[0]), max(y0, c[1]), min(x1, c[2]), min(y1, c[3])
        return (int(x0), int(y0), int(x1), int(y1)) if x1 - x0 >= 1 and y1 - y0 >= 1 else None

    def mouse(self, kind, x, y, button="none", clicks=0):
        self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": button,
                                                "clickCount": clicks})

    def move(self, x, y):
        self.mouse("mouseMoved", x, y)

    def click(self, x, y):
        self.move(x, y)
        self.mouse("mousePressed", x, y, "left", 1)
        self.mouse("mouseReleased", x, y, "left", 1)

    def key(self, key, code):
        for kind in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key,
                                                  "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code})

    def page_errors(self):
        """Errors raised by the page: console.error/assert, uncaught exceptions, error log entries."""
        out = []
        for e in self.events():
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                args = [a.get("value", a.get("description", "")) for a in p.get("args", [])]
                out.append(f"console.{p['type']}: " + " ".join(str(a) for a in args))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", "")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                entry = p["entry"]
                url = entry.get("url", "")
                if url.endswith("/favicon.ico"):   # Chromium's own request, not the page's
                    continue
                out.append(f"log ({entry.get('source')}): {entry.get('text')} {url}".strip())
        return out

    def close(self):
        try:
            self.b.send("Target.closeTarget", {"targetId": self.target})
        except CDPError:
            pass


# ------------------------------------------------------------------------------------ pixels
def crop(img, r):
    x0, y0, x1, y1 = r
    return img[y0:y1, x0:x1]


def heatmap_stats(px):
    """Share of coloured pixels (channel spread > 40: not the grey page, not text) and their variety."""
    p = px.reshape(-1, 3).astype(np.int16)
    spread = p.max(axis=1) - p.min(axis=1)
    col = p[spread > 40]
    frac = len(col) / max(1, len(p))
    if len(col) == 0:
        return frac, 0.0, 0
    lum = 0.299 * col[:, 0] + 0.587 * col[:, 1] + 0.114 * col[:, 2]
    distinct = len(np.unique((col >> 4).astype(np.int32) @ np.array([256, 16, 1])))
    return frac, float(lum.std()), distinct


def changed(a, b):
    """Pixels that differ clearly (some channel by more than 30) between two equal crops."""
    if a.shape != b.shape:
        return max(a.shape[0] * a.shape[1], b.shape[0] * b.shape[1])
    return int((np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2) > 30).sum())


# ------------------------------------------------------------------------------------ CJK
GLYPH_JS = r"""
(function (chars) {
  const probe = document.querySelector('#hm-keys span') || document.querySelector('#tokens .tok');
  const family = getComputedStyle(probe || document.body).fontFamily;
  const N = 40, c = document.createElement('canvas');
  c.width = c.height = N;
  const x = c.getContext('2d', { willReadFrequently: true });
  function bits(ch) {
    x.clearRect(0, 0, N, N);
    x.fillStyle = '#000'; x.font = '30px ' + family; x.textAlign = 'center'; x.textBaseline = 'middle';
    x.fillText(ch, N / 2, N / 2);
    const d = x.getImageData(0, 0, N, N).data, out = new Uint8Array(N * N);
    for (let i = 0; i < N * N; i++) out[i] = d[4 * i + 3] > 100 ? 1 : 0;
    return out;
  }
  const diff = (a, b) => { let n = 0; for (let i = 0; i < a.length; i++) n += a[i] !== b[i]; return n; };
  const ink = (a) => a.reduce((n, v) => n + v, 0);
  const tofu = bits('\uE000'), g = chars.map(bits);
  // Is the family installed? Latin text set in it must measure differently from the fallback
  // (document.fonts.check cannot tell: it answers true for any family that is not a web font).
  const width = (f) => { x.font = '30px ' + f; return x.measureText('Hamburgefonstiv 0123').width; };
  const fallback = width('monospace');
  return {
    family, tofuInk: ink(tofu),
    fontsCheck: document.fonts.check('16px "WenQuanYi Micro Hei"', chars.join('') || '\u6211'),
    wqyInstalled: width('"WenQuanYi Micro Hei", monospace') !== fallback,
    bogusInstalled: width('"No Such Font Qkv", monospace') !== fallback,
    chars: chars.map((ch, k) => ({ ch, ink: ink(g[k]), vsTofu: diff(g[k], tofu),
      vsOthers: chars.length > 1 ? Math.min(...g.map((h, m) => (m === k ? Infinity : diff(g[k], h)))) : 0 })),
  };
})
"""
TOKENS_JS = ("[...document.querySelectorAll('#tokens .tok > span:first-child, #hm-keys span, #hm-queries span')]"
             ".map((e) => e.textContent).join('')")


def han_chars(text):
    def han(c):
        o = ord(c)
        return 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FFFF
    seen = []
    for c in text:
        if han(c) and c not in seen:
            seen.append(c)
    return seen


def glyph_report(page, chars):
    """Which of `chars` render as real, distinct glyphs in the page's token font."""
    r = page.eval(f"({GLYPH_JS})({json.dumps(chars)})")
    real = [c["ch"] for c in r["chars"] if c["ink"] >= 15 and c["vsTofu"] >= 15 and c["vsOthers"] >= 10]
    return r, real


# ------------------------------------------------------------------------------------ checks
class Results:
    def __init__(self, quiet=False):
        self.items = []
        self.quiet = quiet

    def add(self, name, ok, detail=""):
        self.items.append((name, bool(ok), detail))
        if not self.quiet:
            print(f"  {'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)
        return ok

    def failed(self):
        return [n for n, ok, _ in self.items if not ok]

    def ok(self):
        return not self.failed()


DATA_TAG = '<script id="qkv-data" type="application/json">'


def page_data(text):
    """The data embedded in a saved page's text (JSON; None when the block is empty)."""
    a = text.index(DATA_TAG) + len(DATA_TAG)
    raw = text[a:text.index("</script>", a)]
    return json.loads(raw) if raw.strip() else None


def weights(layer, h):
    """Head h of an analysis or snapshot layer as (Tq, Tk) numbers, as the page decodes them."""
    b = base64.b64decode(layer["weights"][h])
    Tq, Tk = len(layer["query_tokens"]), len(layer["key_tokens"])
    if layer.get("encoding", "float32") == "uint8":
        return (np.frombuffer(b, np.uint8).astype(np.float64) / 255).astype(np.float32).reshape(Tq, Tk)
    return np.frombuffer(b, "<f4").reshape(Tq, Tk)


def check_numbers(page, res, doc):
    """The labels on the squares and the row-per-head view's numbers are those of the page's data."""
    A = doc["analysis"]
    if doc.get("heads"):
        want = {(x["layer_index"], x["head"]): x["label"] for x in doc["heads"]["heads"]}
        shown = page.eval("[...document.querySelectorAll('#grid .cell[data-label]')].map((c) => "
                          "[+c.dataset.layer, +c.dataset.head, c.dataset.label, c.querySelector('.hl').textContent])")
        ok = len(shown) == len(want) and all(want.get((l, h)) == lab == text for l, h, lab, text in shown)
        res.add("the label on each square is the data's (qkv heads')", ok,
                f"{len(shown)} squares, e.g. {shown[:3]}; data {list(want.items())[:3]}")
    rows = page.eval("""(() => { const t = document.getElementById('rows');
      return {query: +t.dataset.query, rows: [...t.querySelectorAll('tr[data-layer]')].map((tr) =>
        [+tr.dataset.layer, +tr.dataset.head, [...tr.querySelectorAll('td')].map((td) => [td.dataset.v, td.textContent])])}; })()""")
    q, worst, ok, n = rows["query"], 0.0, bool(rows["rows"]), 0
    for l, h, cells in rows["rows"]:
        w = weights(A["layers"][l], h)[q]
        ok &= len(cells) == len(w)
        for (v, text), x in zip(cells, w):
            ok &= float(v) == float(x) and (text == "" if x == 0 else abs(float(text) - 100 * float(x)) <= 0.051)
            n += 1
    res.add("the row per head: every head's weights of the query are the data's, exactly", ok,
            f"query {q}, {len(rows['rows'])} heads, {n} weights")


def check_page(browser, html, expect_snapshots=False, expect_cjk=False, timeout=60.0, shots=None, quiet=False):
    """Run every check on one page; returns (Results, info dict)."""
    res, info = Results(quiet), {}
    page = Page(browser)
    shot = (lambda name: str(Path(shots) / name)) if shots else (lambda name: None)
    try:
        doc = page_data(Path(html).read_text(encoding="utf-8"))
    except (ValueError, KeyError):
        doc = None
    try:
        url = Path(html).resolve().as_uri()
        t0 = time.monotonic()
        page.navigate(url, timeout=timeout)
        # ready, or an error that means it never will be (a syntax error stops the script)
        page.wait_for("!!(window.qkvStudio && (qkvStudio.ready || qkvStudio.errors.length))", timeout)
        ready = page.eval("!!(window.qkvStudio && qkvStudio.ready && qkvStudio.state)")
        info["load_s"] = time.monotonic() - t0
        if not res.add("page ready", ready, f"qkvStudio.ready after {info['load_s']:.2f} s" if ready
                       else f"qkvStudio.ready still false after {info['load_s']:.1f} s (hang guard {timeout:.0f} s)"):
            return res, info
        st = page.eval("qkvStudio.state()")
        info["problem_text"] = page.eval("(() => { const p = document.getElementById('problems');"
                                         " return p && !p.hidden && p.getBoundingClientRect().height > 0 ? p.innerText : ''; })()")
        if not res.add("no data problems", not st["problems"] and not info["problem_text"],
                       "; ".join(st["problems"][:3]) or info["problem_text"][:200]):
            return res, info
        heads = page.eval("document.querySelectorAll('#grid .cell[data-label]').length")
        want = sum(len(L["weights"]) for L in doc["analysis"]["layers"]) if doc else -1
        res.add("a square per head, the page saved", st["saved"] and heads == want, f"{heads} squares, {want} heads")

        # the grid: heatmap colours, not a blank area
        page.eval("qkvStudio.box('#grid')")
        page.settle()
        img = page.screenshot(shot("grid.png"))
        r = page.rect("#grid")
        if res.add("grid visible", r is not None, f"box {r}"):
            frac, spread, distinct = heatmap_stats(crop(img, r))
            res.add("grid shows heatmaps", frac >= 0.05 and spread >= 8 and distinct >= 6,
                    f"{100 * frac:.1f}% coloured pixels (need 5%), luminance spread {spread:.1f} (need 8), "
                    f"{distinct} colours (need 6)")
        if doc:
            check_numbers(page, res, doc)

        # one head, large: click its square, hover weights with the real mouse
        box = page.eval("qkvStudio.box(\"#grid .cell[data-layer='0'][data-head='0'] canvas\")")
        page.click(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
        page.settle()
        st = page.eval("qkvStudio.state()")
        res.add("clicking square 0.0 opens head 0.0", st["sel"]["layer"] == 0 and st["sel"]["head"] == 0, st["sel"])
        layer0 = doc["analysis"]["layers"][0] if doc else None
        Tq, Tk = (len(layer0["query_tokens"]), len(layer0["key_tokens"])) if layer0 else (1, 1)

        def over_crop():
            r = page.rect("#hm-over", clip_to=".hmscroll")
            return crop(page.screenshot(), r) if r else np.zeros((1, 1, 3), np.uint8)

        def hover(i, j):
            """Off the map, then onto weight (i, j): the state and the pixels of the map that changed."""
            b = page.eval(f"qkvStudio.cellBox({i}, {j})")  # scrolled into view first: the crops are alike
            page.move(2, 2)
            page.settle()
            before = over_crop()
            page.move(b["x"] + b["w"] / 2, b["y"] + b["h"] / 2)
            page.settle()
            return page.eval("qkvStudio.state()"), b["w"], changed(before, over_crop())

        cells = [(min(Tq - 1, 1), 0), (min(Tq - 1, max(2, Tq // 2)), min(Tk - 1, 2))]
        for n, (i, j) in enumerate(cells):
            st, c, moved = hover(i, j)
            status = page.eval("(() => { const s = document.getElementById('hm-status');"
                               " return [s.dataset.v, s.textContent]; })()")
            want_w = float(weights(layer0, 0)[i, j]) if layer0 else None
            res.add(f"the mouse on weight ({i}, {j}) is seen, its exact weight named",
                    st["hover"] == {"i": i, "j": j} and status[0] != "" and float(status[0]) == want_w
                    and f"{want_w:.4f}" in status[1], f"hover {st['hover']}; page says {status[1]!r}; data {want_w}")
            res.add(f"hovering weight ({i}, {j}) marks it", moved >= 2 * c, f"{moved} pixels changed (need {2 * c})")
            if n == 0 and shots:
                page.screenshot(shot("head_hover.png"))
        # a click on a row makes it the query: the marked row moves, the row-per-head view follows
        k = min(Tq - 1, 2)
        b = page.eval(f"qkvStudio.cellBox({k}, 0)")
        page.move(2, 2)
        page.settle()
        before = over_crop()
        page.click(b["x"] + b["w"] / 2, b["y"] + b["h"] / 2)
        page.move(2, 2)
        page.settle()
        st = page.eval("qkvStudio.state()")
        moved = changed(before, over_crop())
        query = page.eval("+document.getElementById('rows').dataset.query")
        res.add(f"clicking row {k} makes it the query, the row per head follows",
                st["sel"]["query"] == k and query == k, f"sel {st['sel']}, rows of query {query}")
        res.add("the marked row moves", Tq == 1 or k == 0 or moved >= 2 * b["w"], f"{moved} pixels changed")
        if doc:
            check_numbers(page, res, doc)
        # keys: up and down choose the query, left and right the head
        page.eval("document.getElementById('hm').focus()")
        page.key("ArrowDown", 40)
        st = page.eval("qkvStudio.state()")
        res.add("ArrowDown moves the query down", st["sel"]["query"] == min(Tq - 1, k + 1), st["sel"])
        page.key("ArrowRight", 39)
        st = page.eval("qkvStudio.state()")
        nh = len(layer0["weights"]) if layer0 else 1
        res.add("ArrowRight opens the next head", (st["sel"]["layer"], st["sel"]["head"]) ==
                ((0, 1) if nh > 1 else (1, 0) if doc and len(doc["analysis"]["layers"]) > 1 else (0, 0)), st["sel"])

        # training snapshots
        if expect_snapshots:
            has_tab = page.eval("(() => { const b = document.getElementById('tab-train');"
                                " return !!b && b.offsetParent !== null; })()")
            if has_tab:
                box = page.eval("qkvStudio.box('#tab-train')")
                page.click(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
                page.wait_for("qkvStudio.state().snap !== null", 20)
            slider = page.rect("#snap-step")
            st = page.eval("qkvStudio.state()")
            n = st["snap"]["steps"] if st["snap"] else 0
            if res.add("snapshot slider", has_tab and n >= 2 and slider is not None, f"{n} steps, slider box {slider}"):
                page.eval("qkvStudio.setSnapshot(0)")
                page.settle()
                label0 = page.eval("document.getElementById('snap-label').textContent")
                g0 = crop(page.screenshot(), page.rect("#snap-grid"))
                x0, y0, x1, y1 = page.rect("#snap-step")
                page.click(x1 - 3, (y0 + y1) / 2)        # the right end of the track: the last step
                page.wait_for(f"qkvStudio.state().snap.index === {n - 1}", 20)
                page.settle()
                st = page.eval("qkvStudio.state()")
                label1 = page.eval("document.getElementById('snap-label').textContent")
                g1 = crop(page.screenshot(shot("snapshot_last.png")), page.rect("#snap-grid"))
                moved = changed(g0, g1)
                res.add("clicking the slider's end selects the last step", st["snap"]["index"] == n - 1,
                        f"snapshot {st['snap']['index']} of 0..{n - 1}")
                res.add("the shown step changes", label0 != label1 and str(st["snap"]["step"]) in label1,
                        f"{label0!r} -> {label1!r}")
                res.add("the grid is redrawn for that step", moved >= 500, f"{moved} grid pixels changed (need 500)")
            if has_tab:
                page.eval("qkvStudio.setTab('look')")

        # CJK glyphs
        if expect_cjk:
            page.settle()
            han = han_chars(page.eval(TOKENS_JS))
            if res.add("tokens contain CJK characters", len(han) >= 3, f"{len(han)} distinct: {''.join(han[:12])}"):
                r, real = glyph_report(page, han[:8])
                res.add("CJK characters render as distinct glyphs, not tofu", len(real) == len(han[:8]),
                        f"{len(real)}/{len(han[:8])} real in {r['family']!r}; tofu ink {r['tofuInk']}; "
                        + ", ".join(f"{c['ch']} ink {c['ink']} vs tofu {c['vsTofu']} vs others {c['vsOthers']}"
                                    for c in r["chars"][:4]))
                res.add("WenQuanYi Micro Hei is installed and usable", r["wqyInstalled"] and not r["bogusInstalled"],
                        f"Latin text in it measures {'differently from' if r['wqyInstalled'] else 'the same as'} "
                        f"the fallback (a made-up family: {'differently: the probe is broken' if r['bogusInstalled'] else 'the same'}); "
                        f"document.fonts.check says {r['fontsCheck']} (it says true for any non-web font)")
            if shots:
                page.screenshot(shot("cjk.png"))
    except CDPError as e:
        res.add("browser session", False, str(e))
    finally:
        try:
            browser.pump(0.2)
            errs = page.page_errors()
            own = page.eval("window.qkvStudio ? qkvStudio.errors : []") or []
            banner = page.eval("(() => { const b = document.getElementById('banner');"
                               " return b && !b.hidden ? b.innerText : ''; })()")
        except CDPError as e:
            errs, own, banner = [str(e)], [], ""
        info["errors"] = errs + [f"qkvStudio.errors: {m}" for m in own]
        info["banner"] = banner
        res.add("no errors from the page", not info["errors"] and not banner,
                "; ".join(info["errors"][:4])[:600] if info["errors"] else (banner[:300] or "none"))
        page.close()
    return res, info


# ------------------------------------------------------------------------------------ self-test
def load(path, name):
    sys.dont_write_bytecode = True     # no __pycache__ beside the sources
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def self_test(browser, shots=None):
    """Broken pages must fail the right check: the test can fail."""
    sample = load(HERE / "make_sample.py", "make_sample")
    writer = load(ROOT / "scripts" / "studio_page.py", "studio_page")

    def doc(**kw):
        a = dict(tokens=12, layers=2, heads=4, snapshots=0, chinese=False, arch="encoder", causal=False,
                 seed=1, title="self-test")
        a.update(kw)
        return sample.make(argparse.Namespace(**a))

    tmp = Path(tempfile.mkdtemp(prefix="qkv-viewer-selftest-"))
    outcomes = []

    def case(name, page_text, want_fail, expect_snapshots=False, expect_cjk=False, also=None):
        path = tmp / (name.replace(" ", "_") + ".html")
        path.write_text(page_text, encoding="utf-8")
        res, info = check_page(browser, path, expect_snapshots, expect_cjk, quiet=True)
        failed = set(res.failed())
        if want_fail:
            ok = set(want_fail) <= failed
            what = f"failed as expected: {sorted(set(want_fail))}" if ok else \
                f"expected {sorted(set(want_fail) - failed)} to fail; failed: {sorted(failed)}"
        else:
            ok = not failed
            what = "all checks passed" if ok else f"unexpected failures: {sorted(failed)}"
        if ok and also:
            ok, extra = also(res, info)
            what += "; " + extra
        outcomes.append(ok)
        print(f"  {'ok  ' if ok else 'FAIL'} self-test: {name}: {what}", flush=True)

    good = doc()
    good_page = writer.page(good)
    rows_check = "the row per head: every head's weights of the query are the data's, exactly"
    try:
        case("a good page passes", good_page, [])
        case("a good snapshot page passes", writer.page(doc(snapshots=4)), [], expect_snapshots=True)
        case("a good Chinese page passes", writer.page(doc(chinese=True)), [], expect_cjk=True)
        case("a good encoder-decoder page passes", writer.page(doc(arch="encoder_decoder", layers=1)), [])

        err_page = good_page.replace(
            "</body>", "<script>setTimeout(function () { qkvSelfTestNoSuchFunction(); }, 0);</script></body>")
        case("a deliberate JS error is reported", err_page, ["no errors from the page"],
             also=lambda r, i: (any("qkvSelfTestNoSuchFunction" in e for e in i["errors"]) and
                                "qkvSelfTestNoSuchFunction" in i["banner"],
                                "named in the errors and in the page's banner"))
        marker = "const H = window.qkvStudio;\n"
        assert good_page.count(marker) == 1
        broken = good_page.replace(marker, "const H = window.qkvStudio; +;\n")
        case("a syntax error in the page's script is reported", broken, ["page ready", "no errors from the page"],
             also=lambda r, i: (i["load_s"] < 30 and "SyntaxError" in i["banner"],
                                f"banner shows the SyntaxError, reported after {i['load_s']:.1f} s"))

        bad = copy.deepcopy(good)
        bad["analysis"]["layers"][1]["weights"][2] = base64.b64encode(bytes(12 * 12 * 4 - 1)).decode()
        case("bad weights are named on the page", writer.page(bad), ["no data problems", "no errors from the page"],
             also=lambda r, i: ("analysis.layers[1].weights[2]" in i.get("problem_text", "") and
                                "575 bytes" in i.get("problem_text", ""),
                                f"page says: {[l for l in i.get('problem_text', '').splitlines() if 'weights' in l][:1]}"))
        bad = copy.deepcopy(good)
        bad["version"] = 2
        del bad["analysis"]["layers"][0]["kind"]
        case("a wrong version is named on the page", writer.page(bad), ["no data problems"],
             also=lambda r, i: ("version: expected 1" in i.get("problem_text", ""), "names the version"))
        bad = copy.deepcopy(good)
        del bad["analysis"]["layers"][0]["kind"]
        bad["analysis"]["layers"][1]["query_tokens"] = "not a list"
        case("missing fields are named on the page", writer.page(bad), ["no data problems"],
             also=lambda r, i: ("analysis.layers[0].kind" in i.get("problem_text", "") and
                                "analysis.layers[1].query_tokens" in i.get("problem_text", ""), "names both fields"))
        case("a page without data says so", writer.page(None, raw=""), ["no data problems"],
             also=lambda r, i: ("holds no data" in i.get("problem_text", ""), "says it holds no data"))

        hidden = good_page.replace("</head>", "<style>canvas { visibility: hidden; }</style></head>")
        case("blank heatmaps fail the pixel check", hidden, ["grid shows heatmaps"])
        dead = good_page.replace(
            "<head>", "<head><script>CanvasRenderingContext2D.prototype.strokeRect = function () {};</script>")
        case("a hover that marks nothing fails the hover check", dead, ["hovering weight (1, 0) marks it"])
        wrong = good_page.replace("td.dataset.v = String(x);", "td.dataset.v = String(x + 1e-3);")
        case("a page showing other numbers fails the numbers check", wrong, [rows_check])
        relabel = good_page.replace("cell.dataset.label = info ? info.label : '';", "cell.dataset.label = 'x';")
        case("a page showing other labels fails the labels check", relabel,
             ["the label on each square is the data's (qkv heads')"])
        case("a page without snapshots fails --expect-snapshots", good_page, ["snapshot slider"], expect_snapshots=True)

        pua = copy.deepcopy(good)
        for L in pua["analysis"]["layers"]:
            L["query_tokens"] = L["key_tokens"] = [chr(0xE001 + i) for i in range(len(L["query_tokens"]))]
        pua["analysis"]["tokens"] = pua["analysis"]["layers"][0]["query_tokens"]
        case("private-use tokens fail --expect-cjk", writer.page(pua), ["tokens contain CJK characters"],
             expect_cjk=True)

        # the glyph comparison itself: tofu must be recognised as tofu, CJK as glyphs
        page = Page(browser)
        try:
            path = tmp / "glyphs.html"
            path.write_text(good_page, encoding="utf-8")
            page.navigate(path.resolve().as_uri())
            page.wait_for("qkvStudio.ready", 60)
            _, real_pua = glyph_report(page, [chr(0xE001), chr(0xE002), chr(0xF8FF)])
            _, real_cjk = glyph_report(page, list("我爱猫鼠"))
            ok = not real_pua and len(real_cjk) == 4
            outcomes.append(ok)
            print(f"  {'ok  ' if ok else 'FAIL'} self-test: the glyph check tells tofu from CJK: "
                  f"private-use judged real: {real_pua or 'none'}; CJK judged real: {''.join(real_cjk)}", flush=True)
        finally:
            page.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return all(outcomes)


# ------------------------------------------------------------------------------------ main
def main(argv=None):
    ap = argparse.ArgumentParser(description="Real-browser test of the studio's page, saved (qkv view).")
    ap.add_argument("page", nargs="?", type=Path, help="the HTML page to test")
    ap.add_argument("--expect-snapshots", action="store_true", help="the page has training snapshots")
    ap.add_argument("--expect-cjk", action="store_true", help="the page's tokens are CJK text")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--timeout", type=float, default=60.0, help="hang guard for loading, seconds (default 60)")
    ap.add_argument("--shots", type=Path, help="save screenshots (PNG) in this folder")
    ap.add_argument("--self-test", action="store_true", help="prove the checks fail on broken pages")
    a = ap.parse_args(argv)
    if not a.self_test and not a.page:
        ap.error("give a PAGE.html to test, or --self-test")
    if a.page and not a.page.is_file():
        print(f"browser_test: {a.page}: no such file", file=sys.stderr)
        return 1
    if not Path(a.chromium).exists():
        print(f"browser_test: {a.chromium} not found: apt-get install chromium fonts-wqy-microhei "
              "(scripts/install-deps.sh installs them)", file=sys.stderr)
        return 1
    if a.shots:
        a.shots.mkdir(parents=True, exist_ok=True)
    try:
        browser = start_browser(a.chromium)
    except CDPError as e:
        print(f"browser_test: {e}", file=sys.stderr)
        return 1
    try:
        if a.self_test:
            print("browser_test: self-test (broken pages must fail the right check)")
            ok = self_test(browser, a.shots)
        else:
            print(f"browser_test: {a.page} ({a.page.stat().st_size / 1e6:.1f} MB)")
            res, info = check_page(browser, a.page, a.expect_snapshots, a.expect_cjk, a.timeout, a.shots)
            ok = res.ok()
            if "load_s" in info:
                print(f"browser_test: load time (navigation to qkvStudio.ready): {info['load_s']:.2f} s")
            if not ok:
                print(f"browser_test: failed: {', '.join(res.failed())}")
    finally:
        browser.close()
    print(f"browser_test: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
