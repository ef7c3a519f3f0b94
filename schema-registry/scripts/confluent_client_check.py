#!/usr/bin/env python3
"""Drives a running registry with Confluent's own Python client (confluent-kafka), to show
existing Confluent clients work against it unchanged.

    pip install 'confluent-kafka[avro,schemaregistry]'
    python3 schema-registry/scripts/confluent_client_check.py http://127.0.0.1:8081

Exits non-zero, with the failing step, on the first difference.
"""

import json
import sys
import uuid

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext


def main(url: str) -> None:
    client = SchemaRegistryClient({"url": url})
    subject = f"confluent-check-{uuid.uuid4().hex[:8]}-value"
    v1 = {"type": "record", "name": "Check", "namespace": "confluent.check",
          "fields": [{"name": "name", "type": "string"}]}
    v2 = dict(v1, fields=v1["fields"] + [{"name": "n", "type": "long", "default": 0}])
    bad = dict(v1, fields=[{"name": "name", "type": "int"}])

    id1 = client.register_schema(subject, Schema(json.dumps(v1), "AVRO"))
    assert client.register_schema(subject, Schema(json.dumps(v1), "AVRO")) == id1, "re-register"
    assert client.test_compatibility(subject, Schema(json.dumps(v2), "AVRO")), "v2 compatible"
    assert not client.test_compatibility(subject, Schema(json.dumps(bad), "AVRO")), "bad refused"
    id2 = client.register_schema(subject, Schema(json.dumps(v2), "AVRO"))
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, id2), latest
    assert client.get_versions(subject) == [1, 2]
    assert subject in client.get_subjects()
    assert json.loads(client.get_schema(id1).schema_str)["name"] == "Check"
    found = client.lookup_schema(subject, Schema(json.dumps(v1), "AVRO"))
    assert (found.version, found.schema_id) == (1, id1), found
    try:
        client.register_schema(subject, Schema(json.dumps(bad), "AVRO"))
        raise AssertionError("an incompatible schema was registered")
    except SchemaRegistryError as e:
        assert e.http_status_code == 409 and e.error_code == 409, e
    try:
        client.get_latest_version("no-such-subject")
        raise AssertionError("a missing subject was found")
    except SchemaRegistryError as e:
        assert e.error_code == 40401, e
    client.set_compatibility(subject, "FULL")
    assert client.get_compatibility(subject) == "FULL"

    # The serializers: Confluent wire format out, the same record back.
    serializer = AvroSerializer(client, json.dumps(v2), conf={"auto.register.schemas": False,
                                                             "use.latest.version": True})
    deserializer = AvroDeserializer(client)
    ctx = SerializationContext(subject[: -len("-value")], MessageField.VALUE)
    payload = serializer({"name": "ada", "n": 7}, ctx)
    assert payload[0] == 0 and int.from_bytes(payload[1:5], "big") == id2, payload[:5]
    assert deserializer(payload, ctx) == {"name": "ada", "n": 7}

    assert client.delete_version(subject, 1) == 1
    assert client.delete_subject(subject) == [2]
    assert client.delete_subject(subject, permanent=True) == [1, 2]
    print("ok: confluent-kafka's SchemaRegistryClient, AvroSerializer and AvroDeserializer work")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8081")
