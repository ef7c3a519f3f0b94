#!/usr/bin/env bash
# scripts/soak.sh N: runs the README's test command (scripts/test.sh) N times, each from a
# clean clone of this repository's HEAD, and prints each test that failed in any run with how
# many runs it failed in. The clones share one target directory, so only the first builds
# from nothing. Logs stay in the printed directory. Exit code 0 only if every run passed.
set -euo pipefail
runs="${1:?usage: scripts/soak.sh N}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/tributary-soak.XXXXXX)"
export CARGO_TARGET_DIR="$work/target"
echo "soak: $runs runs of scripts/test.sh from clean clones of $(git -C "$repo" rev-parse --short HEAD); logs in $work" >&2
failed_runs=0
for run in $(seq 1 "$runs"); do
  clone="$work/clone"
  rm -rf "$clone"
  git clone --quiet --no-hardlinks "$repo" "$clone"
  # CI lays shared/ beside the checkout; so does this.
  [ -d "$repo/../shared" ] && [ ! -e "$work/shared" ] && ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
  started=$(date +%s)
  if (cd "$clone" && CI=true bash scripts/test.sh) > "$work/run-$run.log" 2>&1 < /dev/null; then
    verdict=passed
  else
    verdict=FAILED
    failed_runs=$((failed_runs + 1))
  fi
  echo "soak: run $run/$runs $verdict in $(( $(date +%s) - started )) s" >&2
done
echo
echo "== $failed_runs of $runs runs failed"
# Each failed test, with the number of runs it failed in.
for log in "$work"/run-*.log; do
  python3 "$repo/scripts/test-times.py" "$log" 0 | sed -n 's/^FAILED //p' | sort -u
done | sort | uniq -c | sort -rn
[ "$failed_runs" -eq 0 ]
