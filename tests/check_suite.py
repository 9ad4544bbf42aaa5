#!/usr/bin/python3
"""The registration check of the test suite (a CTest test of its own).

    check_suite.py BUILD_DIR DOCTEST_BINARY...

Every test case that a doctest binary lists (--list-test-cases) must be exactly one CTest test
of the same name, whose command runs that binary with a --test-case filter equal to the name
(commas escaped, as doctest_discover_tests writes them), and every CTest test that runs one of
these binaries must be such a test. A name that CMake splits (a ';' in it), a filter that
selects another or no test case, or a test case CTest never runs fails here, naming it. doctest
filters treat "*" and "?" as wildcards and ',' as a separator: a name with a wildcard
character is refused too, since its filter could select other cases.

What CTest runs is read from the files doctest_discover_tests writes (<build>/tests/
<binary>_tests-<hash>.cmake, one add_test per test case), not by running ctest inside the running
CTest: a nested ctest rewrites the outer one's Testing/ logs, and failed now and then when the
machine was loaded.

Together with the FAIL_REGULAR_EXPRESSION on every discovered test (exactly one test case and at
least one assertion per run, tests/CMakeLists.txt), a test that runs nothing cannot pass.
"""
import pathlib
import re
import subprocess
import sys

# add_test( [==[NAME]==] BINARY [==[--test-case=FILTER]==])  (CMake bracket arguments)
ADD_TEST = re.compile(r"add_test\(\s*\[(=*)\[(.*?)\]\1\]\s+(\S+)\s+\[(=*)\[(.*?)\]\4\]", re.S)


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
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    build_dir, binaries = pathlib.Path(argv[1]), argv[2:]
    registered = {}  # binary -> list of (ctest name, filter)
    for binary in binaries:
        name = pathlib.Path(binary).name
        files = sorted((build_dir / "tests").glob(f"{name}_tests-*.cmake"), key=lambda p: p.stat().st_mtime)
        if not files:
            print(f"no {name}_tests-*.cmake under {build_dir}/tests: was {binary} built?")
            return 1
        for m in ADD_TEST.finditer(files[-1].read_text(encoding="utf-8")):
            test, command, arg = m.group(2), m.group(3), m.group(5)
            flt = arg[len("--test-case="):] if arg.startswith("--test-case=") else None
            registered.setdefault(command, []).append((test, flt))
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
