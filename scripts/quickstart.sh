#!/usr/bin/env bash
# Tributary on its defaults: builds the release binaries, starts a broker on 127.0.0.1:6667
# (data in /tmp/tributary-logs), produces three events with `trib`, consumes them back,
# describes the topic, and leaves the broker serving until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet -p broker -p client --bins
bin=target/release
addr=127.0.0.1:6667

"$bin/broker" &
broker=$!
trap 'kill -TERM "$broker" 2>/dev/null; wait "$broker" 2>/dev/null || true' EXIT
trap 'exit 0' INT TERM
for _ in $(seq 100); do
  "$bin/trib" topics list --brokers "$addr" >/dev/null 2>&1 && break
  kill -0 "$broker" 2>/dev/null || { echo "quickstart: the broker did not start" >&2; exit 1; }
  sleep 0.1
done

echo "== trib produce (acks 2: on disk before the answer)"
printf 'page view /home\npage view /jobs\nsearch rust\n' |
  "$bin/trib" produce --brokers "$addr" --topic quickstart --acks 2
echo "== trib consume --offset earliest --json"
"$bin/trib" consume --brokers "$addr" --topic quickstart --offset earliest --json
echo "== trib topics describe"
"$bin/trib" topics describe --brokers "$addr" --topic quickstart
echo
echo "broker serving on $addr (pid $broker, data in /tmp/tributary-logs); Ctrl-C to stop"
wait "$broker"
