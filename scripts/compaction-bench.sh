#!/usr/bin/env bash
# The log cleaner of a compacted topic, measured (docs/design.md, "Compacted topics"): one
# release broker, a topic with cleanup_policy=compact and 16 MiB segments; kcat produces
# MESSAGES records of about 200 bytes over KEYS keys in batches of BATCH (each key written in
# turn, so the last value of every key is in the newest segments), then the cleaner runs
# without a throttle.
# Prints the cleaner's time and throughput, disk use before and after, and how long kcat
# takes to read the topic before and after.
#
#   cargo build --release -p broker -p client && scripts/compaction-bench.sh [MESSAGES] [KEYS] [BATCH] [SEGMENT_BYTES]
#
# TRIBUTARY_BIN names another directory of `broker` and `trib` (the smoke test's debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
messages="${1:-1000000}"
keys="${2:-10000}"
batch="${3:-1000}"
segment="${4:-16777216}"
bin="${TRIBUTARY_BIN:-target/release}"
for program in "$bin/broker" "$bin/trib"; do
  [ -x "$program" ] || { echo "compaction-bench.sh: $program missing: cargo build --release -p broker -p client" >&2; exit 2; }
done
command -v kcat >/dev/null || { echo "compaction-bench.sh: kcat missing (apt-get install kcat)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'kill "$broker" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 10000))
kafka=$((port + 1))
metrics=$((port + 2))
# The cleaner is held back (a day between passes) until the topic is written, then the
# broker restarts with a pass a second and no throttle.
start_broker() {
  "$bin/broker" --data-dir "$work/data" --port "$port" --kafka-port "$kafka" \
    --metrics "127.0.0.1:$metrics" --visible-after write --flush-ms 1000 \
    --cleaner-interval-ms "$1" --cleaner-bytes-per-s 0 >>"$work/broker.log" 2>&1 &
  broker=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$metrics/metrics" >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "compaction-bench.sh: the broker did not start; its log:" >&2
  cat "$work/broker.log" >&2
  exit 1
}
start_broker 86400000
"$bin/trib" topics create --brokers "127.0.0.1:$port" --topic table --partitions 1 \
  --config cleanup_policy=compact --config "segment_bytes=$segment" >/dev/null

python3 -c "
import sys
out = sys.stdout.buffer
value = b'v' * 180
for i in range($messages):
    out.write(b'key-%06d:%09d' % (i % $keys, i) + value + b'\n')
" >"$work/input"
kcat -b "127.0.0.1:$kafka" -P -t table -p 0 -K: -X acks=1 -X "batch.num.messages=$batch" \
  -X linger.ms=5 -X queue.buffering.max.messages=1000000 <"$work/input"

seconds() { python3 -c "import time; print(time.time())"; }
disk() { du -k --apparent-size "$work/data/table-0" | cut -f1; du -k "$work/data/table-0" | cut -f1; }
# Each of three reads by kcat, seconds.
read_all() {
  local times=() start
  for _ in 1 2 3; do
    start=$(seconds)
    kcat -b "127.0.0.1:$kafka" -C -t table -p 0 -o beginning -e -q >/dev/null 2>&1
    times+=("$(python3 -c "import time; print(round(time.time() - $start, 2))")")
  done
  echo "${times[*]}" | tr ' ' ','
}
counter() {
  curl -sf "http://127.0.0.1:$metrics/metrics" | awk -v name="$1" '$1 == name { print $2 }'
}

read -r apparent_before disk_before < <(disk | paste -sd' ')
read_before=$(read_all)
kill "$broker"; wait "$broker" 2>/dev/null || true
start_broker 1000
# Done when a pass has found nothing more to do: the segment count stays put for two seconds.
last=-1
while true; do
  sleep 2
  segments=$(counter tributary_broker_cleaner_segments_total)
  [ "${segments:-0}" != 0 ] && [ "$segments" = "$last" ] && break
  last=${segments:-0}
done
# The passes' own time, from the broker's log.
cleaned=$(grep -o ' ms=[0-9]*' "$work/broker.log" | awk -F= '{ s += $2 } END { print s / 1000 }')
bytes=$(counter tributary_broker_cleaner_bytes_total)
removed=$(counter tributary_broker_cleaner_records_removed_total)
read -r apparent_after disk_after < <(disk | paste -sd' ')
read_after=$(read_all)

python3 - "$messages" "$keys" "$batch" "$segment" "$cleaned" "$bytes" "$removed" "$segments" "$apparent_before" \
  "$disk_before" "$disk_after" "$read_before" "$read_after" <<'EOF'
import sys
n, keys, batch, segment = (int(x) for x in sys.argv[1:5])
cleaned, read_bytes, removed, segments = float(sys.argv[5]), float(sys.argv[6]), int(float(sys.argv[7])), int(float(sys.argv[8]))
apparent, before, after = (int(x) for x in sys.argv[9:12])
read_before, read_after = sys.argv[12], sys.argv[13]
print(f"{n:,} records of about 200 bytes over {keys:,} keys in batches of {batch:,}, {segment / 2**20:g} MiB segments, one partition")
print(f"cleaner: {segments} segments, {removed:,} records removed, {read_bytes / 2**20:,.0f} MiB read "
      f"in {cleaned:.2f} s of passes ({read_bytes / 2**20 / cleaned:,.0f} MiB/s of log; each segment is read twice)")
print(f"disk: {before / 1024:,.1f} MiB before, {after / 1024:,.1f} MiB after "
      f"(the log's byte length stays {apparent / 1024:,.1f} MiB)")
best = lambda times: min(float(t) for t in times.split(","))
print(f"kcat reads the topic in {best(read_before):.2f} s before, {best(read_after):.2f} s after "
      f"(best of three: {read_before} s; {read_after} s)")
EOF
