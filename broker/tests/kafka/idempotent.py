"""kafka-python 3's producer, idempotent by default (InitProducerId, sequence numbers), into a
Tributary cluster's Kafka listener, then read back by its consumer. Prints a JSON object;
exits 1 on a failure.

    python3 idempotent.py BOOTSTRAP TOPIC
"""
import json
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=5)
report = {"idempotent": bool(producer.config.get("enable_idempotence"))}
futures = [producer.send(topic, key=b"k%d" % (i % 7), value=b"value-%d" % i, headers=[("n", b"%d" % i)]) for i in range(1000)]
producer.flush(60)
offsets = [f.get(timeout=30).offset for f in futures]
producer.close()
report["acknowledged"] = len(offsets)

consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000)
partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
consumer.assign(partitions)
read = []
for message in consumer:
    read.append(message.value.decode())
    if len(read) >= 1000:
        break
consumer.close()
report["read"] = len(read)
report["distinct"] = len(set(read))
ok = report["idempotent"] and report["read"] == 1000 and report["distinct"] == 1000
print(json.dumps(report))
sys.exit(0 if ok else 1)
