"""Produce throughput over the Kafka listener with confluent-kafka: plain acks=all producers,
idempotent ones, and transactional ones committing every N records, each mode with the same
number of producers (threads) writing the same records into one topic. Prints one JSON
object: records per second of each mode.

    python3 transactions.py BOOTSTRAP TOPIC --records R --producers P --per-transaction N \
        --message-bytes B
"""
import argparse
import json
import threading
import time

from confluent_kafka import Producer

parser = argparse.ArgumentParser()
parser.add_argument("bootstrap")
parser.add_argument("topic")
parser.add_argument("--records", type=int, default=200_000)
parser.add_argument("--producers", type=int, default=8)
parser.add_argument("--per-transaction", type=int, default=100)
parser.add_argument("--message-bytes", type=int, default=200)
parser.add_argument("--modes", default="plain,idempotent,transactional")
args = parser.parse_args()
value = b"x" * args.message_bytes


def run(mode, index, count, failures):
    config = {"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 5}
    if mode == "plain":
        config["enable.idempotence"] = False
    elif mode == "idempotent":
        config["enable.idempotence"] = True
    else:
        config["transactional.id"] = "bench-%s-%d-%d" % (args.topic, index, time.time_ns())
    producer = Producer(config)
    errors = []

    def delivered(error, _message):
        if error is not None:
            errors.append(error)

    if mode == "transactional":
        producer.init_transactions(60)
        sent = 0
        while sent < count:
            producer.begin_transaction()
            for _ in range(min(args.per_transaction, count - sent)):
                producer.produce(args.topic, value=value, on_delivery=delivered)
                sent += 1
            producer.commit_transaction(60)
    else:
        for i in range(count):
            while True:
                try:
                    producer.produce(args.topic, value=value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(120)
    failures.extend(errors)


# The topic, its leaders and the clients' metadata settled before anything is timed.
warm = Producer({"bootstrap.servers": args.bootstrap, "acks": "all"})
for _ in range(1000):
    warm.produce(args.topic, value=value)
warm.flush(60)

results = {}
for mode in args.modes.split(","):
    per = args.records // args.producers
    failures = []
    threads = [threading.Thread(target=run, args=(mode, i, per, failures)) for i in range(args.producers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    results[mode] = {
        "records": per * args.producers,
        "seconds": round(seconds, 3),
        "records_per_s": round(per * args.producers / seconds),
        "failed_deliveries": len(failures),
    }
print(json.dumps(results))
