#!/usr/bin/env python3
"""gtest_report.py: what a test run skipped and failed, from googletest's XML reports.

    scripts/gtest_report.py DIR [--top 12]

DIR holds the XML reports of one or more test processes (GTEST_OUTPUT=xml:DIR/ makes each
process write its own: thx_tests.xml, thx_tests_1.xml, ...). Prints the tests that failed (with
the first line of each failure), why tests were skipped (the skip message's last line, counted:
"no CUDA device", say), and last one line of counts:

    N tests in F reports: P passed, X failed, S skipped

A GPU session reads it (scripts/gpu_session.sh): a GPU test skipped for want of a device shows
there, beside what failed. Standard library only. Bad input: one line, exit 2.
"""
import collections
import glob
import os
import re
import xml.etree.ElementTree as ET

from oneline import Parser, fail  # one line, exit 2, as thx


def last_line(text):
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def main():
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    if args.top < 1:
        fail(f"--top {args.top}: allowed: 1 or more")
    if not os.path.isdir(args.dir):
        fail(f"{args.dir}: not a directory")
    files = sorted(glob.glob(os.path.join(args.dir, "*.xml")))
    if not files:
        fail(f"{args.dir}: no XML report in it (run the tests with GTEST_OUTPUT=xml:{args.dir}/)")
    passed, failed, skipped = 0, [], collections.Counter()
    for path in files:
        try:
            root = ET.parse(path).getroot()
        except (ET.ParseError, OSError) as e:
            fail(f"{path}: {e}")
        if root.tag != "testsuites":
            fail(f"{path}: not a googletest report (its root is <{root.tag}>, not <testsuites>)")
        for case in root.iter("testcase"):
            name = f"{case.get('classname')}.{case.get('name')}"
            failure = case.find("failure")
            skip = case.find("skipped")
            if failure is not None:  # (its message starts with the file:line of the assertion)
                said = [ln for ln in (failure.get("message") or "").splitlines()
                        if ln.strip() and not re.fullmatch(r"\S+:\d+:?", ln.strip())]
                failed.append((name, said[0].strip() if said else "(no message)"))
            elif skip is not None or case.get("result") == "skipped":
                skipped[last_line(skip.get("message") if skip is not None else "")] += 1
            elif case.get("status") == "run":
                passed += 1
    if failed:
        print("| failed | first line |\n|---|---|")
        for name, first in failed[:args.top]:
            print(f"| {name} | {first[:150]} |")
        print()
    if skipped:
        print("| skipped because | tests |\n|---|---:|")
        for why, n in skipped.most_common(args.top):
            print(f"| {why[:150]} | {n} |")
        print()
    total = passed + len(failed) + sum(skipped.values())
    print(f"{total} tests in {len(files)} reports: {passed} passed, {len(failed)} failed, "
          f"{sum(skipped.values())} skipped")


if __name__ == "__main__":
    main()
