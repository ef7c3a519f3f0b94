"""DeleteRecords through Kafka's admin clients. `delete`: a topic of small segments gets 200
records; confluent-kafka's AdminClient deletes those before offset 120 and kafka-python's
KafkaAdminClient those before 150; the log start (ListOffsets earliest) follows, a consumer
positioned below it gets OFFSET_OUT_OF_RANGE and resets to it, and an offset past the high
watermark is refused. `check` (after the leader changed): the new leader starts at 150 too.
Prints a JSON object; exits 1 on a failure.

    python3 delete_records.py BOOTSTRAP TOPIC delete|check
"""
import json
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPythonPartition

bootstrap, topic, mode = sys.argv[1], sys.argv[2], sys.argv[3]
report = {}


def first_read(offset):
    """The offset of the first record a consumer positioned at `offset` reads (resetting to the
    earliest on OFFSET_OUT_OF_RANGE)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{offset}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, offset)])
    try:
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                return message.offset()
        return None
    finally:
        consumer.close()


def earliest():
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[0]
    finally:
        consumer.close()


if mode == "delete":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=1, replication_factor=3, config={"segment.bytes": "4096"})
    admin.create_topics([new])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for n in range(200):
        producer.produce(topic, value=b"record %03d " % n + b"x" * 80, partition=0)
        if n % 10 == 9:
            producer.flush(30)
    producer.flush(30)
    report["first_before"] = first_read(0)
    deleted = admin.delete_records([TopicPartition(topic, 0, 120)])
    report["confluent_low_watermark"] = list(deleted.values())[0].result(30).low_watermark
    report["earliest_after_confluent"] = earliest()
    report["read_from_10"] = first_read(10)
    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    answer = python_admin.delete_records({KafkaPythonPartition(topic, 0): 150}, timeout_ms=30000)
    report["kafka_python_low_watermark"] = list(answer.values())[0]["low_watermark"]
    python_admin.close()
    try:
        list(admin.delete_records([TopicPartition(topic, 0, 10_000)]).values())[0].result(30)
        report["past_the_end"] = "accepted"
    except KafkaException as e:
        report["past_the_end"] = e.args[0].name()
    ok = (report["first_before"] == 0 and report["confluent_low_watermark"] == 120
          and report["earliest_after_confluent"] == 120 and report["read_from_10"] == 120
          and report["kafka_python_low_watermark"] == 150 and report["past_the_end"] == "OFFSET_OUT_OF_RANGE")
else:
    report["earliest"] = earliest()
    report["read_from_0"] = first_read(0)
    ok = report["earliest"] == 150 and report["read_from_0"] == 150
print(json.dumps(report))
sys.exit(0 if ok else 1)
