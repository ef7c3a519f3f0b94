"""A soak through Kafka's clients: a confluent-kafka producer at acks all writes numbered
messages into a 6-partition topic for SECONDS while a group of three confluent-kafka members
churns (every few seconds one member leaves and another joins), each member committing what
it has read in its revocation callback and every 50 messages; whoever runs this kills brokers
meanwhile. Then the producer stops and the members read on until every acknowledged message is
in. Prints one JSON object: acknowledged, consumed, missing (acknowledged, never consumed),
the duplicates (messages delivered more than once) with the time of each repeat, and the
member churn. Exits 1 if an acknowledged message is missing.

    python3 soak.py BOOTSTRAP TOPIC SECONDS
"""
import collections
import json
import os
import random
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
MEMBERS = 3
report = {"members_started": 0, "members_left": 0}

admin = AdminClient({"bootstrap.servers": bootstrap})
for future in admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)]).values():
    future.result(60)

lock = threading.Lock()
deliveries = collections.defaultdict(list)  # seq -> [time of each delivery]
refused_commits = collections.Counter()


class Member:
    def __init__(self, n):
        self.stop = threading.Event()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": topic + "-soak",
            "client.id": f"member-{n}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
        })
        self.consumer.subscribe([topic], on_revoke=self.revoked)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def commit(self, partitions=None):
        try:
            if partitions is None:
                self.consumer.commit(asynchronous=False)
                return
            positions = [tp for tp in self.consumer.position(partitions) if tp.offset >= 0]
            if positions:
                self.consumer.commit(offsets=positions, asynchronous=False)
        except KafkaException as e:
            with lock:
                refused_commits[e.args[0].name()] += 1

    def revoked(self, consumer, partitions):
        self.commit(partitions)

    def run(self):
        unacked = 0
        while not self.stop.is_set():
            message = self.consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            with lock:
                deliveries[int(message.value())].append(time.time())
            unacked += 1
            if unacked >= 50:
                self.commit()
                unacked = 0
        self.consumer.close()  # leaves the group: the revocation callback commits

    def leave(self):
        self.stop.set()
        self.thread.join(60)
        if self.thread.is_alive():
            print(f"{time.strftime('%H:%M:%S')} a member did not stop in 60 s", file=sys.stderr, flush=True)


members = [Member(n) for n in range(MEMBERS)]
report["members_started"] = MEMBERS
started = [MEMBERS]

acknowledged = set()
failed_deliveries = collections.Counter()


def delivered(error, message):
    if error is None:
        acknowledged.add(int(message.value()))
    else:
        failed_deliveries[error.name()] += 1


producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "message.timeout.ms": 120000})
churn_stop = threading.Event()


def churn():
    while not churn_stop.wait(random.uniform(2, 5)):
        i = random.randrange(MEMBERS)
        members[i].leave()
        report["members_left"] += 1
        members[i] = Member(started[0])
        started[0] += 1
        report["members_started"] += 1


churner = threading.Thread(target=churn, daemon=True)
churner.start()


def progress():
    # Every 5 s on stderr: what was acknowledged, consumed and given up so far.
    while True:
        time.sleep(5)
        with lock:
            consumed = len(deliveries)
        print(f"{time.strftime('%H:%M:%S')} acknowledged {len(acknowledged)} consumed {consumed} "
              f"failed {dict(failed_deliveries)} members started {report['members_started']}",
              file=sys.stderr, flush=True)


threading.Thread(target=progress, daemon=True).start()
seq = 0
end = time.time() + seconds
while time.time() < end:
    for _ in range(50):
        while True:
            try:
                producer.produce(topic, value=b"%d" % seq, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        seq += 1
    producer.poll(0)
    time.sleep(0.05)  # about 1,000 messages a second
producer.flush(150)
churn_stop.set()
churner.join(60)
report["sent"] = seq
report["acknowledged"] = len(acknowledged)
report["failed_deliveries"] = dict(failed_deliveries)

deadline = time.time() + 120
while time.time() < deadline:
    with lock:
        if acknowledged <= deliveries.keys():
            break
    time.sleep(0.5)
for member in members:
    member.leave()

with lock:
    missing = sorted(acknowledged - deliveries.keys())
if missing:
    # Where the members are, and what their coordinator says of the group.
    import faulthandler
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    try:
        described = admin.describe_consumer_groups([topic + "-soak"])[topic + "-soak"].result(30)
        report["group_state"] = str(described.state)
        report["group_members"] = [(m.client_id, m.member_id, [tp.partition for tp in m.assignment.topic_partitions])
                                   for m in described.members]
    except Exception as e:
        report["group_state"] = f"not described: {e}"
with lock:
    repeats = sorted(t for times in deliveries.values() for t in times[1:])
report["consumed"] = len(deliveries)
report["missing"] = len(missing)
report["missing_first"] = missing[:10]
report["duplicates"] = len(repeats)
report["duplicate_times"] = repeats
report["refused_commits"] = dict(refused_commits)
print(json.dumps(report), flush=True)
os._exit(0 if not missing else 1)
