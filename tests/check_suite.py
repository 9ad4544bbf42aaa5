#!/usr/bin/python3
"""The registration check of the test suite (a CTest test of its own).

    check_suite.py CTEST BUILD_DIR DOCTEST_BINARY...

Every test case that a doctest binary lists (--list-test-cases) must be exactly one CTest test
of the same name, whose command runs that binary with a --test-case filter equal to the name
(commas escaped, as doctest_discover_tests writes them), and every CTest test that runs one of
these binaries must be such a test. A name that CMake splits (a ';' in it), a filter that
selects another or no test case, or a test case CTest never runs fails here, naming it. doctest
filters treat "*" and "?" as wildcards and ',' as a separator: a name with a wildcard
character is refused too, since its filter could select other cases.

Together with the FAIL_REGULAR_EXPRESSION on every discovered test (exactly one test case and at
least one assertion per run, tests/CMakeLists.txt), a test that runs nothing cannot pass.
"""
import json
import subprocess
import sys


def listed_cases(binary):
    out = subprocess.run([binary, "--list-test-cases", "--no-version"], check=True,
                         capture_output=True, text=True).stdout
    cases = []
    for line in out.splitlines():
        if line.startswith("[doctest]") or set(line) == {"="} or not line:
            continue
        cases.append(line)
    return cases


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    ctest, build_dir, binaries = argv[1], argv[2], argv[3:]
    shown = subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, check=True,
                           capture_output=True, text=True).stdout
    registered = {}  # binary -> list of (ctest name, filter)
    for t in json.loads(shown)["tests"]:
        cmd = t.get("command", [])
        if cmd and cmd[0] in binaries:
            filters = [a[len("--test-case="):] for a in cmd if a.startswith("--test-case=")]
            registered.setdefault(cmd[0], []).append((t["name"], filters[0] if len(filters) == 1 else None))
    problems = []
    total = 0
    for binary in binaries:
        cases = listed_cases(binary)
        if not cases:
            problems.append(f"{binary} lists no test cases")
        tests = registered.get(binary, [])
        names = [n for n, _ in tests]
        for case in cases:
            if ";" in case:
                problems.append(f"test case name contains ';' (CMake splits it into two CTest tests): {case!r}")
            if any(c in case for c in "*?"):
                problems.append(f"test case name contains a doctest wildcard (* or ?): {case!r}")
            n = names.count(case)
            if n != 1:
                problems.append(f"test case registered {n} times in CTest (expected once): {case!r}")
        for name, flt in tests:
            if name not in cases:
                problems.append(f"CTest test {name!r} runs {binary} but matches no test case it lists")
            elif flt is None or flt.replace("\\,", ",") != name:
                problems.append(f"CTest test {name!r} filters on {flt!r}, not on its own name")
        total += len(cases)
        print(f"{binary}: {len(cases)} test cases, {len(tests)} CTest tests")
    if problems:
        print(f"suite registration check FAILED ({len(problems)} problems):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"suite registration check: every one of {total} test cases is exactly one CTest test")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
