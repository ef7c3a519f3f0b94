"""Kafka's own client against a running `tributary up` deployment, over mutual TLS as the
operator: confluent-kafka reads agent-sent page views from the analytics cluster and decodes
them with its AvroDeserializer against Tributary's schema registry (the Confluent wire format
is Tributary's envelope), then produces clicks with its AvroSerializer, keys and headers into a
live topic of their own. Prints one JSON line: what it read and what it sent.

    interop.py LIVE_BOOTSTRAP ANALYTICS_BOOTSTRAP REGISTRY_URL PKI_DIR TOPIC COUNT

INTEROP_DEBUG=eos,msg,broker,protocol (librdkafka's `debug` contexts) logs the producer's view
on stderr.
"""

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

live, analytics, registry_url, pki, topic, count = sys.argv[1:7]
count = int(count)

tls = {
    "security.protocol": "SSL",
    "ssl.ca.location": os.path.join(pki, "ca.crt"),
    "ssl.certificate.location": os.path.join(pki, "operator.crt"),
    "ssl.key.location": os.path.join(pki, "operator.key"),
}
registry = SchemaRegistryClient(
    {
        "url": registry_url,
        "ssl.ca.location": tls["ssl.ca.location"],
        "ssl.certificate.location": tls["ssl.certificate.location"],
        "ssl.key.location": tls["ssl.key.location"],
    }
)

# 1. Agent-sent page views, mirrored into analytics, decoded by Confluent's deserializer.
consumer = Consumer(
    dict(tls, **{"bootstrap.servers": analytics, "group.id": "interop-reader",
                 "auto.offset.reset": "earliest", "enable.auto.commit": False})
)
consumer.subscribe(["page-view"])
deserialize = AvroDeserializer(registry)
decoded = []
deadline = time.time() + 60
while len(decoded) < 20 and time.time() < deadline:
    message = consumer.poll(1.0)
    if message is None:
        continue
    if message.error():
        raise SystemExit(f"consume: {message.error()}")
    value = message.value()
    assert value[0] == 0, "the envelope's magic byte"
    event = deserialize(value, SerializationContext("page-view", MessageField.VALUE))
    header = event["header"]
    assert isinstance(header["time"], int) and len(header["id"]) == 16, event
    decoded.append(header["server"])
consumer.close()

# 2. Clicks with Confluent's serializer as it comes: the click schema registered under the
#    topic's own subject, `{topic}-value` (TopicNameStrategy), which the loader reads.
schema = registry.get_latest_version("click-value").schema.schema_str
serialize = AvroSerializer(registry, schema)
# The topic first, as an operator would, and its partitions led with their replicas in sync
# before the first acks-all produce.
admin = AdminClient(dict(tls, **{"bootstrap.servers": live}))
created = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])
try:
    created[topic].result(30)
except KafkaException as e:
    if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
        raise
deadline = time.time() + 60
while True:
    found = admin.list_topics(topic, timeout=10).topics.get(topic)
    if found is not None and found.error is None and len(found.partitions) == 3 and all(
        p.leader >= 0 and len(p.isrs) >= 2 for p in found.partitions.values()
    ):
        break
    if time.time() > deadline:
        raise SystemExit(f"{topic}: partitions not led and in sync: {found}")
    time.sleep(0.5)

producer_conf = dict(tls, **{"bootstrap.servers": live, "acks": "all",
                             "enable.idempotence": True, "compression.type": "lz4"})
if os.environ.get("INTEROP_DEBUG"):
    producer_conf["debug"] = os.environ["INTEROP_DEBUG"]
producer = Producer(producer_conf)
failed = []
delivered = []


def report(error, message):
    (failed if error else delivered).append(str(error) if error else message.offset())


now = int(time.time() * 1000)
for i in range(count):
    event_id = os.urandom(16)
    click = {
        "header": {"time": now, "server": "interop.py", "service": "confluent-kafka",
                   "id": event_id},
        "member_id": i,
        "page_key": "home",
        "element": f"button-{i}",
        "target_url": None,
    }
    value = serialize(click, SerializationContext(topic, MessageField.VALUE))
    producer.produce(topic, key=f"member-{i}".encode(), value=value,
                     headers=[("source", b"confluent-kafka"), ("n", str(i).encode())],
                     on_delivery=report)
    producer.poll(0)
left = producer.flush(120)
print(json.dumps({"decoded": len(decoded), "produced": len(delivered), "failed": failed,
                  "undelivered": left}))
