"""Reads a topic's Iceberg table the way an analyst would, with pyiceberg (through the SQL
catalog on SQLite the loader keeps) and with DuckDB's iceberg extension, and prints what each
saw as one JSON object. The loader's tests compare it with what the agents acknowledged.

    read_table.py CATALOG_DB WAREHOUSE_URL NAMESPACE TOPIC [--since MS --until MS] [--column NAME]

With --since and --until, pyiceberg also counts the rows a filter on header.time selects; with
--column, the column's values in log order.

Run with the Python of the virtual environment scripts/test.sh makes (pyiceberg, and DuckDB
with its iceberg and avro extensions, which pin their own DuckDB version).
"""

import argparse
import datetime
import json
import os

import duckdb
import duckdb_extension_avro
import duckdb_extension_iceberg
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan


def iso(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc).isoformat()


def extension(module, name):
    return os.path.join(
        os.path.dirname(module.__file__), "extensions", "v" + duckdb.__version__,
        name + ".duckdb_extension")


def local(location):
    return location[len("file://"):] if location.startswith("file://") else location


def main():
    parser = argparse.ArgumentParser()
    for name in ("db", "warehouse", "namespace", "topic"):
        parser.add_argument(name)
    parser.add_argument("--since", type=int)
    parser.add_argument("--until", type=int)
    parser.add_argument("--column")
    args = parser.parse_args()
    db, warehouse, namespace, topic = args.db, args.warehouse, args.namespace, args.topic
    catalog = SqlCatalog("tributary", uri="sqlite:///" + db, warehouse=warehouse)
    table = catalog.load_table((namespace, topic))
    if topic == "_dead_letters":
        rows = table.scan().to_arrow().sort_by([("_partition", "ascending"),
                                                ("_offset", "ascending")])
        print(json.dumps({
            "rows": rows.num_rows,
            "topics": rows.column("topic").to_pylist(),
            "offsets": rows.column("_offset").to_pylist(),
            "reasons": rows.column("reason").to_pylist(),
            "payloads": [p.hex() for p in rows.column("payload").to_pylist()],
        }))
        return
    rows = table.scan(selected_fields=("header", "_partition", "_offset", "_index")).to_arrow()
    out = {
        "rows": rows.num_rows,
        "ids": sorted(h["id"].hex() for h in rows.column("header").to_pylist()),
        "positions": sorted(
            zip(rows.column("_partition").to_pylist(), rows.column("_offset").to_pylist(),
                rows.column("_index").to_pylist())),
        "partition_spec": [f.name for f in table.spec().fields],
        "schema_fields": [f.name for f in table.schema().fields],
        "schema_types": {f.name: str(f.field_type) for f in table.schema().fields},
        "files": len(list(table.scan().plan_files())),
        # The current snapshot's data manifests: who added each, and whether any of its
        # entries is live (not only DELETED).
        "manifests": [
            [m.added_snapshot_id, (m.added_files_count or 0) + (m.existing_files_count or 0) > 0]
            for m in (table.current_snapshot().manifests(table.io)
                      if table.current_snapshot() else [])],
        "current_snapshot": table.current_snapshot().snapshot_id if table.current_snapshot() else None,
        # Per live data file: its hour (the partition value) and size.
        "file_sizes": sorted(
            [task.file.partition[0], task.file.file_size_in_bytes]
            for task in table.scan().plan_files()),
    }
    if args.column:
        table_rows = table.scan().to_arrow().sort_by([("_partition", "ascending"),
                                                      ("_offset", "ascending"),
                                                      ("_index", "ascending")])
        out["column"] = table_rows.column(args.column).to_pylist()
    if args.since is not None:
        since, until = args.since, args.until
        window = And(GreaterThanOrEqual("header.time", iso(since)),
                     LessThan("header.time", iso(until)))
        out["filtered_rows"] = table.scan(row_filter=window).to_arrow().num_rows
    snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number)
    # A compaction's replace snapshot carries its parent's coverage.
    out["snapshots"] = [
        {"id": s.snapshot_id, "rows": table.scan(snapshot_id=s.snapshot_id).count(),
         "operation": s.summary.operation.value,
         "covers": json.loads(s.summary.get("tributary.partitions") or "null")}
        for s in snapshots]

    con = duckdb.connect()
    con.load_extension(extension(duckdb_extension_avro, "avro"))
    con.load_extension(extension(duckdb_extension_iceberg, "iceberg"))
    metadata = local(table.metadata_location)
    out["duckdb_rows"] = con.execute(
        "SELECT count(*) FROM iceberg_scan(?)", [metadata]).fetchone()[0]
    out["duckdb_distinct_ids"] = con.execute(
        "SELECT count(DISTINCT header.id) FROM iceberg_scan(?)", [metadata]).fetchone()[0]
    first = snapshots[0].snapshot_id
    out["duckdb_first_snapshot_rows"] = con.execute(
        "SELECT count(*) FROM iceberg_scan(?, snapshot_from_id => ?)",
        [metadata, first]).fetchone()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
