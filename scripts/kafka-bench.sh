#!/usr/bin/env bash
# Throughput through a broker's Kafka listener as a ratio to its native path, client tool
# against client tool: `kcat -P` / `kcat -C` (librdkafka) on the Kafka port against `trib
# produce` / `trib consume` (Tributary's client) on the native port, the same MESSAGES messages
# of 200 bytes (the paper's), batches of 50, acks 1, one partition, one release broker.
#
#   scripts/kafka-bench.sh [MESSAGES]      # default 1000000; needs kcat (Debian) and a release build
#
# Prints messages/s of each side, the ratios, and the broker's CPU-seconds (user + system, from
# /proc/PID/stat) per GB of payload on each path; bench/README.md has the last runs.
set -euo pipefail
cd "$(dirname "$0")/.."
messages="${1:-1000000}"
bin=target/release
for program in "$bin/broker" "$bin/trib"; do
  [ -x "$program" ] || { echo "kafka-bench.sh: $program missing: cargo build --release -p broker -p client" >&2; exit 2; }
done
command -v kcat >/dev/null || { echo "kafka-bench.sh: kcat missing (apt-get install kcat)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'kill "$broker" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 10000))
kafka=$((port + 1))
"$bin/broker" --data-dir "$work/data" --port "$port" --kafka-port "$kafka" \
  --visible-after write --flush-ms 1000 --num-partitions 1 >"$work/broker.log" 2>&1 &
broker=$!
for _ in $(seq 100); do
  grep -q "Kafka listener" "$work/broker.log" && break
  sleep 0.1
done

for topic in native kafka; do
  "$bin/trib" topics create --brokers "127.0.0.1:$port" --topic "$topic" --partitions 1 >/dev/null
done

# MESSAGES lines of 199 bytes + newline: 200-byte payloads.
python3 -c "
import sys
line = ('x' * 190 + '\n').encode()
out = sys.stdout.buffer
for i in range($messages):
    out.write(b'%09d' % i + line)
" >"$work/input"

seconds() { python3 -c "import time; print(time.time())"; }
# The broker's CPU-seconds so far.
cpu() { python3 -c "
import os
fields = open('/proc/$broker/stat').read().rsplit(')', 1)[1].split()
print((int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK'))"; }

cpu_start=$(cpu); start=$(seconds)
"$bin/trib" produce --brokers "127.0.0.1:$port" --topic native --partition 0 --acks 1 \
  --batch-messages 50 --linger-ms 5 <"$work/input" >/dev/null 2>&1
native_produce=$(python3 -c "import time; print($(seconds) - $start)")
native_produce_cpu=$(python3 -c "print($(cpu) - $cpu_start)")

cpu_start=$(cpu); start=$(seconds)
kcat -b "127.0.0.1:$kafka" -P -t kafka -p 0 -X acks=1 -X batch.num.messages=50 \
  -X linger.ms=5 -X queue.buffering.max.messages=1000000 <"$work/input"
kafka_produce=$(python3 -c "import time; print($(seconds) - $start)")
kafka_produce_cpu=$(python3 -c "print($(cpu) - $cpu_start)")

cpu_start=$(cpu); start=$(seconds)
"$bin/trib" consume --brokers "127.0.0.1:$port" --topic native --partition 0 --offset 0 \
  --max-messages "$messages" >/dev/null 2>&1
native_consume=$(python3 -c "import time; print($(seconds) - $start)")
native_consume_cpu=$(python3 -c "print($(cpu) - $cpu_start)")

cpu_start=$(cpu); start=$(seconds)
kcat -b "127.0.0.1:$kafka" -C -t kafka -p 0 -o beginning -c "$messages" -q >/dev/null
kafka_consume=$(python3 -c "import time; print($(seconds) - $start)")
kafka_consume_cpu=$(python3 -c "print($(cpu) - $cpu_start)")

python3 - "$messages" "$native_produce" "$kafka_produce" "$native_consume" "$kafka_consume" \
  "$native_produce_cpu" "$kafka_produce_cpu" "$native_consume_cpu" "$kafka_consume_cpu" <<'EOF'
import sys
n = int(sys.argv[1])
np, kp, nc, kc, npc, kpc, ncc, kcc = map(float, sys.argv[2:])
gb = n * 200 / 1e9
print(f"{n} messages of 200 bytes, batches of 50, acks 1, one partition")
print(f"produce  native (trib produce) {n / np:>10,.0f} msg/s   Kafka (kcat -P) {n / kp:>10,.0f} msg/s   ratio {np / kp:.2f}")
print(f"consume  native (trib consume) {n / nc:>10,.0f} msg/s   Kafka (kcat -C) {n / kc:>10,.0f} msg/s   ratio {nc / kc:.2f}")
print(f"broker CPU-s per GB of payload: produce native {npc / gb:.2f}, Kafka {kpc / gb:.2f}; "
      f"consume native {ncc / gb:.2f}, Kafka {kcc / gb:.2f}")
EOF
