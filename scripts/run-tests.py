#!/usr/bin/env python3
"""Runs every test binary of the workspace, two at a time, the heavy ones alone.

    scripts/run-tests.py [--jobs N] [--alone NAME,...]

`cargo test --workspace` runs its test binaries one after another, and most of them spend
their time waiting (for a broker to elect a leader, a ZooKeeper session to expire, a process
to start): on this 2-core machine one binary leaves a core idle most of the time. This builds
them as `cargo test` does (`--no-run`), then runs them as cargo would — from their package's
directory, with cargo's CARGO_* variables, with `--quiet` — `--jobs` at a time (default 2).
A binary named in ALONE runs with nothing beside it: those that start a whole deployment or
saturate the machine on purpose, whose timing another binary's load would distort.

Each binary's output is printed whole when it ends, after the `Running SRC (EXE)` line cargo
prints, so `scripts/test-times.py` reads this log as it reads cargo's. Doc-tests run last
(`cargo test --doc`). Exit code: 0 only if every binary passed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# Test binaries (`crate/target`) that run with no other beside them: a whole deployment of
# processes, a saturation benchmark, or a scenario whose point is timing under load.
ALONE = {
    "deploy/multiprocess",
    "deploy/demo",
    "broker/kill_leaders",
    "broker/slow_clients",
    "broker/read_your_writes",
    "bench/smoke",
    "hdfs-loader/memory",
    "audit/browser",
}


CARGO = shutil.which("cargo") or "cargo"


def build():
    """(package, target, source, executable, package dir) of every test binary, built."""
    command = ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"]
    process = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if process.returncode != 0:
        sys.exit(process.returncode)
    binaries = []
    for line in process.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        target = message["target"]
        package_dir = os.path.dirname(message["manifest_path"])
        source = os.path.relpath(target["src_path"], package_dir)
        # `path+file:///…/dir#0.1.0`, or `…/dir#name@0.1.0` when the name is not the dir's.
        location, _, version = message["package_id"].partition("#")
        package = version.split("@")[0] if "@" in version else location.rsplit("/", 1)[-1]
        binaries.append((package, target["name"], source, message["executable"], package_dir))
    return binaries


def run(binary, printing):
    package, name, source, executable, package_dir = binary
    environment = dict(os.environ)
    environment["CARGO"] = CARGO
    environment["CARGO_MANIFEST_DIR"] = package_dir
    environment["CARGO_PKG_NAME"] = package
    environment["CARGO_CRATE_NAME"] = name.replace("-", "_")
    started = time.monotonic()
    process = subprocess.run(
        [executable, "--quiet"],
        cwd=package_dir,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.monotonic() - started
    with printing:
        print(f"     Running {source} ({executable})", flush=True)
        sys.stdout.buffer.write(process.stdout)
        print(f"   ({package}/{name}: {elapsed:.1f} s, exit {process.returncode})", flush=True)
    return process.returncode == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--alone", default="", help="more crate/target names to run alone")
    args = parser.parse_args()
    alone = ALONE | {name for name in args.alone.split(",") if name}

    binaries = build()
    known = {f"{package}/{name}" for package, name, *_ in binaries}
    unknown = sorted(alone - known)
    if unknown:
        sys.exit(f"run-tests.py: no test binary {', '.join(unknown)} (see ALONE)")
    printing = threading.Lock()
    heavy = [b for b in binaries if f"{b[0]}/{b[1]}" in alone]
    light = [b for b in binaries if f"{b[0]}/{b[1]}" not in alone]
    passed = True
    # The heavy ones first, one at a time; then the rest, `jobs` at a time.
    for binary in heavy:
        passed &= run(binary, printing)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for ok in pool.map(lambda b: run(b, printing), light):
            passed &= ok
    doc = subprocess.run(["cargo", "test", "--workspace", "--doc", "--quiet"])
    passed &= doc.returncode == 0
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
