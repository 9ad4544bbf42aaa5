#!/usr/bin/env python3
"""Write a self-contained attention viewer page: the template with its data placeholder replaced.

    scripts/viewer_fill.py DATA.json OUT.html [--template share/viewer/viewer.html]

Does what `qkv view` does in C++, for tests and for anyone holding a qkv-viewer JSON file
(format in docs/viewer.md). The page needs no network: open OUT.html in any browser.
Importable: fill(template_text, data) -> str.
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

PLACEHOLDER = "/*QKV_DATA*/"
DEFAULT_TEMPLATE = Path(__file__).resolve().parent.parent / "share" / "viewer" / "viewer.html"


def script_safe_json(data) -> str:
    """JSON text that cannot end or confuse the <script> element holding it.

    "</" only occurs inside JSON strings, where "<\\/" is a valid escape of the same text; "<!--"
    would let a later "<script" switch the HTML parser into a state where "</script>" no longer
    closes the element, so it is written as "<\\u0021--".
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\u0021--")


def fill(template_text: str, data: dict) -> str:
    """The template with its one placeholder replaced by `data` as JSON."""
    n = template_text.count(PLACEHOLDER)
    if n != 1:
        raise ValueError(f"viewer template: expected exactly one {PLACEHOLDER} placeholder, found {n}")
    head, tail = template_text.split(PLACEHOLDER)
    return head + script_safe_json(data) + tail


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
    ap = argparse.ArgumentParser(description="Fill the qkv attention viewer template with a JSON document.")
    ap.add_argument("data", type=Path, help="qkv-viewer JSON document (docs/viewer.md)")
    ap.add_argument("out", type=Path, help="HTML page to write")
    ap.add_argument("--template", type=Path, default=DEFAULT_TEMPLATE, help=f"default: {DEFAULT_TEMPLATE}")
    a = ap.parse_args(argv)
    try:
        template = a.template.read_text(encoding="utf-8")
    except OSError as e:
        print(f"viewer_fill: cannot read the template {a.template}: {e.strerror}", file=sys.stderr)
        return 1
    try:
        with open(a.data, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        print(f"viewer_fill: cannot read {a.data}: {e.strerror}", file=sys.stderr)
        return 1
    except json.JSONDecodeError as e:
        print(f"viewer_fill: {a.data}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}", file=sys.stderr)
        return 1
    if not isinstance(data, dict) or data.get("format") != "qkv-viewer" or data.get("version") != 1:
        found = (data.get("format"), data.get("version")) if isinstance(data, dict) else type(data).__name__
        # The page itself explains bad data in detail; write it anyway so that it can.
        print(f"viewer_fill: warning: {a.data}: expected format 'qkv-viewer' version 1, found {found!r}; "
              "the page will show what is wrong", file=sys.stderr)
    try:
        page = fill(template, data)
    except ValueError as e:
        print(f"viewer_fill: {a.template}: {e}", file=sys.stderr)
        return 1
    try:
        write_atomic(a.out, page)
    except OSError as e:
        print(f"viewer_fill: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"viewer_fill: wrote {a.out} ({len(page.encode('utf-8')) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
