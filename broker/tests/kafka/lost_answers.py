"""confluent-kafka with acks all producing through a proxy that loses some of the brokers'
produce answers (the test's AckDropper): librdkafka sends the batches again on a new
connection. Produces COUNT messages in rounds of 100 (a flush after each, so that there are
many produce requests), then reads the topic back through the same bootstrap. Prints one
JSON line: sent, acknowledged, failed, read, distinct.

    python3 lost_answers.py BOOTSTRAP TOPIC IDEMPOTENCE(true|false) COUNT
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic, idempotence, count = sys.argv[1], sys.argv[2], sys.argv[3] == "true", int(sys.argv[4])
producer = Producer({
    "bootstrap.servers": bootstrap,
    "acks": "all",
    "enable.idempotence": idempotence,
    "message.timeout.ms": 120000,
    "linger.ms": 2,
    "retry.backoff.ms": 10,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
})
acknowledged = set()
failed = []


def on_delivery(error, message):
    if error:
        failed.append(str(error))
    else:
        acknowledged.add(message.value().decode())


for i in range(count):
    producer.produce(topic, value=("m-%d" % i).encode(), on_delivery=on_delivery)
    if i % 100 == 99:
        producer.flush(60)
producer.flush(120)
report = {"sent": count, "acknowledged": len(acknowledged), "failed": len(failed), "failures": failed[:3]}

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic + "-check", "auto.offset.reset": "earliest", "enable.auto.commit": False})
metadata = consumer.list_topics(topic, timeout=30)
consumer.assign([TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions])
read = []
idle_since = time.time()
while time.time() - idle_since < 5:
    message = consumer.poll(0.5)
    if message is None or message.error():
        continue
    read.append(message.value().decode())
    idle_since = time.time()
consumer.close()
report["read"] = len(read)
report["distinct"] = len(set(read))
print(json.dumps(report))
