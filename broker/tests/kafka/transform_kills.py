"""A consume-transform-produce loop (confluent-kafka, one transaction per few records, its
input offsets committed with its output by send_offsets_to_transaction) killed -9 again and
again mid-transaction, each time started again, then run until its input is done. Every
input record must be in the output exactly once, as a read_committed consumer reads it.
Prints a JSON object; exits 1 on a failure.

    python3 transform_kills.py BOOTSTRAP TOPIC KILLS RECORDS
    python3 transform_kills.py loop BOOTSTRAP TOPIC drain|forever   (the loop itself)
"""
import json
import random
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3
PER_TRANSACTION = 40


def loop(bootstrap, topic, drain):
    """Moves `topic` to `topic-out` upper-cased, from the group's committed offsets; with
    `drain`, ends once a transaction finds nothing left."""
    group = "transform-" + topic
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group})
    producer.init_transactions(60)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=60)
    consumer.assign([TopicPartition(topic, c.partition, max(c.offset, 0)) for c in committed])
    while True:
        producer.begin_transaction()
        moved, ended = 0, set()
        while moved < PER_TRANSACTION and len(ended) < PARTITIONS:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    ended.add(message.partition())
                continue
            producer.produce(topic + "-out", value=message.value().upper())
            moved += 1
            time.sleep(0.005)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        if moved == 0 and drain:
            return


def read_committed(bootstrap, topic):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "check-" + topic,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values, ended, deadline = [], set(), time.time() + 60
    while len(ended) < PARTITIONS and time.time() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error():
            if message.error().code() == -191:
                ended.add(message.partition())
            continue
        values.append(message.value().decode())
    consumer.close()
    return values


def main():
    if sys.argv[1] == "loop":
        loop(sys.argv[2], sys.argv[3], sys.argv[4] == "drain")
        return
    bootstrap, topic, kills, records = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 3) for t in (topic, topic + "-out")]).values():
        f.result()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(records):
        producer.produce(topic, key=b"%d" % i, value=b"record-%d" % i)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    started = time.time()
    for _ in range(kills):
        child = subprocess.Popen([sys.executable, __file__, "loop", bootstrap, topic, "forever"])
        time.sleep(random.uniform(1.0, 2.5))
        child.kill()
        child.wait()
    drained = subprocess.run([sys.executable, __file__, "loop", bootstrap, topic, "drain"], timeout=300)
    values = read_committed(bootstrap, topic + "-out")
    counts = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    expected = {("RECORD-%d" % i) for i in range(records)}
    report = {
        "kills": kills,
        "seconds": round(time.time() - started, 1),
        "drained": drained.returncode,
        "output": len(values),
        "distinct": len(counts),
        "duplicates": sum(c - 1 for c in counts.values()),
        "missing": len(expected - set(counts)),
        "unexpected": len(set(counts) - expected),
    }
    print(json.dumps(report))
    ok = report["drained"] == 0 and report["duplicates"] == 0 and report["missing"] == 0 and report["unexpected"] == 0
    sys.exit(0 if ok else 1)


main()
