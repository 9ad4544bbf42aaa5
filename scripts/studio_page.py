#!/usr/bin/env python3
"""Write the studio's page, saved: share/studio/ in one HTML file with the page's data embedded.

    scripts/studio_page.py DATA.json OUT.html [--share share/studio]

Does what `qkv view` does in C++ (src/app/view.cpp, offline_page) for anyone holding the JSON the
page reads (format qkv-studio-page, docs/viewer.md): tests build broken pages with it, and
tests/viewer/test_qkv_view.py checks that `qkv view` writes the same bytes. The page needs no
network: open OUT.html in any browser. Importable: page(data, share_dir) -> str.
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

SHARE = Path(__file__).resolve().parent.parent / "share" / "studio"
STYLE_TAG = '<link rel="stylesheet" href="/studio.css">'
SCRIPT_TAG = '<script src="/studio.js" defer></script>'
SPLIT_LINE = "// ==== qkv view: the page's script starts here"
DATA_TAG = '<script id="qkv-data" type="application/json">'
POLICY = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; script-src \'unsafe-inline\'; '
          'style-src \'unsafe-inline\'; img-src data: blob:">')


def script_safe_json(data) -> str:
    """JSON text that cannot end or confuse the <script> element holding it (the embedding rule).

    "</" only occurs inside JSON strings, where "<\\/" is a valid escape of the same text; "<!--"
    would let a later "<script" switch the HTML parser into a state where "</script>" no longer
    closes the element, so it is written as "<\\u0021--". Written as qkv's JSON writer writes it.
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


def replace_once(text, what, by):
    if text.count(what) != 1:
        raise ValueError(f"the studio's page: expected {what!r} exactly once, found it {text.count(what)} times")
    return text.replace(what, by)


def page(data, share=SHARE, raw=None) -> str:
    """The page with `data` embedded (or `raw`, text put in the data element as it is)."""
    html = (Path(share) / "studio.html").read_text(encoding="utf-8")
    css = (Path(share) / "studio.css").read_text(encoding="utf-8")
    js = (Path(share) / "studio.js").read_text(encoding="utf-8")
    at = js.find(SPLIT_LINE)
    if at < 0:
        raise ValueError(f"studio.js: no {SPLIT_LINE!r}")
    body = script_safe_json(data) if raw is None else raw
    html = replace_once(html, STYLE_TAG, POLICY + "\n<style>\n" + css + "</style>")
    return replace_once(html, SCRIPT_TAG, "<script>\n" + js[:at] + "</script>\n" + DATA_TAG + body +
                        "</script>\n<script>\n" + js[at:] + "</script>")


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, then rename: never a half-written page."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write the studio's page, saved, with a JSON document embedded.")
    ap.add_argument("data", type=Path, help="the page's data (format qkv-studio-page, docs/viewer.md)")
    ap.add_argument("out", type=Path, help="HTML page to write")
    ap.add_argument("--share", type=Path, default=SHARE, help=f"the studio's files (default: {SHARE})")
    a = ap.parse_args(argv)
    try:
        with open(a.data, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        print(f"studio_page: cannot read {a.data}: {e.strerror}", file=sys.stderr)
        return 1
    except json.JSONDecodeError as e:
        print(f"studio_page: {a.data}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}", file=sys.stderr)
        return 1
    if not isinstance(data, dict) or data.get("format") != "qkv-studio-page" or data.get("version") != 1:
        found = (data.get("format"), data.get("version")) if isinstance(data, dict) else type(data).__name__
        # The page itself explains bad data in detail; write it anyway so that it can.
        print(f"studio_page: warning: {a.data}: expected format 'qkv-studio-page' version 1, found {found!r}; "
              "the page will show what is wrong", file=sys.stderr)
    try:
        text = page(data, a.share)
    except (OSError, ValueError) as e:
        print(f"studio_page: {a.share}: {e}", file=sys.stderr)
        return 1
    try:
        write_atomic(a.out, text)
    except OSError as e:
        print(f"studio_page: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"studio_page: wrote {a.out} ({len(text.encode('utf-8')) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
