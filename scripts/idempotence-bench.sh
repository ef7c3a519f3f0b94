#!/usr/bin/env bash
# What idempotence costs the native producer: `trib produce` of the same MESSAGES messages of
# 200 bytes (the paper's) to one partition of one release broker, acks 1, batches of 500,
# with and without `--idempotent`, alternating ROUNDS times; each round to a fresh topic.
#
#   scripts/idempotence-bench.sh [MESSAGES] [ROUNDS]   # default 1000000 3; needs a release build
#
# Prints each run's messages/s, the medians and their ratio (idempotent / plain), and the
# broker's CPU-seconds (user + system) per million messages on each side.
set -euo pipefail
cd "$(dirname "$0")/.."
messages="${1:-1000000}"
rounds="${2:-3}"
bin=target/release
for program in "$bin/broker" "$bin/trib"; do
  [ -x "$program" ] || { echo "idempotence-bench.sh: $program missing: cargo build --release -p broker -p client" >&2; exit 2; }
done

work="$(mktemp -d)"
trap 'kill "$broker" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 10000))
"$bin/broker" --data-dir "$work/data" --port "$port" --flush-ms 1000 --num-partitions 1 \
  >"$work/broker.log" 2>&1 &
broker=$!
for _ in $(seq 100); do
  "$bin/trib" topics list --brokers "127.0.0.1:$port" >/dev/null 2>&1 && break
  sleep 0.1
done

python3 -c "
import sys
line = ('x' * 190 + '\n').encode()
out = sys.stdout.buffer
for i in range($messages):
    out.write(b'%09d' % i + line)
" >"$work/input"

cpu() { python3 -c "
import os
fields = open('/proc/$broker/stat').read().rsplit(')', 1)[1].split()
print((int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK'))"; }

run() { # run NAME FLAGS... : prints "rate cpu_per_million"
  local topic="$1"; shift
  "$bin/trib" topics create --brokers "127.0.0.1:$port" --topic "$topic" --partitions 1 >/dev/null
  local cpu_start seconds
  cpu_start=$(cpu)
  seconds=$("$bin/trib" --json produce --brokers "127.0.0.1:$port" --topic "$topic" --partition 0 \
    --acks 1 --batch-messages 500 "$@" <"$work/input" | python3 -c "import json,sys; print(json.load(sys.stdin)['seconds'])")
  python3 -c "print($messages / $seconds, ($(cpu) - $cpu_start) * 1e6 / $messages)"
}

plain=(); idempotent=(); plain_cpu=(); idempotent_cpu=()
for round in $(seq "$rounds"); do
  read -r rate cpu_m < <(run "plain-$round")
  plain+=("$rate"); plain_cpu+=("$cpu_m")
  echo "round $round: plain      $(printf '%.0f' "$rate") msg/s, broker $(printf '%.2f' "$cpu_m") CPU-s per M"
  read -r rate cpu_m < <(run "idempotent-$round" --idempotent)
  idempotent+=("$rate"); idempotent_cpu+=("$cpu_m")
  echo "round $round: idempotent $(printf '%.0f' "$rate") msg/s, broker $(printf '%.2f' "$cpu_m") CPU-s per M"
done
python3 - "${plain[*]}" "${idempotent[*]}" "${plain_cpu[*]}" "${idempotent_cpu[*]}" <<'PY'
import statistics, sys
plain, idem, plain_cpu, idem_cpu = ([float(x) for x in a.split()] for a in sys.argv[1:5])
p, i = statistics.median(plain), statistics.median(idem)
print(f"median: plain {p:,.0f} msg/s, idempotent {i:,.0f} msg/s, ratio {i / p:.2f}")
print(f"broker CPU-s per M messages (median): plain {statistics.median(plain_cpu):.2f}, "
      f"idempotent {statistics.median(idem_cpu):.2f}")
PY
