"""confluent-kafka's transactional producer against a Tributary cluster's Kafka listener:
committed and aborted transactions as read_committed and read_uncommitted consumers see them,
a zombie producer fenced by a second one with its transactional.id, a transaction left open
past its timeout aborted, and a consume-transform-produce loop whose offsets commit with its
output (send_offsets_to_transaction). Prints a JSON object; exits 1 on a failure.

    python3 transactions.py BOOTSTRAP TOPIC
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
output = topic + "-out"
report = {}
admin = AdminClient({"bootstrap.servers": bootstrap})
for f in admin.create_topics([NewTopic(t, 3, 3) for t in (topic, output)]).values():
    f.result()


def producer(transactional_id, **extra):
    config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
    config.update(extra)
    p = Producer(config)
    p.init_transactions(30)
    return p


def transaction(p, prefix, n, commit):
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, key=b"%d" % i, value=b"%s-%d" % (prefix.encode(), i))
    p.flush(30)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def read_all(name, isolation, group=None):
    """Every value of `name` a consumer with `isolation` reads to the end it may read: from
    the start, or with `group` from the group's committed offsets."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group or "reader-%s-%s" % (name, isolation),
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    if group is None:
        consumer.assign([TopicPartition(name, p, 0) for p in range(3)])
    else:
        committed = consumer.committed([TopicPartition(name, p) for p in range(3)], timeout=30)
        consumer.assign([TopicPartition(name, c.partition, max(c.offset, 0)) for c in committed])
    values, ended, deadline = [], set(), time.time() + 30
    while len(ended) < 3 and time.time() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error():
            if message.error().code() == -191:  # _PARTITION_EOF
                ended.add(message.partition())
            continue
        values.append(message.value().decode())
    consumer.close()
    return values


first = producer("txn-" + topic)
transaction(first, "committed", 100, True)
transaction(first, "aborted", 50, False)
transaction(first, "later", 30, True)
committed = read_all(topic, "read_committed")
uncommitted = read_all(topic, "read_uncommitted")
report["read_committed"] = len(committed)
report["read_committed_aborted"] = sum(v.startswith("aborted") for v in committed)
report["read_uncommitted"] = len(uncommitted)

# A second producer with the same transactional.id fences the first.
second = producer("txn-" + topic)
try:
    transaction(first, "zombie", 5, True)
    report["zombie"] = "committed"
except KafkaException as e:
    report["zombie"] = "fenced" if e.args[0].fatal() else "refused: %s" % e.args[0]
transaction(second, "second", 10, True)
after = read_all(topic, "read_committed")
report["zombie_records_read"] = sum(v.startswith("zombie") for v in after)
report["second_records_read"] = sum(v.startswith("second") for v in after)

# A transaction left open past its timeout is aborted, and the partitions read on past it.
slow = producer("slow-" + topic, **{"transaction.timeout.ms": 3000})
slow.begin_transaction()
for i in range(10):
    slow.produce(topic, value=b"expired-%d" % i)
slow.flush(30)
time.sleep(6)
try:
    slow.commit_transaction(30)
    report["expired_commit"] = "committed"
except KafkaException as e:
    report["expired_commit"] = "refused"
transaction(second, "after-expiry", 10, True)
final = read_all(topic, "read_committed")
report["expired_records_read"] = sum(v.startswith("expired") for v in final)
report["after_expiry_read"] = sum(v.startswith("after-expiry") for v in final)

# Consume, transform, produce: offsets committed with the output, in one transaction each.
group = "transform-" + topic
consumer = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": True,
})
consumer.subscribe([topic])
transformer = producer("transform-" + topic)
ended, moved, deadline = set(), 0, time.time() + 60
transformer.begin_transaction()
while len(ended) < 3 and time.time() < deadline:
    message = consumer.poll(1)
    if message is None:
        continue
    if message.error():
        if message.error().code() == -191:
            ended.add(message.partition())
        continue
    transformer.produce(output, value=message.value().upper())
    moved += 1
    if moved % 40 == 0:
        transformer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
        transformer.commit_transaction(30)
        transformer.begin_transaction()
transformer.send_offsets_to_transaction(
    consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
transformer.commit_transaction(30)
consumer.close()
report["transformed"] = moved
report["output_read"] = len(read_all(output, "read_committed"))
report["left_after_committed_offsets"] = len(read_all(topic, "read_committed", group))

ok = (
    report["read_committed"] == 130
    and report["read_committed_aborted"] == 0
    and report["read_uncommitted"] == 180
    and report["zombie"] != "committed"
    and report["zombie_records_read"] == 0
    and report["second_records_read"] == 10
    and report["expired_commit"] == "refused"
    and report["expired_records_read"] == 0
    and report["after_expiry_read"] == 10
    and report["output_read"] == report["transformed"] == 150
    and report["left_after_committed_offsets"] == 0
)
print(json.dumps(report))
sys.exit(0 if ok else 1)
