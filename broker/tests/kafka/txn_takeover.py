"""A transaction whose coordinator died after deciding it: the script writes a transaction's
records over every partition, prints `flushed`, and waits for a line on stdin while the test
writes the decision (PrepareCommit) into the registry and kills the coordinator. Another
broker must finish the commit: a read_committed consumer then reads every record. Prints a
JSON object; exits 1 on a failure.

    python3 txn_takeover.py BOOTSTRAP TOPIC
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
PARTITIONS, PER_PARTITION = 3, 100
admin = AdminClient({"bootstrap.servers": bootstrap})
for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
    f.result()
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "takeover-" + topic})
producer.init_transactions(60)
producer.begin_transaction()
for p in range(PARTITIONS):
    for i in range(PER_PARTITION):
        producer.produce(topic, partition=p, value=b"%d-%d" % (p, i))
producer.flush(60)
print("flushed", flush=True)
sys.stdin.readline()

started = time.time()
read, deadline = 0, time.time() + 90
while read < PARTITIONS * PER_PARTITION and time.time() < deadline:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "check-%s-%d" % (topic, time.time_ns()),
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    read, ended, until = 0, set(), time.time() + 10
    while len(ended) < PARTITIONS and time.time() < until:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error():
            if message.error().code() == -191:
                ended.add(message.partition())
            continue
        read += 1
    consumer.close()
report = {"read_committed": read, "seconds": round(time.time() - started, 1)}
print(json.dumps(report))
sys.exit(0 if read == PARTITIONS * PER_PARTITION else 1)
