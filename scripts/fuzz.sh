#!/usr/bin/env bash
# A fuzzing campaign: every `cargo fuzz` target of fuzz/ for SECONDS each (default 10), one
# after the other, growing its corpus in fuzz/corpus/TARGET (committed: the next campaign
# starts from it). Prints the executions of each target and their total; exits non-zero if a
# target found a crash (libFuzzer writes it to fuzz/artifacts/TARGET/).
#
#   scripts/fuzz.sh 60                  # every target for a minute
#   scripts/fuzz.sh 600 acl_file        # one target for ten minutes
#   scripts/fuzz.sh --scratch 5         # from a copy of each corpus, left unchanged (CI's pass)
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

scratch=""
if [ "${1:-}" = "--scratch" ]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  shift
fi
seconds="${1:-10}"
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
  echo "fuzz.sh: SECONDS must be a positive whole number, got '$seconds'" >&2
  exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: needs the nightly toolchain and cargo-fuzz: cargo install cargo-fuzz" >&2
  exit 2
fi
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

cargo +nightly fuzz build -O
total=0
failed=()
printf '%-20s %15s %12s\n' target executions "exec/s"
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  corpus="corpus/$target"
  if [ -n "$scratch" ]; then
    cp -r "corpus/$target" "$scratch/$target"
    corpus="$scratch/$target"
  fi
  log="$(mktemp)"
  status=0
  # -print_final_stats: libFuzzer's own count of executed inputs; -close_fd_mask: the
  # targets' own output (a decoder's log line) stays out of the report.
  cargo +nightly fuzz run -O "$target" "$corpus" -- \
    -max_total_time="$seconds" -print_final_stats=1 -close_fd_mask=3 >"$log" 2>&1 || status=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  runs="${runs:-0}"
  total=$((total + runs))
  printf '%-20s %15s %12s\n' "$target" "$runs" "$((runs / seconds))"
  if [ "$status" -ne 0 ]; then
    failed+=("$target")
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written' "$log" | head -5 >&2 || true
  fi
  rm -f "$log"
done
printf '%-20s %15s\n' total "$total"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: crashes in ${failed[*]} (inputs under fuzz/artifacts/)" >&2
  exit 1
fi
