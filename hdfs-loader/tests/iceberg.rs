//! The Iceberg format against a real broker, ZooKeeper and registry, read back by the readers
//! analysts use: pyiceberg through the SQL catalog the loader keeps, and DuckDB's
//! `iceberg_scan` (tests/iceberg/read_table.py, in the virtual environment scripts/test.sh
//! makes; `TRIBUTARY_ICEBERG_PYTHON` names its Python).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hdfs_loader::{Config, Format};
use object_store::ObjectStore;
use serde_json::Value;
use testkit::broker::log_positions;
use testkit::loader::{BASE_TIME_MS, Cluster, TOPIC};

const HOUR_MS: i64 = 3_600_000;

struct Warehouse {
    dir: tempfile::TempDir,
    url: String,
    store: Arc<dyn ObjectStore>,
}

impl Warehouse {
    fn new() -> Warehouse {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let store = hdfs_loader::store_from_url(&url).unwrap();
        Warehouse { dir, url, store }
    }

    fn config(&self, host: &str) -> Config {
        Config {
            format: Format::Iceberg,
            store: Some(self.url.clone()),
            host_name: Some(host.into()),
            max_messages_per_commit: 150,
            ..Config::default()
        }
    }

    /// What pyiceberg and DuckDB read of `TOPIC`'s table; with `window`, pyiceberg also
    /// counts the rows a filter on `header.time` selects.
    fn read(&self, window: Option<(i64, i64)>) -> Value {
        let mut args = Vec::new();
        if let Some((since, until)) = window {
            args =
                vec!["--since".to_owned(), since.to_string(), "--until".into(), until.to_string()];
        }
        self.read_topic(TOPIC, &args)
    }

    /// What pyiceberg and DuckDB read of `topic`'s table, with read_table.py's `args`.
    fn read_topic(&self, topic: &str, args: &[String]) -> Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/iceberg/read_table.py");
        let catalog = self.dir.path().join("catalog.db");
        let mut command = std::process::Command::new(iceberg_python());
        command.arg(script).arg(catalog).arg(&self.url).arg("default").arg(topic).args(args);
        let output = command.output().expect("the iceberg environment's python runs");
        assert!(
            output.status.success(),
            "read_table.py failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("read_table.py prints JSON")
    }

    /// The Parquet files under `TOPIC`'s table's `data/`.
    fn data_files(&self) -> Vec<PathBuf> {
        self.data_files_of(TOPIC)
    }

    /// The Parquet files under `topic`'s table's `data/`.
    fn data_files_of(&self, topic: &str) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "parquet") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        walk(&self.dir.path().join("default").join(topic).join("data"), &mut files);
        files
    }
}

/// The Python of the environment with pyiceberg and DuckDB's iceberg extension.
fn iceberg_python() -> PathBuf {
    let python =
        std::env::var_os("TRIBUTARY_ICEBERG_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME");
            Path::new(&home).join(".cache/tributary/iceberg-venv/bin/python")
        });
    assert!(
        python.exists(),
        "{} is missing: scripts/test.sh makes the environment (pyiceberg, duckdb-extension-iceberg)",
        python.display()
    );
    python
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn positions(read: &Value) -> Vec<(i32, i64, i32)> {
    serde_json::from_value(read["positions"].clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_holds_every_acknowledged_event_once_and_pyiceberg_and_duckdb_agree() {
    let cluster = Cluster::start(2).await;
    // 400 events one every 18 s: two hours and a bit, so several hour partitions.
    let ids = cluster.produce_page_views(400, 18_000).await;
    let warehouse = Warehouse::new();
    let config = warehouse.config("loader-i");
    let summary = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 400);
    // Each run is a new loader: where to go on comes from the table's snapshots.
    let again = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(again.errors.is_empty(), "{:?}", again.errors);
    assert_eq!(again.rows, 0, "{again:?}");

    let times: Vec<i64> =
        ids.iter().map(|id| BASE_TIME_MS + testkit::events::sequence_of(id) * 18_000).collect();
    // The second whole hour the events span.
    let since = (times.iter().min().unwrap() / HOUR_MS + 1) * HOUR_MS;
    let until = since + HOUR_MS;
    let read = warehouse.read(Some((since, until)));

    assert_eq!(read["rows"], 400);
    let mut acknowledged: Vec<String> = ids.iter().map(|id| hex(id)).collect();
    acknowledged.sort();
    let seen: Vec<String> = serde_json::from_value(read["ids"].clone()).unwrap();
    assert_eq!(seen, acknowledged, "exactly the acknowledged events, each once");
    let rows = positions(&read);
    let unique: HashSet<(i32, i64)> = rows.iter().map(|&(p, o, _)| (p, o)).collect();
    assert_eq!(unique.len(), 400, "no message loaded twice");
    assert_eq!(unique, log_positions(cluster.broker(), TOPIC, 2).await);
    let in_window = times.iter().filter(|t| (since..until).contains(*t)).count();
    assert!(in_window > 0);
    assert_eq!(read["filtered_rows"], in_window, "pyiceberg's filter on header.time");
    assert_eq!(read["partition_spec"], serde_json::json!(["header_time_hour"]));
    assert_eq!(read["duckdb_rows"], 400, "DuckDB's iceberg_scan");
    assert_eq!(read["duckdb_distinct_ids"], 400);

    // Every snapshot commits ranges: rows only grow, the last covers each partition
    // to its log end, and time travel to the first gives its rows in both readers.
    let snapshots = read["snapshots"].as_array().unwrap();
    // Two partitions of 200 events in ranges of at most 150: a partition's second range is
    // committed after its first, so two snapshots at least (ranges of both partitions may
    // share one: group commit).
    assert!(snapshots.len() >= 2, "{snapshots:?}");
    let rows_at: Vec<u64> = snapshots.iter().map(|s| s["rows"].as_u64().unwrap()).collect();
    assert!(rows_at.windows(2).all(|w| w[0] < w[1]), "{rows_at:?}");
    assert_eq!(*rows_at.last().unwrap(), 400);
    assert_eq!(read["duckdb_first_snapshot_rows"], rows_at[0]);
    let covers = &snapshots.last().unwrap()["covers"];
    let consumer =
        client::SimpleConsumer::connect(&cluster.broker().addr, Default::default()).await.unwrap();
    for partition in 0..2 {
        let end = consumer.latest_offset(TOPIC, partition).await.unwrap();
        assert_eq!(covers[partition.to_string()]["end"], end, "{covers}");
    }
    assert!(warehouse.data_files().iter().all(|f| {
        f.parent().unwrap().file_name().unwrap().to_string_lossy().starts_with("header_time_hour=")
    }));

    // The audit counts what the snapshots hold, per window, once.
    cluster.await_loader_counts("loader-i", &ids, 18_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_loaders_committing_to_one_table_never_duplicate_a_row() {
    let cluster = Cluster::start(2).await;
    let warehouse = Warehouse::new();
    // The same host name: both claim every partition, so only the table's own commits stand
    // between them.
    let config = Config { max_messages_per_commit: 7, ..warehouse.config("same-host") };
    let mut produced = 0;
    let mut fenced = 0;
    for _ in 0..4 {
        cluster.produce_page_views(120, 1_000).await;
        produced += 120;
        let (a, b) = tokio::join!(
            cluster.run(&config, &warehouse.store),
            cluster.run(&config, &warehouse.store)
        );
        for summary in [a.unwrap(), b.unwrap()] {
            assert!(summary.errors.is_empty(), "{:?}", summary.errors);
            fenced += summary.partitions.iter().filter(|p| p.fenced).count();
        }
    }
    let read = warehouse.read(None);
    let rows = positions(&read);
    assert_eq!(rows.len(), produced);
    let unique: HashSet<(i32, i64, i32)> = rows.iter().copied().collect();
    assert_eq!(unique.len(), produced, "no row twice");
    assert!(fenced > 0, "the loaders raced for some range");
    // A fenced loader deleted the files of the range it lost.
    let snapshot_files: usize = serde_json::from_value(read["files"].clone()).unwrap();
    assert_eq!(warehouse.data_files().len(), snapshot_files);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_added_to_the_topic_becomes_a_column_null_in_older_rows_without_a_rewrite() {
    let cluster = Cluster::start(1).await;
    let header_fields = r#"{"name":"header","type":{"type":"record","name":"EventHeader","fields":[
            {"name":"time","type":"long"},{"name":"server","type":"string"},
            {"name":"service","type":"string"},{"name":"id","type":{"type":"fixed","name":"EventId","size":16}}]}}"#;
    let v1 = format!(
        r#"{{"type":"record","name":"Signup","namespace":"t","fields":[{header_fields},
        {{"name":"email","type":"string"}}]}}"#
    );
    let v2 = format!(
        r#"{{"type":"record","name":"Signup","namespace":"t","fields":[{header_fields},
        {{"name":"email","type":"string"}},
        {{"name":"plan","type":{{"type":"enum","name":"Plan","symbols":["FREE","PRO"]}},"default":"FREE"}},
        {{"name":"referrer","type":["null","string"],"default":null}}]}}"#
    );
    let warehouse = Warehouse::new();
    let config = warehouse.config("evolving");
    let header = |n: i64| {
        Value::Record(vec![
            ("time".into(), Value::Long(BASE_TIME_MS + n)),
            ("server".into(), Value::String("s".into())),
            ("service".into(), Value::String("signup".into())),
            ("id".into(), Value::Fixed(16, testkit::events::event_id(2_000_000 + n).to_vec())),
        ])
    };
    use apache_avro::types::Value;
    let id1 = cluster.registry.register("signup-value", &v1).await.unwrap();
    for n in 0..10 {
        let value = Value::Record(vec![
            ("header".into(), header(n)),
            ("email".into(), Value::String(format!("{n}@x"))),
        ]);
        let payload = events::envelope::encode_with(&cluster.registry, id1, value).await.unwrap();
        cluster.producer.send("signup", None, &payload).await.unwrap();
    }
    let first = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(first.errors.is_empty(), "{:?}", first.errors);
    let files_before = warehouse.data_files_of("signup");

    let id2 = cluster.registry.register("signup-value", &v2).await.unwrap();
    for n in 10..20 {
        let value = Value::Record(vec![
            ("header".into(), header(n)),
            ("email".into(), Value::String(format!("{n}@x"))),
            ("plan".into(), Value::Enum(1, "PRO".into())),
            ("referrer".into(), Value::Union(1, Box::new(Value::String("ads".into())))),
        ]);
        let payload = events::envelope::encode_with(&cluster.registry, id2, value).await.unwrap();
        cluster.producer.send("signup", None, &payload).await.unwrap();
    }
    let second = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(second.errors.is_empty(), "{:?}", second.errors);

    let read = |column: &str| warehouse.read_topic("signup", &["--column".into(), column.into()]);
    let plans = read("plan");
    assert_eq!(plans["rows"], 20);
    assert_eq!(plans["duckdb_rows"], 20);
    let fields: Vec<String> = serde_json::from_value(plans["schema_fields"].clone()).unwrap();
    assert!(fields.iter().any(|f| f == "plan") && fields.iter().any(|f| f == "referrer"));
    let plans: Vec<Option<String>> = serde_json::from_value(plans["column"].clone()).unwrap();
    assert_eq!(plans[..10], vec![None; 10][..], "rows loaded before the field read null");
    assert_eq!(plans[10..], vec![Some("PRO".to_owned()); 10][..]);
    let referrers: Vec<Option<String>> =
        serde_json::from_value(read("referrer")["column"].clone()).unwrap();
    assert_eq!(referrers[10..], vec![Some("ads".to_owned()); 10][..]);
    // No rewrite: the first run's files are still the table's.
    let files_after = warehouse.data_files_of("signup");
    assert!(files_before.iter().all(|f| files_after.contains(f)), "{files_before:?}");
    assert_eq!(files_after.len(), files_before.len() + 1);

    // Compaction merges a file of each schema into one of the current schema: the older rows
    // still read null in the new columns.
    let output = hdfs_loader::Output::open(&config, Arc::clone(&warehouse.store)).await.unwrap();
    let done = hdfs_loader::maintain(&output, &config).await.unwrap();
    let signup = done.iter().find(|m| m.table == "default.signup").unwrap();
    assert_eq!((signup.compacted.files_removed, signup.compacted.files_added), (2, 1));
    let plans = read("plan");
    assert_eq!((plans["rows"].as_u64(), plans["files"].as_u64()), (Some(20), Some(1)));
    let plans: Vec<Option<String>> = serde_json::from_value(plans["column"].clone()).unwrap();
    assert_eq!(plans[..10], vec![None; 10][..]);
    assert_eq!(plans[10..], vec![Some("PRO".to_owned()); 10][..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn int_and_float_fields_that_become_long_and_double_widen_their_columns() {
    use apache_avro::types::Value;
    let cluster = Cluster::start(1).await;
    let schema = |int: &str, float: &str| {
        format!(
            r#"{{"type":"record","name":"Reading","namespace":"t","fields":[
            {{"name":"header","type":{{"type":"record","name":"EventHeader","fields":[
            {{"name":"time","type":"long"}},{{"name":"server","type":"string"}},
            {{"name":"service","type":"string"}},{{"name":"id","type":{{"type":"fixed","name":"EventId","size":16}}}}]}}}},
            {{"name":"n","type":"{int}"}},{{"name":"ratio","type":"{float}"}}]}}"#
        )
    };
    let header = |n: i64| {
        Value::Record(vec![
            ("time".into(), Value::Long(BASE_TIME_MS + n)),
            ("server".into(), Value::String("s".into())),
            ("service".into(), Value::String("meter".into())),
            ("id".into(), Value::Fixed(16, testkit::events::event_id(3_000_000 + n).to_vec())),
        ])
    };
    let warehouse = Warehouse::new();
    let config = warehouse.config("widening");
    let v1 = cluster.registry.register("reading-value", &schema("int", "float")).await.unwrap();
    for n in 0..10 {
        let value = Value::Record(vec![
            ("header".into(), header(n)),
            ("n".into(), Value::Int(n as i32)),
            ("ratio".into(), Value::Float(0.5)),
        ]);
        let payload = events::envelope::encode_with(&cluster.registry, v1, value).await.unwrap();
        cluster.producer.send("reading", None, &payload).await.unwrap();
    }
    let first = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(first.errors.is_empty(), "{:?}", first.errors);
    let read = warehouse.read_topic("reading", &["--column".into(), "n".into()]);
    assert_eq!(read["schema_types"]["n"], "int");

    let v2 = cluster.registry.register("reading-value", &schema("long", "double")).await.unwrap();
    let big = 10_000_000_000_i64;
    for n in 10..20 {
        let value = Value::Record(vec![
            ("header".into(), header(n)),
            ("n".into(), Value::Long(big + n)),
            ("ratio".into(), Value::Double(0.25)),
        ]);
        let payload = events::envelope::encode_with(&cluster.registry, v2, value).await.unwrap();
        cluster.producer.send("reading", None, &payload).await.unwrap();
    }
    let second = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(second.errors.is_empty(), "{:?}", second.errors);

    let expected: Vec<i64> = (0..10).chain((10..20).map(|n| big + n)).collect();
    let check = |files: u64| {
        let read = warehouse.read_topic("reading", &["--column".into(), "n".into()]);
        assert_eq!((read["rows"].as_u64(), read["duckdb_rows"].as_u64()), (Some(20), Some(20)));
        assert_eq!(read["schema_types"]["n"], "long", "{read}");
        assert_eq!(read["schema_types"]["ratio"], "double", "{read}");
        assert_eq!(read["files"], files);
        let column: Vec<i64> = serde_json::from_value(read["column"].clone()).unwrap();
        assert_eq!(column, expected, "the int rows read as longs, the long rows whole");
        let ratios = warehouse.read_topic("reading", &["--column".into(), "ratio".into()]);
        let ratios: Vec<f64> = serde_json::from_value(ratios["column"].clone()).unwrap();
        assert_eq!(ratios, [vec![0.5; 10], vec![0.25; 10]].concat());
    };
    // No rewrite: the first file keeps its ints; readers widen them.
    check(2);
    // Compaction reads both files in the widened schema and writes one.
    let output = hdfs_loader::Output::open(&config, Arc::clone(&warehouse.store)).await.unwrap();
    hdfs_loader::maintain(&output, &config).await.unwrap();
    check(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_a_schema_the_table_cannot_take_go_to_the_dead_letters_and_the_topic_goes_on() {
    use apache_avro::types::Value;
    let cluster = Cluster::start(1).await;
    let schema = |amount: &str| {
        format!(
            r#"{{"type":"record","name":"Payment","namespace":"t","fields":[
            {{"name":"header","type":{{"type":"record","name":"EventHeader","fields":[
            {{"name":"time","type":"long"}},{{"name":"server","type":"string"}},
            {{"name":"service","type":"string"}},{{"name":"id","type":{{"type":"fixed","name":"EventId","size":16}}}}]}}}},
            {{"name":"amount","type":"{amount}"}}]}}"#
        )
    };
    let header = |n: i64| {
        Value::Record(vec![
            ("time".into(), Value::Long(BASE_TIME_MS + n)),
            ("server".into(), Value::String("s".into())),
            ("service".into(), Value::String("pay".into())),
            ("id".into(), Value::Fixed(16, testkit::events::event_id(4_000_000 + n).to_vec())),
        ])
    };
    let send = |id: i32, n: i64, amount: Value| {
        let registry = Arc::clone(&cluster.registry);
        let producer = &cluster.producer;
        async move {
            let value =
                Value::Record(vec![("header".into(), header(n)), ("amount".into(), amount)]);
            let payload = events::envelope::encode_with(&registry, id, value).await.unwrap();
            producer.send("payment", None, &payload).await.unwrap().offset.unwrap()
        }
    };
    let warehouse = Warehouse::new();
    let config = warehouse.config("incompatible");
    let v1 = cluster.registry.register("payment-value", &schema("long")).await.unwrap();
    for n in 0..5 {
        send(v1, n, Value::Long(n * 100)).await;
    }
    let first = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(first.errors.is_empty(), "{:?}", first.errors);

    // A change the registry refuses by default, made anyway: long to string.
    cluster.registry.set_compatibility("payment-value", "NONE").await.unwrap();
    let v2 = cluster.registry.register("payment-value", &schema("string")).await.unwrap();
    let mut refused = Vec::new();
    for n in 5..8 {
        refused.push(send(v2, n, Value::String(format!("{n}.00 EUR"))).await);
    }
    // Messages still written with v1 go on into the table.
    for n in 8..10 {
        send(v1, n, Value::Long(n * 100)).await;
    }
    let second = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(second.errors.is_empty(), "the topic goes on: {:?}", second.errors);
    assert_eq!(second.rows, 2);
    let payment = second.partitions.iter().find(|p| p.topic == "payment").unwrap();
    assert_eq!(payment.bad_records, 3, "{second:?}");

    let read = warehouse.read_topic("payment", &["--column".into(), "amount".into()]);
    assert_eq!(read["schema_types"]["amount"], "long", "the table keeps its type: {read}");
    let amounts: Vec<i64> = serde_json::from_value(read["column"].clone()).unwrap();
    assert_eq!(amounts, [0, 100, 200, 300, 400, 800, 900]);
    let dead = warehouse.read_topic("_dead_letters", &[]);
    assert_eq!(dead["rows"], 3, "{dead}");
    let offsets: Vec<i64> = serde_json::from_value(dead["offsets"].clone()).unwrap();
    assert_eq!(offsets, refused);
    let reason = dead["reasons"][0].as_str().unwrap();
    assert!(
        reason.starts_with(&format!("cannot decode with schema id {v2} as id {v1}")),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_leaves_one_small_file_per_closed_hour_and_every_count_unchanged() {
    let cluster = Cluster::start(2).await;
    // 400 events one every 18 s, in ranges of 25: a partition's range covers a quarter of an
    // hour, so each hour gets a file per partition per range.
    let mut ids = cluster.produce_page_views(400, 18_000).await;
    let warehouse = Warehouse::new();
    let config = Config { max_messages_per_commit: 25, ..warehouse.config("compacting") };
    let summary = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    let times: Vec<i64> =
        ids.iter().map(|id| BASE_TIME_MS + testkit::events::sequence_of(id) * 18_000).collect();
    let since = (times.iter().min().unwrap() / HOUR_MS + 1) * HOUR_MS;
    let window = Some((since, since + HOUR_MS));
    let before = warehouse.read(window);
    let per_hour = |read: &Value| {
        let files: Vec<(i64, u64)> = serde_json::from_value(read["file_sizes"].clone()).unwrap();
        let mut hours = std::collections::BTreeMap::<i64, usize>::new();
        files.iter().for_each(|(hour, _)| *hours.entry(*hour).or_default() += 1);
        hours
    };
    let hours_before = per_hour(&before);
    // The first and last hours may hold only a few events (the tests share the sequence).
    let several: Vec<usize> = hours_before.values().copied().filter(|&n| n > 1).collect();
    assert!(several.iter().filter(|&&n| n > 2).count() >= 2, "{hours_before:?}");

    let output = hdfs_loader::Output::open(&config, Arc::clone(&warehouse.store)).await.unwrap();
    let done = hdfs_loader::maintain(&output, &config).await.unwrap();
    let compacted = &done.iter().find(|m| m.table == "default.page-view").unwrap().compacted;
    assert_eq!(compacted.hours, several.len(), "{compacted:?}");
    assert_eq!(compacted.files_removed, several.iter().sum::<usize>());
    assert_eq!(compacted.files_added, several.len(), "all small: one file per hour");
    assert!(compacted.snapshot.is_some() && !compacted.conflict);

    // One file per hour, every count as before, in both readers; time travel still reads the
    // snapshots before the compaction.
    let after = warehouse.read(window);
    assert_eq!(
        per_hour(&after).keys().collect::<Vec<_>>(),
        hours_before.keys().collect::<Vec<_>>()
    );
    assert!(per_hour(&after).values().all(|&n| n == 1), "{:?}", per_hour(&after));
    for key in ["rows", "ids", "positions", "filtered_rows", "duckdb_rows", "duckdb_distinct_ids"] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert_eq!(after["duckdb_first_snapshot_rows"], before["duckdb_first_snapshot_rows"]);
    let last = after["snapshots"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["operation"].as_str(), last["rows"].as_u64()), (Some("replace"), Some(400)));

    // Loading goes on from the coverage below the replace snapshot: nothing twice.
    ids.extend(cluster.produce_page_views(100, 18_000).await);
    let more = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(more.errors.is_empty(), "{:?}", more.errors);
    assert_eq!(more.rows, 100);
    let read = warehouse.read(None);
    assert_eq!(read["duckdb_distinct_ids"], 500);
    let rows = positions(&read);
    let unique: HashSet<(i32, i64)> = rows.iter().map(|&(p, o, _)| (p, o)).collect();
    assert_eq!((rows.len(), unique.len()), (500, 500));

    // Once the older snapshots expire, maintenance deletes the files compaction replaced:
    // what is on disk is what the table reads.
    let expire = Config {
        snapshot_max_age: std::time::Duration::ZERO,
        staging_grace_ms: 0,
        ..config.clone()
    };
    hdfs_loader::maintain(&output, &expire).await.unwrap();
    let read = warehouse.read(None);
    assert_eq!(read["duckdb_distinct_ids"], 500);
    let files: Vec<(i64, u64)> = serde_json::from_value(read["file_sizes"].clone()).unwrap();
    assert_eq!(warehouse.data_files().len(), files.len());
    assert_eq!(per_hour(&read).len(), files.len(), "one file per hour again: {files:?}");
    let last = read["snapshots"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["operation"].as_str(), read["snapshots"].as_array().unwrap().len()),
        (Some("replace"), 1)
    );
    // Manifests of DELETED entries only are the current compaction's own: the first one's
    // were not carried on.
    let manifests: Vec<(i64, bool)> = serde_json::from_value(read["manifests"].clone()).unwrap();
    let current = read["current_snapshot"].as_i64().unwrap();
    assert!(manifests.iter().any(|(by, live)| *by == current && !live), "{manifests:?}");
    assert!(manifests.iter().all(|(by, live)| *live || *by == current), "{manifests:?}");
    // The only snapshot left is a compaction's: loading goes on from the coverage it carries.
    ids.extend(cluster.produce_page_views(50, 18_000).await);
    let more = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(more.errors.is_empty(), "{:?}", more.errors);
    assert_eq!(more.rows, 50, "the run started over: a compaction lost the coverage");
    let read = warehouse.read(None);
    assert_eq!(
        (read["rows"].as_u64(), read["duckdb_distinct_ids"].as_u64()),
        (Some(550), Some(550))
    );
    cluster.await_loader_counts("compacting", &ids, 18_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_racing_two_loaders_loses_or_duplicates_no_row() {
    let cluster = Cluster::start(2).await;
    let warehouse = Warehouse::new();
    let config = Config { max_messages_per_commit: 7, ..warehouse.config("racing") };
    let output = hdfs_loader::Output::open(&config, Arc::clone(&warehouse.store)).await.unwrap();
    let (mut produced, mut compactions, mut conflicts) = (0, 0, 0);
    for _ in 0..4 {
        cluster.produce_page_views(120, 1_000).await;
        produced += 120;
        let (a, b, maintained) = tokio::join!(
            cluster.run(&config, &warehouse.store),
            cluster.run(&config, &warehouse.store),
            async {
                let mut done = Vec::new();
                for _ in 0..3 {
                    done.extend(hdfs_loader::maintain(&output, &config).await.unwrap());
                }
                done
            }
        );
        for summary in [a.unwrap(), b.unwrap()] {
            assert!(summary.errors.is_empty(), "{:?}", summary.errors);
        }
        for m in maintained.iter().filter(|m| m.table == "default.page-view") {
            compactions += usize::from(m.compacted.snapshot.is_some());
            conflicts += usize::from(m.compacted.conflict);
        }
    }
    let read = warehouse.read(None);
    let rows = positions(&read);
    let unique: HashSet<(i32, i64, i32)> = rows.iter().copied().collect();
    assert_eq!((rows.len(), unique.len()), (produced, produced), "every row once");
    assert_eq!(read["duckdb_rows"], produced);
    assert!(compactions > 0, "compacted while the loaders committed");
    // What a compaction that lost its commit wrote, it deleted: once every older snapshot
    // expires, the files on disk are the table's.
    let expire =
        Config { snapshot_max_age: std::time::Duration::ZERO, staging_grace_ms: 0, ..config };
    hdfs_loader::maintain(&output, &expire).await.unwrap();
    let read = warehouse.read(None);
    let snapshot_files: usize = serde_json::from_value(read["files"].clone()).unwrap();
    assert_eq!(warehouse.data_files().len(), snapshot_files);
    eprintln!("{compactions} compactions committed, {conflicts} lost to a loader's commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_rolled_at_the_target_size() {
    let cluster = Cluster::start(1).await;
    // Three hours in one range: each hour's rows are more than two target-size files.
    let ids = cluster.produce_page_views(3_000, 3_600).await;
    let warehouse = Warehouse::new();
    let target = 16 << 10;
    let config = Config {
        max_messages_per_commit: 5_000,
        batch_rows: 64,
        target_file_bytes: target,
        ..warehouse.config("rolling")
    };
    let summary = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 3_000);
    let read = warehouse.read(None);
    assert_eq!(read["duckdb_distinct_ids"], 3_000);
    let files: Vec<(i64, u64)> = serde_json::from_value(read["file_sizes"].clone()).unwrap();
    let hours: HashSet<i64> = files.iter().map(|(h, _)| *h).collect();
    assert!(files.len() >= 2 * hours.len(), "{files:?}");
    // A file ends at the first batch that takes it to the target (a batch of 64 rows is far
    // below it).
    assert!(files.iter().all(|(_, bytes)| *bytes < 2 * target), "{files:?}");
    cluster.await_loader_counts("rolling", &ids, 3_600).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_cannot_be_decoded_goes_to_the_dead_letter_table_once_and_the_topic_goes_on()
{
    let cluster = Cluster::start(1).await;
    cluster.produce_page_views(5, 1).await;
    let bad = [0u8, 0, 0, 0x7f, 0x7f, 1, 2, 3]; // schema id 2139062143: not registered
    let sent = cluster.producer.send(TOPIC, None, &bad).await.unwrap();
    let bad_offset = sent.offset.expect("acks 1 gives the offset");
    cluster.produce_page_views(5, 1).await;
    let warehouse = Warehouse::new();
    let config = warehouse.config("dead");
    let summary = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(summary.errors.is_empty(), "the topic goes on: {:?}", summary.errors);
    assert_eq!(summary.rows, 10);
    assert_eq!(summary.partitions[0].bad_records, 1);
    // Run again (and once more with a new message): nothing twice in either table.
    cluster.produce_page_views(3, 1).await;
    let again = cluster.run(&config, &warehouse.store).await.unwrap();
    assert!(again.errors.is_empty(), "{:?}", again.errors);
    assert_eq!(again.rows, 3);

    assert_eq!(warehouse.read(None)["rows"], 13);
    let dead = warehouse.read_topic("_dead_letters", &[]);
    assert_eq!(dead["rows"], 1, "{dead}");
    assert_eq!(dead["topics"][0], TOPIC);
    assert_eq!(dead["offsets"][0], bad_offset);
    assert_eq!(dead["payloads"][0], hex(&bad));
    let reason = dead["reasons"][0].as_str().unwrap();
    assert!(reason.contains("not in the registry"), "{reason}");
}
