"""A transaction over every partition of a topic whose commit comes after a partition leader
was killed -9 (by the test, between the two halves): the transaction must commit or abort
whole, as a read_committed consumer reads it. Prints `flushed` once the records are written
and waits for a line on stdin before committing; then a JSON object. Exits 1 on a failure.

    python3 txn_leader_kill.py BOOTSTRAP TOPIC
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
PARTITIONS, PER_PARTITION = 3, 100
admin = AdminClient({"bootstrap.servers": bootstrap})
for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
    f.result()
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "kill-" + topic})
producer.init_transactions(60)
producer.begin_transaction()
for p in range(PARTITIONS):
    for i in range(PER_PARTITION):
        producer.produce(topic, partition=p, value=b"%d-%d" % (p, i))
producer.flush(60)
print("flushed", flush=True)
sys.stdin.readline()
report = {}
try:
    producer.commit_transaction(60)
    report["commit"] = "committed"
except KafkaException as e:
    report["commit"] = "failed: %s" % e.args[0]
    try:
        producer.abort_transaction(60)
        report["abort"] = "aborted"
    except KafkaException as e:
        report["abort"] = "failed: %s" % e.args[0]

consumer = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": "check-" + topic,
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    "enable.auto.commit": False,
})
consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
per_partition, ended, deadline = [0] * PARTITIONS, set(), time.time() + 60
while len(ended) < PARTITIONS and time.time() < deadline:
    message = consumer.poll(1)
    if message is None:
        continue
    if message.error():
        if message.error().code() == -191:
            ended.add(message.partition())
        continue
    per_partition[message.partition()] += 1
consumer.close()
report["read_per_partition"] = per_partition
report["all_partitions_ended"] = len(ended) == PARTITIONS
whole = per_partition in ([PER_PARTITION] * PARTITIONS, [0] * PARTITIONS)
committed = report["commit"] == "committed"
ok = whole and report["all_partitions_ended"] and (not committed or per_partition[0] == PER_PARTITION)
print(json.dumps(report))
sys.exit(0 if ok else 1)
