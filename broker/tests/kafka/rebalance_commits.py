"""Commits in the revocation callback, as Kafka's clients are meant to be used: members of one
confluent-kafka group read a 6-partition topic while a producer writes it, through three
rebalances (a third member joins, leaves, and a fourth joins). Each member commits what it has
read when its partitions are revoked (and every 50 messages), so no message may be delivered
twice. Prints one JSON object of what it saw; exits 1 on a failure.

    python3 rebalance_commits.py BOOTSTRAP TOPIC
"""
import collections
import json
import os
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
TOTAL = 6000
report = {}


def fail(message):
    report["failure"] = message
    print(json.dumps(report), flush=True)
    os._exit(1)  # the members' threads would keep the process alive


def wait_for(condition, what, seconds=90):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.2)
    fail("timed out waiting for " + what)


admin = AdminClient({"bootstrap.servers": bootstrap})
for future in admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)]).values():
    future.result(30)

seen = collections.Counter()
seen_lock = threading.Lock()


class Member:
    def __init__(self, name):
        self.name = name
        self.read = 0
        self.refused_commits = []
        self.assignment = []
        self.stop = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": topic + "-readers",
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": "range",
        })
        self.consumer.subscribe([topic], on_revoke=self.revoked)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def commit_positions(self, partitions):
        positions = [tp for tp in self.consumer.position(partitions) if tp.offset >= 0]
        if not positions:
            return
        try:
            self.consumer.commit(offsets=positions, asynchronous=False)
        except KafkaException as e:
            self.refused_commits.append(e.args[0].name())

    def revoked(self, consumer, partitions):
        self.commit_positions(partitions)

    def run(self):
        while not self.stop.is_set():
            message = self.consumer.poll(0.1)
            self.assignment = sorted(tp.partition for tp in self.consumer.assignment())
            if message is None or message.error():
                continue
            with seen_lock:
                seen[message.value().decode()] += 1
            self.read += 1
            if self.read % 50 == 0:
                self.commit_positions(self.consumer.assignment())
        self.consumer.close()  # revokes, so commits, then leaves

    def close(self):
        self.stop.set()
        self.thread.join()


def produce():
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(TOTAL):
        producer.produce(topic, key=str(i).encode(), value=("message-%d" % i).encode())
        producer.poll(0)
        if i % 100 == 99:
            time.sleep(0.1)  # about 6 s of writing, across the rebalances
    if producer.flush(60):
        fail("the producer did not deliver everything")


members = [Member("c1"), Member("c2")]
wait_for(lambda: all(len(m.assignment) == 3 for m in members), "two members to take three partitions each")
writer = threading.Thread(target=produce)
writer.start()
wait_for(lambda: sum(seen.values()) >= 1000, "the first 1000 messages read")
members.append(Member("c3"))  # rebalance 1
wait_for(lambda: all(len(m.assignment) == 2 for m in members), "three members to take two partitions each")
wait_for(lambda: members[2].read >= 200, "the third member to read")
members[2].close()  # rebalance 2
members.append(Member("c4"))  # rebalance 3
writer.join()
wait_for(lambda: len(seen) == TOTAL, "every message read")
time.sleep(2)  # anything delivered twice would show by now
for m in members:
    if not m.stop.is_set():
        m.close()
twice = sorted(v for v, n in seen.items() if n > 1)
report["read"] = sum(seen.values())
report["distinct"] = len(seen)
report["delivered_twice"] = len(twice)
report["by_member"] = {m.name: m.read for m in members}
report["refused_commits"] = sum(len(m.refused_commits) for m in members)
report["refusals"] = sorted(set(r for m in members for r in m.refused_commits))
if twice:
    fail("%d messages delivered twice, e.g. %s" % (len(twice), twice[:5]))
print(json.dumps(report))
