"""Topic and cluster administration through Kafka's admin clients, against a Tributary
cluster's Kafka listeners (brokers checking retention every 200 ms):

- confluent-kafka's AdminClient creates a topic with Kafka-named configs, describes its
  configs (its own and the brokers' defaults, with their sources), changes them
  incrementally (a shorter retention.ms takes effect: the log start moves) and wholesale
  (AlterConfigs: what is not named goes back to the default), and is refused what Tributary
  does not take (an unknown cleanup policy, unknown configs, fewer partitions);
- it adds partitions, describes the cluster, and deletes the topic;
- kafka-python's KafkaAdminClient describes the cluster and a topic's configs, adds
  partitions and deletes a topic.

Prints one JSON object of what it saw; exits 1 on a failure.

    python3 topic_admin.py BOOTSTRAP TOPIC
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewPartitions, NewTopic)

bootstrap, topic = sys.argv[1], sys.argv[2]
report = {}


def fail(message):
    report["failure"] = message
    print(json.dumps(report), flush=True)
    sys.exit(1)


def wait_for(condition, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.2)
    fail("timed out waiting for " + what)


def error_of(future):
    try:
        future.result(30)
        return "NONE"
    except KafkaException as e:
        return e.args[0].name()


admin = AdminClient({"bootstrap.servers": bootstrap})
created = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3,
                                        config={"retention.ms": "3600000", "segment.bytes": "2048"})])
created[topic].result(30)


TOPIC_SOURCE, DEFAULT_SOURCE = ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value


def source(entry):
    return getattr(entry.source, "value", entry.source)


def configs():
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(30)


described = configs()
report["described"] = {name: (e.value, str(e.source)) for name, e in described.items()}
if described["retention.ms"].value != "3600000" or source(described["retention.ms"]) != TOPIC_SOURCE:
    fail("retention.ms as created: %s" % report["described"])
if source(described["flush.ms"]) != DEFAULT_SOURCE or described["cleanup.policy"].value != "delete":
    fail("defaults: %s" % report["described"])

# 100 messages of 200 bytes in segments of 2 KiB; then a retention of 1 ms drops the sealed ones.
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
for i in range(100):
    producer.produce(topic, partition=0, value=("%-200d" % i).encode())
    producer.flush(30)
# Gone before the topic is deleted below: a live producer refreshes the metadata of the topics
# it knows asking for them to be created if missing (allow.auto.create.topics, as Kafka's
# brokers do with auto.create.topics.enable), which could bring the deleted topic back.
del producer
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic + "-watermarks"})
# Visible once flushed (visible_after = "flush"), within flush_ms.
wait_for(lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1] == 100, "100 visible")
low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
report["before_retention"] = [low, high]
if (low, high) != (0, 100):
    fail("watermarks before the retention change: %s" % report["before_retention"])
resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
    ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
admin.incremental_alter_configs([resource])[resource].result(30)
if configs()["retention.ms"].value != "1":
    fail("retention.ms after the change: %s" % configs()["retention.ms"])
wait_for(lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[0] > 0,
         "the new retention to move the log start")
report["after_retention"] = list(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30))
consumer.close()

# AlterConfigs replaces: flush.ms set, retention.ms back to the brokers' default.
resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"flush.ms": "500"})
admin.alter_configs([resource])[resource].result(30)
after = configs()
report["after_alter"] = {n: (after[n].value, str(after[n].source)) for n in ["flush.ms", "retention.ms", "segment.bytes"]}
if after["flush.ms"].value != "500" or source(after["retention.ms"]) != DEFAULT_SOURCE:
    fail("after AlterConfigs: %s" % report["after_alter"])

# Refusals.
refusals = {}
for name, entry in [("bad_policy", ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.SET)),
                    ("unknown", ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)),
                    ("not_a_number", ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET))]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    refusals[name] = error_of(admin.incremental_alter_configs([resource])[resource])
missing = ConfigResource(ConfigResource.Type.TOPIC, topic + "-missing")
refusals["describe_missing"] = error_of(admin.describe_configs([missing])[missing])
refusals["fewer_partitions"] = error_of(admin.create_partitions([NewPartitions(topic, 1)])[topic])
report["refusals"] = refusals

# More partitions; the cluster; deletion.
admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
wait_for(lambda: len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == 4, "4 partitions")
# Reassignment and preferred election: partition 1's replica list turned round (same
# replicas, another preferred leader), then the preferred replica elected.
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KafkaTopicPartition

kadmin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
placement = admin.list_topics(topic, timeout=30).topics[topic].partitions[1]
turned = list(reversed(placement.replicas))
moved = kadmin.alter_partition_reassignments({KafkaTopicPartition(topic, 1): turned})
report["reassignment"] = {"from": placement.replicas, "to": turned, "answer": str(moved)[:300]}


def reassigned():
    now = admin.list_topics(topic, timeout=30).topics[topic].partitions[1]
    return now.replicas == turned and not kadmin.list_partition_reassignments({topic: [1]})


wait_for(reassigned, "the reassignment")
from confluent_kafka import ElectionType

elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 1)]).result(30)
report["elected"] = {str(tp.partition): (e.name() if e else "NONE") for tp, e in elected.items()}
wait_for(lambda: admin.list_topics(topic, timeout=30).topics[topic].partitions[1].leader == turned[0],
         "the preferred replica to lead")
again = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 1)]).result(30)
report["elected_again"] = {str(tp.partition): (e.name() if e else "NONE") for tp, e in again.items()}
refusals["reassign_to_unknown_broker"] = str(
    kadmin.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [1, 2, 99]}))[:200]
kadmin.close()

cluster = admin.describe_cluster().result(30)
report["cluster"] = {"id": cluster.cluster_id, "brokers": len(cluster.nodes), "controller": cluster.controller.id}
admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
wait_for(lambda: topic not in admin.list_topics(timeout=30).topics, "the topic to go")
refusals["delete_again"] = error_of(admin.delete_topics([topic], operation_timeout=30)[topic])

# A produce to a name no topic can have fails at once, not after the message timeout.
invalid = []
started = time.time()
bad = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 60000})
bad.produce("no way!", b"x", on_delivery=lambda e, m: invalid.append(e.name() if e else "delivered"))
bad.flush(30)
report["invalid_topic"] = {"errors": invalid, "seconds": round(time.time() - started, 1)}

# kafka-python's admin client.
from kafka.admin import ConfigResource as KafkaConfigResource, ConfigResourceType, NewPartitions as KafkaNewPartitions, NewTopic as KafkaNewTopic

kadmin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
other = topic + "-kp"
kadmin.create_topics([KafkaNewTopic(other, 1, 3, topic_configs={"retention.bytes": "1048576"})])
kconfigs = kadmin.describe_configs([KafkaConfigResource(ConfigResourceType.TOPIC, other)])
report["kafka_python_configs"] = str(kconfigs)[:2000]
if "1048576" not in str(kconfigs):
    fail("kafka-python describe_configs: %s" % kconfigs)
kadmin.create_partitions({other: KafkaNewPartitions(3)})
kcluster = kadmin.describe_cluster()
report["kafka_python_cluster"] = {"id": kcluster["cluster_id"], "brokers": len(kcluster["brokers"])}
kadmin.delete_topics([other])
kadmin.close()
wait_for(lambda: other not in admin.list_topics(timeout=30).topics, "kafka-python's topic to go")
print(json.dumps(report))
