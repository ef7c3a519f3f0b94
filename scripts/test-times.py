#!/usr/bin/env python3
"""The slowest test binaries of a `cargo test --workspace -- --quiet` run, from its output.

    scripts/test-times.py LOG [N]    print the N (default 10) slowest, with their tests

cargo names each binary (`Running tests/log.rs (target/debug/deps/log-…)`) before it runs and
libtest closes each with `test result: … finished in 12.34s`; a binary's time is its
tests' wall time (they run on threads inside it). The failures of the run are listed too:
`---- name stdout ----` headers, with the binary they came from and the first lines of what
each printed (its panic message): a CI log shows its start and its end, and this is the end.
"""

import re
import sys

RUNNING = re.compile(r"^\s*Running (\S+) \(([^)]+)\)")
DOC = re.compile(r"^\s*Doc-tests (\S+)")
RESULT = re.compile(r"^test result: (\w+)\. (\d+) passed; (\d+) failed;.*finished in ([0-9.]+)s")
FAILURE = re.compile(r"^---- (\S+) stdout ----")
# Where a failure's own output ends: the backtrace, the next failure, libtest's summary.
FAILURE_END = re.compile(r"^(stack backtrace:|---- \S+ stdout ----|failures:$)")
# Lines of each failure's output kept for the summary.
FAILURE_LINES = 12


def parse(lines):
    """[(binary, seconds, passed, failed)], [(binary, failed test, its first lines)]."""
    runs, failures, current, output = [], [], None, None
    for line in lines:
        line = line.rstrip("\n")
        if output is not None:
            if FAILURE_END.match(line):
                output = None
            elif line.strip() and len(output) < FAILURE_LINES:
                output.append(line)
        if m := RUNNING.match(line):
            source, path = m.groups()
            crate = path.rsplit("/", 1)[-1].rsplit("-", 1)[0]
            current = f"{crate} {source}"
        elif m := DOC.match(line):
            current = f"{m.group(1)} doc-tests"
        elif (m := RESULT.match(line)) and current:
            runs.append((current, float(m.group(4)), int(m.group(2)), int(m.group(3))))
        elif (m := FAILURE.match(line)) and current:
            output = []
            failures.append((current, m.group(1), output))
    return runs, failures


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    count = int(sys.argv[2]) if len(sys.argv) == 3 else 10
    with open(sys.argv[1], encoding="utf-8", errors="replace") as log:
        runs, failures = parse(log)
    total = sum(seconds for _, seconds, _, _ in runs)
    print(f"\n== the {count} slowest of {len(runs)} test binaries ({total:.0f} s of tests in all)")
    for binary, seconds, passed, failed in sorted(runs, key=lambda r: -r[1])[:count]:
        print(f"{seconds:8.1f} s  {binary}  ({passed} passed, {failed} failed)")
    for binary, test, output in failures:
        print(f"FAILED {test}  ({binary})")
        for line in output:
            print(f"    {line[:300]}")


if __name__ == "__main__":
    main()
