"""A topic created by confluent-kafka's AdminClient with message.timestamp.type=LogAppendTime:
records produced with old chosen timestamps come back, in the delivery reports and to a
consumer, stamped with the leader's clock at append (type LogAppendTime), and ListOffsets by
time finds them by that time. Prints a JSON object; exits 1 on a failure.

    python3 append_time.py BOOTSTRAP TOPIC
"""
import json
import sys
import time

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})
new = NewTopic(topic, num_partitions=1, replication_factor=3, config={"message.timestamp.type": "LogAppendTime"})
admin.create_topics([new])[topic].result(30)
described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
entries = list(described.values())[0].result(30)
report = {"described": entries["message.timestamp.type"].value}

producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
delivered = []  # (offset, timestamp type, timestamp)


def on_delivery(error, message):
    if error is not None:
        raise SystemExit(f"delivery failed: {error}")
    delivered.append((message.offset(), *message.timestamp()))


before = int(time.time() * 1000)
for batch in range(10):
    for i in range(10):
        producer.produce(topic, value=b"record %d" % (batch * 10 + i), timestamp=1_000_000 + i, on_delivery=on_delivery)
    producer.flush(30)
    time.sleep(0.02)
after = int(time.time() * 1000)
delivered.sort()
report["delivered"] = len(delivered)
report["delivered_stamped"] = all(kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after for _, kind, ts in delivered)

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "append-time", "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, 0, 0)])
read = []
while len(read) < len(delivered):
    message = consumer.poll(10)
    if message is None:
        break
    if message.error() is None:
        read.append((message.offset(), *message.timestamp()))
consumer.close()
report["read_as_delivered"] = read == delivered

# The first record at or after each delivered time, by offsets_for_times.
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "append-time", "enable.auto.commit": False})
wrong = []
for ts in sorted({ts for _, _, ts in delivered}):
    expected = next(offset for offset, _, stamp in delivered if stamp >= ts)
    found = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)[0].offset
    if found != expected:
        wrong.append((ts, found, expected))
# By the producer's times the answer would be offset 5; every record is later than them.
found = consumer.offsets_for_times([TopicPartition(topic, 0, 1_000_005)], timeout=30)[0].offset
if found != 0:
    wrong.append(("a producer's time", found, 0))
consumer.close()
report["by_time_wrong"] = wrong[:5]
ok = report["described"] == "LogAppendTime" and report["delivered_stamped"] and report["read_as_delivered"] and not wrong
print(json.dumps(report))
sys.exit(0 if ok else 1)
