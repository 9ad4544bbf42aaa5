#!/usr/bin/python3
"""The documentation is reference, not history, and it holds together.

    check_docs.py SOURCE_DIR

- README.md has at most 250 lines; docs/performance.md fewer than 300.
- docs/*.md and README.md hold no dates (2026-12-05, "Dec 5", "17:11 UTC") and no issue numbers
  ("#16", "issue 15", "the issue tracker") outside link targets and code blocks: measurement
  history belongs in bench/results/ and experiments/, dated there.
- Every relative link of README.md, docs/, experiments/ and bench/ resolves to a file, and every
  #anchor into a Markdown file to one of its headings.
Prints every problem with its file and line; exit 1 when there is one.
"""
import pathlib
import re
import sys

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2}\b|\b\d\d:\d\d(?::\d\d)? UTC\b")
ISSUE = re.compile(r"(?<![\w&/])#\d+\b|\b[Ii]ssues? #?\d+\b|\bissue tracker\b")
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')


def prose_lines(text):
    """(line number, line) outside fenced code, with link targets and inline code removed."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = LINK.sub("]()", line)
        line = re.sub(r"`[^`]*`", "``", line)
        yield n, line


def slugs(path):
    out, seen, fenced = set(), {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2).replace("`", ""))
        s = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else ".")
    problems = []
    readme, perf = root / "README.md", root / "docs" / "performance.md"
    for path, limit in ((readme, 250), (perf, 299)):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            problems.append(f"{path.relative_to(root)}: {n} lines, more than {limit}")
    reference = [readme] + sorted((root / "docs").glob("*.md"))
    for path in reference:
        for n, line in prose_lines(path.read_text(encoding="utf-8")):
            for pattern, what in ((DATE, "a date"), (ISSUE, "an issue number")):
                m = pattern.search(line)
                if m:
                    problems.append(f"{path.relative_to(root)}:{n}: {what} ('{m.group(0)}'): reference docs say what is, "
                                    "history goes to bench/results/ or experiments/")
    linked = reference + sorted(p for d in ("experiments", "bench") for p in (root / d).rglob("*.md")
                                if p.parent.name not in ("full", "quick"))
    count = 0
    for path in linked:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            count += 1
            file, _, anchor = target.partition("#")
            dest = path if file == "" else path.parent / file
            if not dest.exists():
                problems.append(f"{path.relative_to(root)}: link to {target}: no such file")
            elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in slugs(dest):
                problems.append(f"{path.relative_to(root)}: link to {target}: no heading #{anchor} there")
    print(f"{len(reference)} reference documents checked for dates and issue numbers; {count} links checked")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
