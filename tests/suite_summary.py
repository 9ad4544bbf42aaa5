#!/usr/bin/python3
"""What the suite ran, from CTest's JUnit report (`ctest --output-junit FILE`).

    suite_summary.py FILE

Prints how many CTest tests ran, passed, failed and were skipped (with the reason each skipped
test printed), and the doctest assertions they made. Exit status 1 when a test failed or did not
run, or, under CI=true, when any test was skipped: CI must run every test. `make test` calls it
after CTest.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET


def main(argv):
    if len(argv) != 2:
        print("usage: suite_summary.py CTEST_JUNIT_XML", file=sys.stderr)
        return 2
    root = ET.parse(argv[1]).getroot()
    passed, failed, skipped, other = [], [], [], []
    assertions = 0
    for case in root.iter("testcase"):
        name, status = case.get("name"), case.get("status")
        out = "".join(e.text or "" for e in case.iter("system-out"))
        m = re.search(r"\[doctest\] assertions: *(\d+)", out)
        if m:
            assertions += int(m.group(1))
        if case.find("skipped") is not None or "[qkv] SKIPPED:" in out:
            why = re.search(r"\[qkv\] SKIPPED: *(.*)", out)
            skipped.append((name, why.group(1) if why else (case.find("skipped").get("message") or "")))
        elif status == "run" and case.find("failure") is None:
            passed.append(name)
        elif status == "fail" or case.find("failure") is not None:
            failed.append(name)
        else:
            other.append((name, status))
    total = len(passed) + len(failed) + len(skipped) + len(other)
    ran = len(passed) + len(failed)
    print(f"suite: {total} tests: {ran} ran, {len(passed)} passed, {len(failed)} failed, "
          f"{len(skipped)} skipped, {len(other)} did not run; {assertions} doctest assertions")
    for name, why in skipped:
        print(f"  skipped: {name}: {why}")
    for name in failed:
        print(f"  failed: {name}")
    for name, status in other:
        print(f"  did not run ({status}): {name}")
    status = 0
    if failed or other or total == 0:
        status = 1
    if skipped and os.environ.get("CI") == "true":
        print("suite: CI=true and tests were skipped: CI must run every test (install what they need:"
              " scripts/install-deps.sh)")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
