#!/usr/bin/env python3
"""Prints the slowest tests of a nextest run, read from its JUnit file.

Usage: slowest-tests.py JUNIT_XML [COUNT]   (COUNT defaults to 10)

One line a test: its time in seconds, its binary and name, and FAIL when it
failed, so a slow test and a failing one are told apart at the end of a log.
Exits 1, saying why, when the file is missing or not nextest's JUnit.
"""

import sys
import xml.etree.ElementTree as ET


def cases(root):
    """(seconds, binary, name, failed) for every test case in the report."""
    for case in root.iter("testcase"):
        failed = any(c.tag in ("failure", "error") for c in case)
        yield (
            float(case.get("time", "0")),
            case.get("classname", "?"),
            case.get("name", "?"),
            failed,
        )


def main(argv):
    usage = __doc__.strip().splitlines()[2]
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        print(usage, file=sys.stderr)
        return 2
    path, count = argv[1], int(argv[2]) if len(argv) == 3 else 10
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"slowest tests: cannot read {path}: {e}", file=sys.stderr)
        return 1
    slowest = sorted(cases(root), key=lambda c: c[0], reverse=True)[:count]
    print(f"The {len(slowest)} slowest tests ({path}):")
    for seconds, binary, name, failed in slowest:
        mark = "  FAIL" if failed else ""
        print(f"  {seconds:8.2f}s  {binary} {name}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
