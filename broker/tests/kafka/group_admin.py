"""Kafka's group semantics and group administration through Kafka's own clients, against a
Tributary cluster's Kafka listeners:

- a static member (group.instance.id) restarted within its session timeout takes its
  partitions back without a rebalance (the other member's callbacks do not fire);
- confluent-kafka's AdminClient lists and describes the group (members, hosts, instance ids,
  assignments), refuses to delete it while it has members, and deletes it once empty;
- a commit's metadata comes back from committed(); a commit for a topic that does not exist
  is refused UNKNOWN_TOPIC_OR_PART;
- kafka-python's KafkaAdminClient describes the group, deletes one partition's committed
  offset (OffsetDelete) and the group itself (DeleteGroups).

Prints one JSON object of what it saw; exits 1 on a failure.

    python3 group_admin.py BOOTSTRAP TOPIC
"""
import json
import os
import sys
import threading
import time

from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]
group = topic + "-static"
report = {}


def fail(message):
    report["failure"] = message
    print(json.dumps(report), flush=True)
    os._exit(1)  # the members' threads would keep the process alive


def wait_for(condition, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.2)
    fail("timed out waiting for " + what)


admin = AdminClient({"bootstrap.servers": bootstrap})
for future in admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=3)]).values():
    future.result(30)
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
for i in range(100):
    producer.produce(topic, key=str(i).encode(), value=("message-%d" % i).encode())
producer.flush(30)


class Member:
    """A subscribed member that counts the rebalances it is told of."""

    def __init__(self, name, instance=None):
        self.name = name
        self.rebalances = 0
        self.assignment = []
        self.stop = threading.Event()
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 20000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
        if instance:
            config["group.instance.id"] = instance
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic], on_assign=self.assigned, on_revoke=self.revoked)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def assigned(self, consumer, partitions):
        self.rebalances += 1

    def revoked(self, consumer, partitions):
        self.rebalances += 1

    def run(self):
        while not self.stop.is_set():
            self.consumer.poll(0.2)
            self.assignment = sorted(tp.partition for tp in self.consumer.assignment())
        self.consumer.close()

    def close(self):
        self.stop.set()
        self.thread.join()


# Static membership: b restarts (a static member's close sends no LeaveGroup) and comes back
# as the same instance; a is told of no rebalance, and b gets its partitions back.
a = Member("a")
b = Member("b", instance="b-host")
wait_for(lambda: len(a.assignment) == 2 and len(b.assignment) == 2, "two members to take two partitions each")
time.sleep(1)
a_rebalances, b_assignment = a.rebalances, b.assignment
b.close()
b = Member("b-again", instance="b-host")
wait_for(lambda: b.assignment == b_assignment, "the static member to get its partitions back")
time.sleep(3)
report["static_restart"] = {"a_rebalances_during": a.rebalances - a_rebalances, "b_assignment": b.assignment}
if a.rebalances != a_rebalances or a.assignment == [] or len(a.assignment) != 2:
    fail("the static member's restart rebalanced the group: %s" % report["static_restart"])

# The admin clients see the group, its members and their assignments.
listed = admin.list_consumer_groups().result(30)
states = {g.group_id: g.state for g in listed.valid}
report["listed"] = {g: str(s) for g, s in states.items()}
if states.get(group) != ConsumerGroupState.STABLE:
    fail("list_consumer_groups: %s" % states)
described = admin.describe_consumer_groups([group])[group].result(30)
members = {m.client_id: m for m in described.members}
report["described"] = {
    "state": str(described.state),
    "assignor": described.partition_assignor,
    "members": {
        c: {"host": m.host, "instance": m.group_instance_id,
            "partitions": sorted(tp.partition for tp in m.assignment.topic_partitions)}
        for c, m in members.items()
    },
}
if described.state != ConsumerGroupState.STABLE or sorted(members) != ["a", "b-again"]:
    fail("describe_consumer_groups: %s" % report["described"])
if members["b-again"].group_instance_id != "b-host" or members["a"].group_instance_id:
    fail("instance ids: %s" % report["described"])
if sorted(tp.partition for tp in members["b-again"].assignment.topic_partitions) != b_assignment:
    fail("b's assignment as described: %s" % report["described"])
if any(not m.host for m in members.values()) or described.partition_assignor != "range":
    fail("hosts or assignor: %s" % report["described"])

try:
    admin.delete_consumer_groups([group])[group].result(30)
    fail("a group with members was deleted")
except KafkaException as e:
    report["delete_with_members"] = e.args[0].name()
    if e.args[0].code() != KafkaError.NON_EMPTY_GROUP:
        fail("deleting a group with members: %s" % e)

# A commit's metadata comes back; a commit for a topic that does not exist is refused.
loner = Consumer({"bootstrap.servers": bootstrap, "group.id": topic + "-meta", "enable.auto.commit": False})
loner.commit(offsets=[TopicPartition(topic, 0, 7, "checkpoint-7"), TopicPartition(topic, 1, 3)], asynchronous=False)
committed = loner.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
report["committed"] = [(tp.partition, tp.offset, tp.metadata) for tp in committed]
if [(tp.offset, tp.metadata or "") for tp in committed] != [(7, "checkpoint-7"), (3, "")]:
    fail("committed offsets and metadata: %s" % report["committed"])
try:
    refused = loner.commit(offsets=[TopicPartition(topic + "-nope", 0, 1)], asynchronous=False)
    errors = [tp.error for tp in refused if tp.error]
    if not errors or errors[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
        fail("a commit for a missing topic: %s" % errors)
    report["commit_unknown_topic"] = errors[0].name()
except KafkaException as e:
    report["commit_unknown_topic"] = e.args[0].name()
    if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
        fail("a commit for a missing topic: %s" % e)
loner.close()

# kafka-python's admin client: describe, delete one partition's offset, delete the group.
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

kadmin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
kdescribed = kadmin.describe_groups([group])[group]
report["kafka_python_described"] = {"state": kdescribed["group_state"], "members": len(kdescribed["members"])}
if kdescribed["group_state"] != "Stable" or len(kdescribed["members"]) != 2:
    fail("kafka-python describe_groups: %s" % (kdescribed,))
deleted = kadmin.delete_group_offsets(topic + "-meta", [KafkaTopicPartition(topic, 0)])
report["offset_delete"] = {str(k): str(v) for k, v in deleted.items()}
left = kadmin.list_group_offsets({topic + "-meta": None})[topic + "-meta"]
report["offsets_left"] = sorted(tp.partition for tp in left)
if report["offsets_left"] != [1]:
    fail("after deleting partition 0's offset: %s" % report["offsets_left"])
results = kadmin.delete_groups([topic + "-meta", topic + "-never"])
results = results.items() if isinstance(results, dict) else results
report["kafka_python_delete_groups"] = {g: str(e) for g, e in results}
kadmin.close()

a.close()
b.close()
# Both members have left (a by LeaveGroup, b once its session ends): the group goes empty
# and may then be deleted.
def deleted_group():
    try:
        admin.delete_consumer_groups([group])[group].result(30)
        return True
    except KafkaException as e:
        if e.args[0].code() != KafkaError.NON_EMPTY_GROUP:
            fail("deleting the empty group: %s" % e)
        return False


wait_for(deleted_group, "the group to empty and be deleted", seconds=60)
after = admin.describe_consumer_groups([group])[group].result(30)
report["after_delete"] = str(after.state)
print(json.dumps(report))
