#!/usr/bin/python3
"""The guided tour cannot rot: run every command of docs/tour.md and docs/tour.zh.md and check
every number they quote against what the commands print.

    test_tour.py --qkv BUILD/qkv --workdir DIR [--long] [--write]

Every line of a ```sh block is a command, run in order in DIR (where configs/, scripts/ and programs/
point into the source tree, and `qkv` is BUILD/qkv). Both tours must have the same commands.

- Numbers in the prose are marked <!--f:ID-->VALUE<!--/f--> (the comments do not show when the
  page is read); tests/tour/facts.py says which command's output holds each ID and where. A
  ```text block after a ```sh block shows lines of the output of that block's last command ("..."
  stands for lines left out).
- The short commands run exactly as written, and every fact and text line drawn from them must
  equal the output, on the CPU kind the tour was written on (the fact `cpu`: the vendor, family
  and model `qkv info` names; other kinds train to other bits, docs/reliability.md, so there each fact's
  number must still be in the output, and text lines are compared with numbers masked).
- The long commands (the models that train for minutes, LONG below) run with tiny settings (the
  Chinese corpus is generated, so no fortunes-zh is needed): every command must exit 0 and the
  text blocks must match with numbers masked. With --long they run as written and are checked as
  the short ones (`make tour`, about ten minutes).
- README.md quotes results of the shipped configs the same way; tests/tour/facts.py README_FACTS
  gives each one's command (run in the same directory; the sort run is the tour's), short ones
  checked always, long ones with --long.
- --write: put the measured values into the facts (after a change that moves them).
Exit 0 when everything passed.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from facts import FACTS, README_FACTS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
TOURS = [ROOT / "docs" / "tour.md", ROOT / "docs" / "tour.zh.md"]
FACT = re.compile(r"<!--f:([\w.]+)-->(.*?)<!--/f-->")
# Commands that train for minutes, and those that read their runs.
LONG = ["configs/grammar_zh.yaml", "runs/grammar_zh"]
COMMON = ["--set", "schedule.warmup_steps=5", "--set", "train.eval_every=10", "--set", "train.checkpoint_every=10",
          "--set", "train.threads=1", "--quiet"]
TINY = {
    "configs/grammar_zh.yaml": ["--set", "train.steps=30", "--set", "task.eval_size=64"] + COMMON,
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


def is_long(cmd):
    return any(x in cmd for x in LONG)


class Tour:
    def __init__(self, path, qkv, work, long, same_cpu, failures):
        self.path, self.qkv, self.work, self.long, self.failures = path, qkv, work, long, failures
        self._same = same_cpu
        self.outputs = {}  # command -> output (stdout then stderr)
        self.exact = set()  # commands run as written

    def fail(self, what):
        self.failures.append(f"{self.path.name}: {what}")

    def run(self):
        print(f"{self.path.relative_to(ROOT)}:", flush=True)
        env = dict(os.environ, PATH=f"{Path(self.qkv).parent}:{os.environ['PATH']}")
        last, ran = None, []
        for kind, lines in blocks(self.path):
            if kind == "sh":
                for cmd in commands(lines):
                    ran.append(cmd)
                    if cmd.startswith("export "):
                        continue  # the PATH line: done above
                    argv = shlex.split(cmd)
                    exact = self.long or not is_long(cmd)
                    if argv[0] == "qkv":
                        argv[0] = self.qkv
                        if argv[1] == "train" and not exact:
                            argv += TINY[argv[2]]
                    r = subprocess.run(argv, cwd=self.work, env=env, capture_output=True, text=True, timeout=3600)
                    ok = r.returncode == 0
                    print(f"  {'ok  ' if ok else 'FAIL'} {cmd}{'' if exact else '   (tiny settings)'}", flush=True)
                    if not ok:
                        self.fail(f"{cmd}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
                    last = cmd
                    self.outputs[cmd] = r.stdout + r.stderr
                    if exact:
                        self.exact.add(cmd)
            elif kind == "text" and last is not None:
                self.check_text(last, [l for l in lines if l.strip() and l.strip() != "..."])
        return ran

    def same_cpu(self):
        return self._same

    def check_text(self, cmd, want):
        have = self.outputs.get(cmd, "").splitlines()
        exact = cmd in self.exact and self.same_cpu()
        stripped = {l.rstrip() for l in have}
        masked = {mask(l) for l in have}
        for w in want:
            ok = w.rstrip() in stripped if exact else mask(w) in masked
            print(f"  {'ok  ' if ok else 'FAIL'}   output has{'' if exact else ' (numbers masked)'}: {w[:90]}", flush=True)
            if not ok:
                self.fail(f"the output of '{cmd}' has no line {'equal to' if exact else 'like'} '{w}'")

    def measured(self, fact):
        """The value of a fact in the output of its command, or None (with a failure noted)."""
        spec = FACTS.get(fact)
        if spec is None:
            self.fail(f"fact {fact} is not defined in tests/tour/facts.py")
            return None, False
        cmds = [c for c in self.outputs if spec["command"] in c]
        if not cmds:
            self.fail(f"fact {fact}: no command of the tour contains '{spec['command']}'")
            return None, False
        m = re.search(spec["pattern"], self.outputs[cmds[-1]], re.M)
        if not m:
            self.fail(f"fact {fact}: the output of '{cmds[-1]}' has nothing matching {spec['pattern']!r}")
            return None, False
        return m.group(1), cmds[-1] in self.exact

    def check_facts(self, write):
        text = self.path.read_text(encoding="utf-8")
        new = text
        for fact, value in FACT.findall(text):
            got, exact = self.measured(fact)
            if got is None:
                continue
            if not exact or not self._same:
                print(f"  ok     fact {fact} = {value} (found {got}; not compared)", flush=True)
                continue
            ok = got == value
            print(f"  {'ok  ' if ok else 'FAIL'}   fact {fact} = {value}" + ("" if ok else f", the output says {got}"), flush=True)
            if not ok and write:
                new = new.replace(f"<!--f:{fact}-->{value}<!--/f-->", f"<!--f:{fact}-->{got}<!--/f-->")
            elif not ok:
                self.fail(f"fact {fact}: the tour says {value}, '{[c for c in self.outputs if FACTS[fact]['command'] in c][-1]}' "
                          f"says {got} (tests/tour/test_tour.py --write updates the tours)")
        if write and new != text:
            self.path.write_text(new, encoding="utf-8")
            print(f"  wrote the measured facts into {self.path.relative_to(ROOT)}")


def check_readme(a, same_cpu, tour_outputs, failures):
    """The README's facts: each from its command's output (run here unless the tour ran it)."""
    path = ROOT / "README.md"
    text = path.read_text(encoding="utf-8")
    print("README.md:", flush=True)
    work = a.workdir / "tour0"
    outputs = dict(tour_outputs["outputs"])
    new = text
    for fact, value in FACT.findall(text):
        spec = README_FACTS.get(fact)
        if spec is None:
            failures.append(f"README.md: fact {fact} is not defined in tests/tour/facts.py README_FACTS")
            continue
        cmd = spec["command"]
        if spec.get("long") and not a.long:
            print(f"  ok     fact {fact} = {value} (a long run: make tour checks it)", flush=True)
            continue
        if cmd not in outputs:
            argv = shlex.split(cmd)
            argv[0] = str(Path(a.qkv).resolve())
            r = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=3600)
            outputs[cmd] = r.stdout + r.stderr
            print(f"  {'ok  ' if r.returncode == 0 else 'FAIL'} {cmd}", flush=True)
            if r.returncode != 0:
                failures.append(f"README.md: {cmd}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
                continue
        m = re.search(spec["pattern"], outputs[cmd], re.M)
        if not m:
            failures.append(f"README.md: fact {fact}: the output of '{cmd}' has nothing matching {spec['pattern']!r}")
            continue
        got = m.group(1)
        if not same_cpu:
            print(f"  ok     fact {fact} = {value} (found {got}; another CPU kind, not compared)", flush=True)
            continue
        ok = got == value
        print(f"  {'ok  ' if ok else 'FAIL'}   fact {fact} = {value}" + ("" if ok else f", the output says {got}"), flush=True)
        if not ok and a.write:
            new = new.replace(f"<!--f:{fact}-->{value}<!--/f-->", f"<!--f:{fact}-->{got}<!--/f-->")
        elif not ok:
            failures.append(f"README.md: fact {fact}: README says {value}, '{cmd}' says {got}")
    if a.write and new != text:
        path.write_text(new, encoding="utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--workdir", required=True, type=Path)
    ap.add_argument("--long", action="store_true", help="run the long commands as written too (make tour)")
    ap.add_argument("--write", action="store_true", help="write the measured facts into the tours")
    a = ap.parse_args()
    failures, lists = [], []
    outputs = {}
    # The CPU kind the tours were written on (their fact `cpu`) and this one's.
    written = dict(FACT.findall(TOURS[0].read_text(encoding="utf-8"))).get("cpu")
    info = subprocess.run([a.qkv, "info"], capture_output=True, text=True).stdout
    here = re.search(FACTS["cpu"]["pattern"], info, re.M)
    here = here.group(1) if here else None
    same = written is not None and here == written
    if not same:
        print(f"note: the tours were written on a CPU of kind {written}, this one is {here}: other bits, so every fact is "
              f"checked to be in its command's output, its value compared only on {written}", flush=True)
    for i, path in enumerate(TOURS):
        work = a.workdir / f"tour{i}"
        subprocess.run(["rm", "-rf", str(work)], check=True)
        work.mkdir(parents=True)
        for d in ("configs", "scripts", "programs"):
            (work / d).symlink_to(ROOT / d)
        tour = Tour(path, str(Path(a.qkv).resolve()), work, a.long, same, failures)
        if i > 0:  # the second tour runs the same commands: reuse the first one's outputs
            tour.outputs, tour.exact = outputs["outputs"], outputs["exact"]
            mine = [c for kind, lines in blocks(path) if kind == "sh" for c in commands(lines)]
            lists.append(mine)
            last = None
            for kind, lines in blocks(path):
                if kind == "sh":
                    last = commands(lines)[-1] if commands(lines) else last
                elif kind == "text" and last is not None:
                    tour.check_text(last, [l for l in lines if l.strip() and l.strip() != "..."])
        else:
            lists.append(tour.run())
            outputs = {"outputs": tour.outputs, "exact": tour.exact}
        tour.check_facts(a.write)
        print(f"{path.relative_to(ROOT)}: facts checked", flush=True)
    ids = [sorted(set(k for k, _ in FACT.findall(p.read_text(encoding="utf-8")))) for p in TOURS]
    if ids[0] != ids[1]:
        failures.append(f"the tours quote different facts: {sorted(set(ids[0]) ^ set(ids[1]))}")
    check_readme(a, same, outputs, failures)
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
