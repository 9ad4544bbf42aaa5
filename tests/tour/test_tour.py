#!/usr/bin/python3
"""The guided tour never rots: run every command of docs/tour.md and docs/tour.zh.md.

    test_tour.py --qkv BUILD/qkv --workdir DIR

Every line of a ```sh block is a command, run in order in DIR (where configs/ and scripts/ point
into the source tree, and `qkv` is BUILD/qkv). `qkv train` commands get tiny settings appended
(TINY below: a few steps; the Chinese corpus is generated, so the test needs no fortunes-zh), so
the whole tour runs in about a minute. Every command must exit 0. A ```text block after a ```sh
block shows the output of that block's last command: its first two lines must appear in the real
output, with numbers masked (the tiny models' numbers differ, the shape of the output must not).
Both tours must have the same commands. Exit 0 when everything passed.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
TOURS = [ROOT / "docs" / "tour.md", ROOT / "docs" / "tour.zh.md"]
COMMON = ["--set", "schedule.warmup_steps=5", "--set", "train.eval_every=10", "--set", "train.checkpoint_every=10",
          "--set", "train.threads=1", "--quiet"]
TINY = {
    "configs/sort.yaml": ["--set", "train.steps=20", "--set", "task.eval_size=64"] + COMMON,
    "configs/induction.yaml": ["--set", "train.steps=20", "--set", "task.eval_size=64"] + COMMON,
    "configs/zh.yaml": ["--set", "train.steps=10", "--set", "task.eval_size=16", "--set", "task.path=zh.txt"] + COMMON,
}


def blocks(path):
    """[(kind, lines)] of the fenced blocks of a markdown file, kind 'sh' or 'text'."""
    out, kind, lines = [], None, []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^```(\w*)\s*$", line)
        if m and kind is None:
            kind, lines = m.group(1) or "plain", []
        elif m and kind is not None:
            out.append((kind, lines))
            kind = None
        elif kind is not None:
            lines.append(line)
    return out


def commands(lines):
    cmds = []
    for line in lines:
        line = line.split("  #")[0].strip()
        if line and not line.startswith("#"):
            cmds.append(line)
    return cmds


def mask(s):
    s = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", s)
    return " ".join(s.split())


def run_tour(path, qkv, work, failures):
    print(f"{path.relative_to(ROOT)}:", flush=True)
    env = dict(os.environ, PATH=f"{Path(qkv).parent}:{os.environ['PATH']}")
    last_output, ran = None, []
    for kind, lines in blocks(path):
        if kind == "sh":
            for cmd in commands(lines):
                ran.append(cmd)
                if cmd.startswith("export "):
                    continue  # the PATH line: done above
                argv = shlex.split(cmd)
                if argv[0] == "qkv":
                    argv[0] = qkv
                    if argv[1] == "train":
                        argv += TINY[argv[2]]
                r = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
                ok = r.returncode == 0
                print(f"  {'ok  ' if ok else 'FAIL'} {cmd}", flush=True)
                if not ok:
                    failures.append(f"{path.name}: {cmd}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
                last_output = r.stdout + r.stderr
        elif kind == "text" and last_output is not None:
            want = [l for l in lines if l.strip() and l.strip() != "..."][:2]
            have = {mask(l) for l in last_output.splitlines()}
            for w in want:
                ok = mask(w) in have
                print(f"  {'ok  ' if ok else 'FAIL'}   output has: {w[:90]}", flush=True)
                if not ok:
                    failures.append(f"{path.name}: the output of '{ran[-1]}' has no line like '{w}'")
    return ran


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True, type=Path)
    a = ap.parse_args()
    failures, lists = [], []
    for i, tour in enumerate(TOURS):
        work = a.workdir / f"tour{i}"
        subprocess.run(["rm", "-rf", str(work)], check=True)
        work.mkdir(parents=True)
        for d in ("configs", "scripts"):
            (work / d).symlink_to(ROOT / d)
        (work / "zh.txt").write_text("".join(f"我爱吃苹果。狗喜欢追逐老鼠。今天我爱你。{i % 7}\n" for i in range(400)),
                                     encoding="utf-8")
        lists.append(run_tour(tour, str(Path(a.qkv).resolve()), work, failures))
    same = lists[0] == lists[1]
    print(f"  {'ok  ' if same else 'FAIL'} both tours run the same {len(lists[0])} commands", flush=True)
    if not same:
        failures.append("docs/tour.md and docs/tour.zh.md differ in their commands: " +
                        str(sorted(set(lists[0]) ^ set(lists[1]))))
    for f in failures:
        print("FAIL:", f)
    print(f"test_tour: {'PASS' if not failures else 'FAIL'}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
