#!/usr/bin/python3
"""The screenshots of docs/studio.md, made again: a grammar model trained (or given), served by
`qkv serve`, shown in headless Chromium, each view captured and saved as a small palette PNG.

    tools/studio_screenshots.py --qkv build/qkv [--workdir /tmp/studio-shots] [--out docs/images]
                                  [--checkpoint CKPT --run DIR]

Without --checkpoint it trains configs/grammar_zh.yaml for 1200 steps with snapshots every 100
(about 1.5 minutes on one thread). Writes studio-look.png, studio-look-zh.png, studio-ablate.png,
studio-patch.png and studio-train.png. Needs chromium, fonts-wqy-microhei and /usr/bin/python3
with matplotlib and PIL (Debian's python3-matplotlib brings python3-pil).
"""
import argparse
import importlib.util
import io
import shutil
import sys
import time
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "studio"))
import studio_util as su  # noqa: E402


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bt = load("viewer_browser_test", ROOT / "tests" / "viewer" / "browser_test.py")
st = load("studio_browser_test", ROOT / "tests" / "studio" / "browser_test.py")


def save(page, path, height=None, colours=128):
    """The viewport (or its top `height` pixels) as a palette PNG of `colours` colours."""
    import base64
    page.eval("window.scrollTo(0, 0)")
    page.b.pump(0.2)
    data = base64.b64decode(page.call("Page.captureScreenshot", {"format": "png"}, timeout=60)["data"])
    img = Image.open(io.BytesIO(data)).convert("RGB")
    if height:
        img = img.crop((0, 0, img.width, min(img.height, height)))
    img = img.quantize(colors=colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    img.save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, {img.width}x{img.height})", flush=True)


def settle(page, seconds=0.6):
    st.wait_drawn(page)
    st.wait_explained(page)
    page.b.pump(seconds)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/studio-shots"))
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--run", type=Path)
    a = ap.parse_args()
    qkv = str(Path(a.qkv).resolve())
    a.out.mkdir(parents=True, exist_ok=True)
    ckpt, run = a.checkpoint, a.run
    if not ckpt:
        shutil.rmtree(a.workdir, ignore_errors=True)
        a.workdir.mkdir(parents=True)
        t = time.monotonic()
        ckpt = su.train(qkv, "grammar_zh.yaml", a.workdir / "grammar_zh", 1200, "--set", "train.snapshot_every=100",
                        "--set", "train.eval_every=100")
        run = a.workdir / "grammar_zh"
        print(f"trained configs/grammar_zh.yaml for 1200 steps in {time.monotonic() - t:.0f} s", flush=True)
    args = [ckpt] + (["--run", run] if run else [])
    with su.Server(qkv, *args) as server:
        browser = bt.start_browser("/usr/bin/chromium")
        page = bt.Page(browser)
        try:
            page.navigate(server.url + "/")
            page.wait_for("window.qkvStudio && qkvStudio.ready && qkvStudio.state().explain", 60)
            settle(page)
            save(page, a.out / "studio-look.png")
            st.click(page, "#langs button[data-lang='zh']")
            settle(page)
            save(page, a.out / "studio-look-zh.png")
            st.click(page, "#langs button[data-lang='en']")

            st.type_text(page, "#text", "我爱吃苹果")
            settle(page)
            st.click(page, "#tokens .tok[data-i='2']")  # hide 吃
            settle(page)
            for sel in ("#grid .cell[data-layer='2'][data-head='2'] .sw", "#grid .cell[data-layer='1'][data-head='0'] .sw"):
                st.click(page, sel)
                settle(page)
            page.wait_for("qkvStudio.state().heldout && qkvStudio.state().heldout.ablated.length === 2", 60)
            settle(page, 1.0)
            save(page, a.out / "studio-ablate.png")

            st.click(page, "#tabs button[data-tab='patch']")
            page.wait_for("qkvStudio.state().patch", 60)
            st.click(page, "#p-grid .pc[data-layer='1'][data-head='0']")
            page.b.pump(0.5)
            save(page, a.out / "studio-patch.png", height=600)

            if run:
                st.click(page, "#tabs button[data-tab='train']")
                page.wait_for("qkvStudio.state().snap", 30)
                page.b.pump(1.0)
                save(page, a.out / "studio-train.png", height=960)
        finally:
            page.close()
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
