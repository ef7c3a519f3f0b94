"""confluent-kafka (librdkafka) against a Tributary cluster's Kafka listeners: an acks-all lz4
producer into a 6-partition topic; two consumers in one group read every message exactly once;
a third joins and the partitions rebalance over three, and the three read what follows exactly
once; after every consumer closed, a new one resumes at the committed offsets. Messages are
produced once the members hold their partitions: a commit that a rebalance refuses means the
message comes again, as Kafka's at-least-once has it. Prints one JSON object of what it saw;
exits 1 on a failure.

    python3 groups.py BOOTSTRAP TOPIC
"""
import json
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
report = {}


def fail(message):
    report["failure"] = message
    print(json.dumps(report))
    sys.exit(1)


admin = AdminClient({"bootstrap.servers": bootstrap})
for future in admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)]).values():
    future.result(30)


def produce(first, count):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "lz4", "linger.ms": 5})
    delivered = []
    errors = []

    def on_delivery(error, message):
        (errors if error else delivered).append(message)

    for i in range(first, first + count):
        producer.produce(topic, key=str(i).encode(), value=("message-%d" % i).encode(), on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(60)
    if errors or len(delivered) != count:
        fail("produced %d of %d: %s" % (len(delivered), count, errors[:3]))
    return count


class Member:
    """A group member that commits synchronously after every message it takes."""

    def __init__(self, name):
        self.name = name
        self.seen = []
        self.assignment = []
        self.refused_commits = 0
        self.stop = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": topic + "-readers",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        })
        self.consumer.subscribe([topic])
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            message = self.consumer.poll(0.2)
            if message is not None and not message.error():
                self.seen.append(message.value().decode())
                try:
                    self.consumer.commit(message=message, asynchronous=False)
                except KafkaException:
                    self.refused_commits += 1
            self.assignment = sorted(tp.partition for tp in self.consumer.assignment())
        self.consumer.close()

    def close(self):
        self.stop.set()
        self.thread.join()


def wait_for(condition, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.2)
    fail("timed out waiting for " + what)


members = [Member("c1"), Member("c2")]
wait_for(lambda: all(len(m.assignment) == 3 for m in members), "two members to take three partitions each")
sent = produce(0, 3000)
wait_for(lambda: sum(len(m.seen) for m in members) >= sent, "two members to read 3000")
time.sleep(1)
first = [v for m in members for v in m.seen]
report["two_members"] = {m.name: len(m.seen) for m in members}
report["two_members_assignment"] = {m.name: m.assignment for m in members}
if len(first) != sent or len(set(first)) != sent:
    fail("two members read %d messages, %d distinct, of %d" % (len(first), len(set(first)), sent))

members.append(Member("c3"))
wait_for(lambda: all(len(m.assignment) == 2 for m in members), "three members to take two partitions each")
report["three_members_assignment"] = {m.name: m.assignment for m in members}
before = {m.name: len(m.seen) for m in members}
produce(sent, 3000)
wait_for(lambda: sum(len(m.seen) - before[m.name] for m in members) >= 3000, "three members to read 3000 more")
time.sleep(1)
second = [v for m in members for v in m.seen[before[m.name]:]]
report["three_members"] = {m.name: len(m.seen) - before[m.name] for m in members}
if len(set(second)) != 3000 or any(len(m.seen) == before[m.name] for m in members):
    fail("three members read %d distinct of 3000 (%s)" % (len(set(second)), report["three_members"]))
for m in members:
    m.close()

produce(6000, 1000)
resumed = Member("c4")
wait_for(lambda: len(resumed.seen) >= 1000, "a new member to read the 1000 sent after the others closed")
time.sleep(2)
resumed.close()
report["resumed"] = len(resumed.seen)
report["refused_commits"] = sum(m.refused_commits for m in members + [resumed])
expected = {"message-%d" % i for i in range(6000, 7000)}
if set(resumed.seen) != expected:
    fail("a new member read %d messages, not the 1000 after the committed offsets" % len(resumed.seen))
print(json.dumps(report))
