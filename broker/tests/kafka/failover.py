"""confluent-kafka, idempotent with acks all, into a replicated topic while the test kills a
partition's leader: produces until told to stop (a line on stdin), then prints how many were
acknowledged and reads the topic back to check every acknowledged message is there, and how
many were read more than once (a batch retried across the failover appended twice). Exits 1
on a loss.

    python3 failover.py BOOTSTRAP TOPIC
"""
import json
import select
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
# No re-bootstrap (librdkafka 2.x's `metadata.recovery.strategy`): when a kill and a lost
# answer's closed connection leave every broker looking down at once, librdkafka 2.16 goes
# back to its bootstrap list and then sent nothing for minutes (seen in a run of 25 kills:
# 245 s without a request, its queue timed out), which is the client's matter, not the
# brokers'.
producer = Producer({
    "bootstrap.servers": bootstrap,
    "acks": "all",
    "enable.idempotence": True,
    "message.timeout.ms": 120000,
    "linger.ms": 5,
    "metadata.recovery.strategy": "none",
})
acknowledged = set()
failed = []
# The longest time without an acknowledgement while messages were waiting for one.
last_ack, longest_wait = time.time(), 0.0


def on_delivery(error, message):
    global last_ack, longest_wait
    if error:
        failed.append(str(error))
    else:
        acknowledged.add(message.value().decode())
        now = time.time()
        longest_wait = max(longest_wait, now - last_ack)
        last_ack = now


i = 0
print("producing", flush=True)
while True:
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    if ready:
        sys.stdin.readline()
        break
    try:
        producer.produce(topic, value=("m-%d" % i).encode(), on_delivery=on_delivery)
    except BufferError:
        # The local queue is full while the cluster fails over: wait for room.
        producer.poll(0.1)
        continue
    producer.poll(0)
    i += 1
    if i % 200 == 0:
        time.sleep(0.05)
producer.flush(120)
report = {
    "sent": i,
    "acknowledged": len(acknowledged),
    "failed": len(failed),
    "failures": failed[:3],
    "longest_wait_s": round(longest_wait, 1),
}

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic + "-check", "auto.offset.reset": "earliest", "enable.auto.commit": False})
metadata = consumer.list_topics(topic, timeout=30)
consumer.assign([TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions])
read = set()
repeats = 0
idle_since = time.time()
# Until idle: every copy is counted, so the whole topic is read.
while time.time() - idle_since < 5:
    message = consumer.poll(0.5)
    if message is None or message.error():
        continue
    value = message.value().decode()
    repeats += value in read
    read.add(value)
    idle_since = time.time()
consumer.close()
missing = acknowledged - read
report["read"] = len(read)
report["repeats"] = repeats
report["missing"] = len(missing)
print(json.dumps(report))
sys.exit(1 if missing or not acknowledged else 0)
