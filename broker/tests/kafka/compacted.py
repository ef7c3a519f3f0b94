"""A compacted topic through confluent-kafka: AdminClient creates it (cleanup.policy=compact,
4 KiB segments, tombstones kept 1 s); 40 keys get 20 values each, keys 0-4 then a tombstone,
and more writes of one other key seal those segments. A record without a key is refused with
INVALID_RECORD. Then the topic is read from the start until the cleaner has run: every key
once, with its last value at the offset it was acknowledged at, keys 0-4 gone with their
tombstones. Prints a JSON object; exits 1 on a failure.

    python3 compacted.py BOOTSTRAP TOPIC
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
report = {}


def fail(message):
    report["failure"] = message
    print(json.dumps(report))
    sys.exit(1)


admin = AdminClient({"bootstrap.servers": bootstrap})
config = {"cleanup.policy": "compact", "segment.bytes": "4096", "delete.retention.ms": "1000"}
admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3, config=config)])[topic].result(30)
described = admin.describe_configs([__import__("confluent_kafka").admin.ConfigResource("TOPIC", topic)])
report["cleanup.policy"] = list(described.values())[0].result(30)["cleanup.policy"].value

producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 2000})
acknowledged = {}  # key -> (offset, value) of its last acknowledged record
errors = []


def delivered(err, message):
    if err is not None:
        errors.append(err.code())
        return
    key = message.key().decode()
    value = message.value()
    acknowledged[key] = (message.offset(), None if value is None else value.decode())


for turn in range(20):
    for k in range(40):
        producer.produce(topic, key=f"key-{k:02}", value=f"{k}:{turn}:" + "v" * 60, on_delivery=delivered)
    producer.flush(30)
for k in range(5):
    producer.produce(topic, key=f"key-{k:02}", value=None, on_delivery=delivered)
producer.flush(30)
if errors:
    fail(f"produce errors: {errors}")

# A record without a key is refused, on its own.
keyless = []
producer.produce(topic, value=b"no key", on_delivery=lambda err, m: keyless.append(err))
producer.flush(30)
report["keyless"] = keyless[0].name() if keyless and keyless[0] else None
if not keyless or keyless[0] is None or keyless[0].code() != KafkaError.INVALID_RECORD:
    fail(f"a keyless record: {keyless}")

# Writes of another key roll the segments holding the rest, so the cleaner may take them.
time.sleep(1.5)
for n in range(100):
    producer.produce(topic, key="filler", value=f"{n}:" + "f" * 60, on_delivery=delivered)
producer.flush(30)


def read_all():
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        records = []
        deadline = time.time() + 30
        while time.time() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                fail(f"consume: {message.error()}")
            value = message.value()
            records.append((message.offset(), message.key().decode(), None if value is None else value.decode()))
            if message.offset() + 1 >= high:
                break
        return records
    finally:
        consumer.close()


started = time.time()
expected = {key: seen for key, seen in acknowledged.items() if key != "filler" and seen[1] is not None}
while True:
    records = read_all()
    kept = [(offset, key, value) for offset, key, value in records if key != "filler"]
    got = {key: (offset, value) for offset, key, value in kept}
    if len(kept) == len(expected) and got == expected:
        break
    if time.time() - started > 90:
        fail(f"after 90 s: {len(kept)} records of other keys, {len(got)} keys; expected {len(expected)}")
    time.sleep(1)
report["compacted_after_s"] = round(time.time() - started, 1)
report["records_read"] = len(records)
report["keys"] = len(got)
report["tombstones_left"] = sum(1 for _, _, value in kept if value is None)
report["last_offset"] = acknowledged["filler"][0]
print(json.dumps(report))
