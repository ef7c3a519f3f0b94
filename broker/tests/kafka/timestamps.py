"""Records produced with chosen timestamps (CreateTime) by confluent-kafka into one partition,
in many batches and with one batch sent late (its records older than the batch before), then
every record's timestamp asked for by confluent-kafka's offsets_for_times and (every tenth) by
`kcat -Q -t TOPIC:0:TS`. Kafka's answer is the first record, in offset order, whose timestamp is at
or after the one asked for. Prints a JSON object; exits 1 on a failure.

    python3 timestamps.py BOOTSTRAP TOPIC
"""
import json
import re
import subprocess
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
base = 1_700_000_000_000
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
sent = []  # (offset, timestamp)


def delivered(error, message):
    if error is not None:
        raise SystemExit(f"delivery failed: {error}")
    sent.append((message.offset(), message.timestamp()[1]))


for batch in range(60):
    for i in range(5):
        n = batch * 5 + i
        # Batch 30 goes late: its records are 100 ms older than batch 29's.
        stamp = base + 10 * n - (100 if batch == 30 else 0)
        producer.produce(topic, value=b"record %d" % n, partition=0, timestamp=stamp, on_delivery=delivered)
    producer.flush(30)
sent.sort()
report = {"produced": len(sent)}


def expected(ts):
    return next((offset for offset, stamp in sent if stamp >= ts), -1)


# What a consumer reads carries the timestamps as sent (and is visible: what ListOffsets
# searches).
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "timestamps", "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, 0, 0)])
read = []
while len(read) < len(sent):
    message = consumer.poll(10)
    if message is None:
        break
    if message.error() is None:
        read.append((message.offset(), message.timestamp()[1]))
report["read_as_sent"] = read == sent
# A consumer with no partitions to fetch: one that fetches has a long poll ahead of each of
# its ListOffsets on the connection, answered in order as Kafka answers them.
consumer.close()
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "timestamps", "enable.auto.commit": False})

# Every timestamp sent, one past each, one before all and one after all. One partition per
# request: Kafka refuses a ListOffsets that names a partition twice.
asked = sorted({stamp for _, stamp in sent} | {stamp + 1 for _, stamp in sent} | {base - 5, base + 10 * 400})
wrong = []
for ts in asked:
    found = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)[0]
    if found.offset != expected(ts):
        wrong.append((ts, found.offset, expected(ts)))
report["librdkafka_asked"] = len(asked)
report["librdkafka_wrong"] = wrong[:5]
consumer.close()

# kcat -Q for every tenth of them.
wrong = []
for ts in asked[::10]:
    out = subprocess.run(["kcat", "-b", bootstrap, "-Q", "-t", f"{topic}:0:{ts}"], capture_output=True, text=True, timeout=30)
    answer = re.search(r"offset (-?\d+)", out.stdout)
    if answer is None or int(answer.group(1)) != expected(ts):
        wrong.append((ts, out.stdout.strip() + out.stderr.strip(), expected(ts)))
report["kcat_asked"] = len(asked[::10])
report["kcat_wrong"] = wrong[:5]
ok = not report["kcat_wrong"] and not report["librdkafka_wrong"] and report["read_as_sent"]
print(json.dumps(report))
sys.exit(0 if ok else 1)
