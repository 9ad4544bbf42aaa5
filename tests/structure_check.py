#!/usr/bin/python3
"""The architecture, checked: every include points down the layers, and the engine stays small.

    structure_check.py SOURCE_DIR
    structure_check.py --self-test SOURCE_DIR   the check fails on a copy with a wrong-way include
                                                and a library that installs a signal handler

1. Layers. Each folder of include/qkv/ and src/ (src/app is the application) may include the
   public headers of the layers listed for it in ALLOWED, and nothing above them. A wrong-way
   include fails, naming the file, the line and the rule. No folder may include another that
   (directly or through others) includes it: the allowed graph has no cycle. Every other quoted
   include ("json.hpp", "../interp/json.hpp", "app/loaded.hpp") must name a private header of the
   file's own folder: a relative path into another folder is a way around rule 1 and fails too.
   Public headers include public headers only.
2. Applications. src/app (the qkv command) and src/python (the module) include the library's
   public headers and their own folder's headers: the command includes no part of the Python
   module, and the module no part of the command (it links libqkv alone).
3. Process. The library (everything but src/app) leaves the process as it found it: no signal
   handlers, exits, environment changes, re-execution, forks or printing to stderr (FORBIDDEN
   below). src/python lives in the interpreter's process: the same rules hold for it.
4. Size. autograd/ and ops/ (headers and sources) stay under CAP lines: the engine's size when it
   was introduced (2,266 lines) plus room for rotary embeddings and two fused dropout ops;
   raising it is a decision to make in review, not a side effect.

Prints what it checked; exit 1 on any violation.
"""
import pathlib
import re
import sys

CAP = 2490

# Who may include whom (besides itself). Read as: the layers below each one.
ALLOWED = {
    "tensor": set(),
    "kernels": {"tensor"},
    "autograd": {"tensor", "kernels"},
    "ops": {"tensor", "kernels", "autograd"},
    "nn": {"tensor", "kernels", "autograd", "ops"},
    "optim": {"tensor", "kernels", "autograd", "ops", "nn"},
    "rasp": {"tensor"},
    "data": {"tensor", "rasp"},
    "io": {"tensor"},
    "config": {"tensor", "nn", "optim", "data", "io"},
    "dist": {"tensor", "kernels", "autograd", "nn"},
    "model": {"tensor", "kernels", "autograd", "ops", "nn", "data", "io", "config"},
    "train": {"tensor", "kernels", "autograd", "ops", "nn", "optim", "data", "io", "config", "dist", "model"},
    "interp": {"tensor", "kernels", "autograd", "ops", "nn", "data", "io", "config", "model"},
    "runs": {"tensor", "kernels", "autograd", "ops", "nn", "optim", "data", "io", "config", "dist", "model", "train",
             "interp"},
    "compile": {"tensor", "kernels", "autograd", "ops", "nn", "rasp", "data", "io", "config", "model"},
}
LAYERS = set(ALLOWED)

# Calls that belong to a process, not to a library (src/app owns them).
FORBIDDEN = [
    (re.compile(r"\b(std::)?signal\s*\(|\bsigaction\s*\("), "installs a signal handler"),
    (re.compile(r"\b(std::)?(exit|_Exit|quick_exit|abort)\s*\("), "ends the process"),
    (re.compile(r"\b(setenv|unsetenv|putenv)\s*\("), "changes the environment"),
    (re.compile(r"\bexec[lv]p?e?\s*\("), "re-executes the process"),
    (re.compile(r"\b(fork|vfork)\s*\("), "forks the process"),
    (re.compile(r"\b(std::)?getenv\s*\("), "reads the environment"),
    (re.compile(r"std::cerr|\bstderr\b"), "prints to stderr"),
]
# The MPI process group is where a launcher's environment is read and a run is aborted on every
# rank (dist::world(), Comm::abort): the application's to call.
PROCESS_EXEMPT = {"include/qkv/dist/comm.hpp", "src/dist/comm.cpp", "src/dist/mpi_comm.cpp"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"qkv/([a-z_]+)/')
QUOTED = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
APPS = {"app", "python"}


def private_include_problem(rel, n, target, root):
    """A quoted include that is not "qkv/...": it must be a header of the file's own folder (and
    never in a public header)."""
    if target.startswith("qkv/"):
        return None
    if rel.parts[:2] == ("include", "qkv"):
        return f"{rel}:{n}: the public header includes \"{target}\", which is not a public header (qkv/...)"
    if "/" in target or not (root / rel.parent / target).exists():
        return (f"{rel}:{n}: includes \"{target}\", outside its own folder {rel.parent}/ "
                f"(other folders are reached through their public headers, qkv/<layer>/...)")
    return None


def layer_of(rel):
    parts = rel.parts
    if parts[:2] == ("include", "qkv") and len(parts) > 3:
        return parts[2]
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def strip_comments(line):
    return line.split("//", 1)[0]


def has_cycle():
    seen, stack = set(), set()

    def visit(n):
        if n in stack:
            return True
        if n in seen:
            return False
        seen.add(n), stack.add(n)
        found = any(visit(m) for m in ALLOWED[n])
        stack.discard(n)
        return found

    return any(visit(n) for n in ALLOWED)


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else ".")
    problems = []
    if has_cycle():
        problems.append("ALLOWED has a cycle")
    files = sorted(p for d in ("include/qkv", "src") for p in (root / d).rglob("*") if p.suffix in (".hpp", ".cpp", ".in"))
    checked = 0
    for path in files:
        rel = path.relative_to(root)
        layer = layer_of(rel)
        if layer is None:
            continue
        if layer in APPS:  # applications: any public header, their own private headers
            checked += 1
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                q = QUOTED.match(line)
                if q:
                    problem = private_include_problem(rel, n, q.group(1), root)
                    if problem:
                        problems.append(problem)
                if layer == "python":  # it runs in another program's process
                    for pattern, what in FORBIDDEN:
                        if pattern.search(strip_comments(line)):
                            problems.append(f"{rel}:{n}: the Python module {what}; it runs in the interpreter's "
                                            "process, which it must leave as it found it")
            continue
        if layer not in LAYERS:
            problems.append(f"{rel}: folder '{layer}' is not a layer of the architecture (tests/structure_check.py ALLOWED)")
            continue
        checked += 1
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            q = QUOTED.match(line)
            if q:
                problem = private_include_problem(rel, n, q.group(1), root)
                if problem:
                    problems.append(problem)
            m = INCLUDE.match(line)
            if m and m.group(1) != layer and m.group(1) not in ALLOWED[layer]:
                problems.append(f"{rel}:{n}: {layer}/ includes qkv/{m.group(1)}/, which is not below it "
                                f"({layer} may include: {', '.join(sorted(ALLOWED[layer])) or 'nothing'})")
            if str(rel) in PROCESS_EXEMPT:
                continue
            code = strip_comments(line)
            for pattern, what in FORBIDDEN:
                if pattern.search(code):
                    problems.append(f"{rel}:{n}: the library {what}; that belongs to the application (src/app)")
    print(f"layers: {checked} files of {len(LAYERS)} layers checked")

    total = 0
    for folder in ["include/qkv/autograd", "src/autograd", "include/qkv/ops", "src/ops"]:
        n = sum(len(p.read_text().splitlines()) for p in sorted((root / folder).glob("*.[ch]pp")))
        print(f"{folder}: {n} lines")
        total += n
    print(f"autograd + ops: {total} lines (cap {CAP})")
    if total == 0 or checked == 0:
        problems.append("no source files found: wrong SOURCE_DIR?")
    elif total > CAP:
        problems.append(f"autograd + ops: {total} lines, over the cap of {CAP}")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


def self_test(root):
    """Break a copy of the tree once per rule; the check must fail and name every place."""
    import contextlib
    import io
    import shutil
    import tempfile

    def add_line(path, at, text):
        lines = path.read_text().splitlines()
        lines.insert(at, text)
        path.write_text("\n".join(lines) + "\n")

    breakages = [  # (file, line inserted after line 1, what the report must say)
        ("src/model/evaluate.cpp", '#include "qkv/train/loop.hpp"', "src/model/evaluate.cpp:2: model/ includes qkv/train/"),
        ("src/model/fill.cpp", '#include "../interp/json.hpp"', 'src/model/fill.cpp:2: includes "../interp/json.hpp", outside'),
        ("include/qkv/model/fill.hpp", '#include "answer.hpp"', 'include/qkv/model/fill.hpp:2: the public header includes'),
        ("src/python/model.cpp", '#include "app/loaded.hpp"', 'src/python/model.cpp:2: includes "app/loaded.hpp", outside'),
        ("src/app/causal.cpp", '#include "../python/model.hpp"', 'src/app/causal.cpp:2: includes "../python/model.hpp", outside'),
        ("src/python/module.cpp", "void spawn() { fork(); }", "src/python/module.cpp:2: the Python module forks the process"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp)
        for d in ("include", "src"):
            shutil.copytree(root / d, copy / d)
        for rel, text, _ in breakages:
            add_line(copy / rel, 1, text)
        (copy / "src/train/loop.cpp").write_text(
            (copy / "src/train/loop.cpp").read_text() + "\nvoid hook() { std::signal(2, nullptr); }\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(["", str(copy)])
        text = out.getvalue()
        missed = [want for _, _, want in breakages if want not in text]
        if "src/train/loop.cpp:" not in text or "installs a signal handler" not in text:
            missed.append("src/train/loop.cpp: installs a signal handler")
        print(text)
        ok = status == 1 and not missed
        print("self-test:", "the check failed as it must, naming every breakage" if ok else
              f"FAILED: the check did not catch: {missed}")
        return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        sys.exit(self_test(pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else ".")))
    sys.exit(main(sys.argv))
