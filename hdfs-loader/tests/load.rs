//! The library against a real broker, ZooKeeper and registry: loading, re-running, fencing,
//! schema evolution, undecodable messages and audit counts.

use std::sync::Arc;
use std::time::Duration;

use apache_avro::types::Value;
use events::audit::window_start;
use hdfs_loader::Config;
use object_store::ObjectStore;
use testkit::broker::log_positions;
use testkit::loader::{BASE_TIME_MS, Cluster, TOPIC, unique_positions};

fn config(host: &str) -> Config {
    Config { host_name: Some(host.into()), max_messages_per_commit: 150, ..Config::default() }
}

fn local_store() -> (tempfile::TempDir, Arc<dyn ObjectStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = hdfs_loader::store_from_url(&format!("file://{}", dir.path().display())).unwrap();
    (dir, store)
}

/// An idempotent producer's batch (the native producer's default) is one magic-2 message at
/// one offset: its records load as rows at that offset, told apart by `_index`, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_of_idempotent_batches_load_once_each() {
    let cluster = Cluster::start(2).await;
    let producer = cluster.idempotent_producer();
    let ids = cluster.produce_page_views_with(&producer, 300, 1_000).await;
    producer.close().await;
    let (_dir, store) = local_store();
    let summary = cluster.run(&config("loader-a"), &store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 300);
    let output = hdfs_loader::Output::Hive(Arc::clone(&store));
    let rows = hdfs_loader::readback::read_topic(&output, TOPIC).await.unwrap();
    let events: std::collections::HashSet<_> = rows.events.iter().copied().collect();
    assert_eq!((rows.events.len(), events.len()), (300, 300), "each record once");
    let offsets: std::collections::HashSet<_> = rows.positions.iter().copied().collect();
    assert!(offsets.len() < 100, "records share their batch's offset: {} offsets", offsets.len());
    assert_eq!(offsets, log_positions(cluster.broker(), TOPIC, 2).await);
    assert!(ids.iter().all(|id| rows.event_ids.contains(id.as_slice())));
    let again = cluster.run(&config("loader-a"), &store).await.unwrap();
    assert_eq!(again.rows, 0, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_loads_every_message_once_and_a_rerun_adds_nothing() {
    let cluster = Cluster::start(2).await;
    // 400 events one every 18 s: two hours and a bit, so several hour directories.
    let ids = cluster.produce_page_views(400, 18_000).await;
    let (_dir, store) = local_store();
    let summary = cluster.run(&config("loader-a"), &store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 400);
    assert!(summary.partitions.iter().all(|p| p.commits >= 1), "{summary:?}");
    let rows =
        hdfs_loader::readback::read_topic(&hdfs_loader::Output::Hive(Arc::clone(&store)), TOPIC)
            .await
            .unwrap();
    assert_eq!(rows.positions.len(), 400);
    assert_eq!(rows.event_ids.len(), 400);
    assert!(ids.iter().all(|id| rows.event_ids.contains(id.as_slice())));
    assert_eq!(
        unique_positions(&store, TOPIC).await,
        log_positions(cluster.broker(), TOPIC, 2).await
    );

    let again = cluster.run(&config("loader-a"), &store).await.unwrap();
    assert_eq!(again.rows, 0, "{again:?}");
    assert_eq!(
        hdfs_loader::readback::read_topic(&hdfs_loader::Output::Hive(Arc::clone(&store)), TOPIC)
            .await
            .unwrap()
            .positions
            .len(),
        400
    );

    // Status: everything committed, no lag, the first hours complete.
    let registry = cluster::Registry::new(Arc::clone(&cluster.coordinator));
    let status =
        hdfs_loader::status(&hdfs_loader::Output::Hive(Arc::clone(&store)), Some(&registry), None)
            .await
            .unwrap();
    let topic = status.topics.iter().find(|t| t.topic == TOPIC).expect("topic in status");
    assert_eq!(topic.rows, 400);
    assert!(topic.partitions.iter().all(|p| p.lag == Some(0) && p.log_end == p.committed_offset));
    assert!(topic.hours.len() >= 3, "{:?}", topic.hours);
    assert!(topic.hours[0].complete, "{:?}", topic.hours);
    assert!(!topic.hours.last().unwrap().complete, "the last hour is still open");

    // Audit: per window, the loader's cumulative count equals the events of that window, and
    // the second run did not count again.
    cluster.await_loader_counts("loader-a", &ids, 18_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_counts_survive_a_restart_without_double_counting() {
    let cluster = Cluster::start(1).await;
    let ids = cluster.produce_page_views(100, 1).await;
    let (_dir, store) = local_store();
    for _ in 0..2 {
        // Each run is a new loader process as far as counts go: it derives them from commits.
        cluster.produce_page_views(50, 1).await;
        let summary = cluster.run(&config("loader-r"), &store).await.unwrap();
        assert!(summary.errors.is_empty(), "{:?}", summary.errors);
        assert_eq!(summary.audit_records_published, 1, "{summary:?}");
    }
    // Every event of this test binary falls in the first window (1 ms apart, far fewer than
    // 600 000 of them).
    let window = window_start(BASE_TIME_MS + testkit::events::sequence_of(&ids[0]), 600_000);
    // Published with acks 1: visible to consumers once the broker flushes (within 10 ms).
    let key = ("loader".to_owned(), "loader-r".to_owned(), TOPIC.to_owned(), window);
    testkit::eventually(Duration::from_secs(10), "the loader's count of 200", || async {
        (cluster.audit_counts().await.get(&key) == Some(&200)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_loaders_on_the_same_partitions_never_duplicate_a_row() {
    let cluster = Cluster::start(2).await;
    let (_dir, store) = local_store();
    // The same host name: both claim every partition, so only the conditional commits
    // stand between them.
    let small = Config { max_messages_per_commit: 7, ..config("same-host") };
    let mut fenced = 0;
    for _ in 0..6 {
        cluster.produce_page_views(120, 1_000).await;
        let (a, b) = tokio::join!(cluster.run(&small, &store), cluster.run(&small, &store),);
        for summary in [a.unwrap(), b.unwrap()] {
            assert!(summary.errors.is_empty(), "{:?}", summary.errors);
            fenced += summary.partitions.iter().filter(|p| p.fenced).count();
        }
        unique_positions(&store, TOPIC).await;
    }
    // A last run picks up whatever a fenced loader left.
    cluster.run(&small, &store).await.unwrap();
    assert_eq!(
        unique_positions(&store, TOPIC).await,
        log_positions(cluster.broker(), TOPIC, 2).await
    );
    assert!(fenced > 0, "the two loaders never raced for a commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loaders_with_different_hosts_share_partitions_through_owner_nodes() {
    let cluster = Cluster::start(4).await;
    cluster.produce_page_views(400, 1_000).await;
    let (_dir, store) = local_store();
    let (config_a, config_b) = (config("host-a"), config("host-b"));
    let (a, b) = tokio::join!(cluster.run(&config_a, &store), cluster.run(&config_b, &store),);
    let (a, b) = (a.unwrap(), b.unwrap());
    // An owned partition is skipped, or loaded by the other after its release (from where the
    // first committed): together they load every event once.
    assert_eq!(a.rows + b.rows, 400, "{a:?} {b:?}");
    assert!(a.partitions.iter().chain(&b.partitions).all(|p| !p.fenced));
    assert_eq!(unique_positions(&store, TOPIC).await.len(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_two_schema_versions_land_in_files_of_the_latest_schema() {
    let cluster = Cluster::start(1).await;
    let v1 = r#"{"type":"record","name":"Signup","namespace":"t","fields":[
        {"name":"header","type":{"type":"record","name":"EventHeader","fields":[
            {"name":"time","type":"long"},{"name":"server","type":"string"},
            {"name":"service","type":"string"},{"name":"id","type":{"type":"fixed","name":"EventId","size":16}}]}},
        {"name":"email","type":"string"}]}"#;
    let v2 = r#"{"type":"record","name":"Signup","namespace":"t","fields":[
        {"name":"header","type":{"type":"record","name":"EventHeader","fields":[
            {"name":"time","type":"long"},{"name":"server","type":"string"},
            {"name":"service","type":"string"},{"name":"id","type":{"type":"fixed","name":"EventId","size":16}}]}},
        {"name":"email","type":"string"},
        {"name":"plan","type":{"type":"enum","name":"Plan","symbols":["FREE","PRO"]},"default":"FREE"},
        {"name":"tags","type":{"type":"array","items":"string"},"default":[]}]}"#;
    let id1 = cluster.registry.register("signup-value", v1).await.unwrap();
    let header = |n: i64| {
        Value::Record(vec![
            ("time".into(), Value::Long(BASE_TIME_MS + n)),
            ("server".into(), Value::String("s".into())),
            ("service".into(), Value::String("signup".into())),
            ("id".into(), Value::Fixed(16, testkit::events::event_id(1_000_000 + n).to_vec())),
        ])
    };
    for n in 0..10 {
        let value = Value::Record(vec![
            ("header".into(), header(n)),
            ("email".into(), Value::String(format!("{n}@x"))),
        ]);
        let payload = events::envelope::encode_with(&cluster.registry, id1, value).await.unwrap();
        cluster.producer.send("signup", None, &payload).await.unwrap();
    }
    let id2 = cluster.registry.register("signup-value", v2).await.unwrap();
    assert_ne!(id1, id2);
    for n in 10..20 {
        let value = Value::Record(vec![
            ("header".into(), header(n)),
            ("email".into(), Value::String(format!("{n}@x"))),
            ("plan".into(), Value::Enum(1, "PRO".into())),
            ("tags".into(), Value::Array(vec![Value::String("new".into())])),
        ]);
        let payload = events::envelope::encode_with(&cluster.registry, id2, value).await.unwrap();
        cluster.producer.send("signup", None, &payload).await.unwrap();
    }
    let (dir, store) = local_store();
    let summary = cluster.run(&config("evo"), &store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    let files: Vec<_> = walk(dir.path().join("signup"));
    assert_eq!(files.len(), 1, "one file, one schema: {files:?}");
    let file = std::fs::File::open(&files[0]).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut plans = Vec::new();
    let mut schema_ids = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        use arrow_array::cast::AsArray;
        let plan = batch.column_by_name("plan").unwrap();
        let plan = plan.as_dictionary::<arrow_array::types::Int32Type>();
        let plan = plan.downcast_dict::<arrow_array::StringArray>().unwrap();
        plans.extend(plan.into_iter().map(|p| p.unwrap().to_owned()));
        let ids = batch.column_by_name("_schema_id").unwrap();
        let ids = ids.as_any().downcast_ref::<arrow_array::Int32Array>().unwrap();
        schema_ids.extend(ids.values().iter().copied());
        assert!(batch.column_by_name("tags").is_some());
    }
    assert_eq!(plans[..10], vec!["FREE".to_owned(); 10][..], "v1 rows read with v2's default");
    assert_eq!(plans[10..], vec!["PRO".to_owned(); 10][..]);
    assert_eq!(schema_ids[..10], [id1; 10]);
    assert_eq!(schema_ids[10..], [id2; 10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_message_stops_the_run_at_its_offset_after_committing_what_came_before() {
    let cluster = Cluster::start(1).await;
    cluster.produce_page_views(5, 1).await;
    let bad = [0u8, 0, 0, 0x7f, 0x7f, 1, 2, 3]; // schema id 2139062143: not registered
    let sent = cluster.producer.send(TOPIC, None, &bad).await.unwrap();
    cluster.produce_page_views(5, 1).await;
    let (_dir, store) = local_store();
    let summary = cluster.run(&config("bad"), &store).await.unwrap();
    assert_eq!(summary.rows, 5, "{summary:?}");
    let bad_offset = sent.offset.expect("acks 1 gives the offset");
    assert_eq!(summary.errors.len(), 1, "{:?}", summary.errors);
    assert!(summary.errors[0].contains(&format!("offset {bad_offset}")), "{}", summary.errors[0]);
    assert!(summary.errors[0].contains("not in the registry"), "{}", summary.errors[0]);
    // Run again: still stopped at the same message, nothing skipped, nothing duplicated.
    let again = cluster.run(&config("bad"), &store).await.unwrap();
    assert_eq!((again.rows, again.errors.len()), (0, 1));

    // With a bad-records directory the message is set aside and counted, and the run goes on.
    let bad_dir = tempfile::tempdir().unwrap();
    let aside = Config { bad_records: Some(bad_dir.path().to_owned()), ..config("bad") };
    let summary = cluster.run(&aside, &store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 5);
    assert_eq!(summary.partitions[0].bad_records, 1);
    let kept = bad_dir.path().join(TOPIC).join("0").join(format!("{bad_offset:020}.bin"));
    assert_eq!(std::fs::read(&kept).unwrap(), bad);
    assert_eq!(unique_positions(&store, TOPIC).await.len(), 10);
}

fn walk(dir: std::path::PathBuf) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { dirs.push(path) } else { files.push(path) }
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_in_compressed_wrappers_load_once_each_share_their_wrappers_offset_and_have_an_index()
 {
    let cluster = Cluster::start(1).await;
    let producer = client::Producer::new(
        client::ProducerConfig {
            compression: protocol::Codec::Zstd,
            batch_messages: 25,
            linger_ms: 50,
            ..client::ProducerConfig::default()
        },
        Arc::new(client::StaticBrokers::new([cluster.broker().addr.clone()])),
    )
    .unwrap();
    let schema_id = cluster.page_view_schema_id().await;
    let mut pending = Vec::new();
    for n in 0..200 {
        let id = testkit::events::event_id(2_000_000 + n);
        let value = testkit::events::page_view(BASE_TIME_MS + n, id, n);
        let payload =
            events::envelope::encode_with(&cluster.registry, schema_id, value).await.unwrap();
        pending.push(producer.enqueue(TOPIC, None, &payload).await.unwrap());
    }
    for sent in pending {
        sent.await.unwrap();
    }
    let (_dir, store) = local_store();
    // Commits of 10 messages end only between wrappers of 25.
    let small = Config { max_messages_per_commit: 10, ..config("wrapped") };
    let summary = cluster.run(&small, &store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 200);
    let rows =
        hdfs_loader::readback::read_topic(&hdfs_loader::Output::Hive(Arc::clone(&store)), TOPIC)
            .await
            .unwrap();
    assert_eq!((rows.positions.len(), rows.event_ids.len()), (200, 200));
    let offsets: std::collections::HashSet<i64> = rows.positions.iter().map(|(_, o)| *o).collect();
    assert!(offsets.len() < 200, "rows of one wrapper share its offset");
    // `(_partition, _offset, _index)` names one event: the indexes of a wrapper are 0..n.
    let events: std::collections::HashSet<_> = rows.events.iter().cloned().collect();
    assert_eq!(events.len(), 200);
    let mut per_wrapper: std::collections::BTreeMap<i64, Vec<i32>> = Default::default();
    for (_, offset, index) in &rows.events {
        per_wrapper.entry(*offset).or_default().push(*index);
    }
    for (offset, mut indexes) in per_wrapper {
        indexes.sort();
        assert_eq!(indexes, (0..indexes.len() as i32).collect::<Vec<_>>(), "wrapper at {offset}");
    }
    let again = cluster.run(&small, &store).await.unwrap();
    assert_eq!(again.rows, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_produced_through_the_kafka_listener_keep_their_key_headers_and_timestamp() {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;

    let cluster = Cluster::start(1).await;
    let schema_id = cluster.page_view_schema_id().await;
    // Three events as a Kafka producer sends them: one RecordBatch, keys and headers...
    let mut batch = protocol::record_batch::RecordBatchBuilder::new(0);
    for n in 0..3i64 {
        let value = testkit::events::page_view(BASE_TIME_MS + n, testkit::events::event_id(n), n);
        let payload =
            events::envelope::encode_with(&cluster.registry, schema_id, value).await.unwrap();
        let key = format!("member-{n}");
        batch.push(
            n,
            1_700_000_000_000 + n,
            Some(key.as_bytes()),
            Some(&payload),
            &[(b"source", Some(b"kafka"))],
        );
    }
    let mut set = Vec::new();
    protocol::encode_batch_message(&mut set, &batch.finish());
    // ...and one as Tributary's own producer sends it.
    let value = testkit::events::page_view(BASE_TIME_MS + 3, testkit::events::event_id(3), 3);
    let payload = events::envelope::encode_with(&cluster.registry, schema_id, value).await.unwrap();
    protocol::encode_message(&mut set, protocol::Codec::None, &payload);
    let conn = cluster.broker().connect().await;
    conn.produce(TOPIC, 0, protocol::Acks::Flushed, set.into()).await.unwrap();

    let (dir, store) = local_store();
    let summary = cluster.run(&config("kafka-fields"), &store).await.unwrap();
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.rows, 4);
    let mut rows = Vec::new();
    for path in walk(dir.path().join(TOPIC)) {
        let file = std::fs::File::open(&path).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            let keys = batch.column_by_name("_key").unwrap().as_binary::<i32>().clone();
            let headers = batch.column_by_name("_headers").unwrap().as_map().clone();
            let times = batch.column_by_name("_timestamp").unwrap();
            let times =
                times.as_primitive::<arrow_array::types::TimestampMillisecondType>().clone();
            for i in 0..batch.num_rows() {
                let key =
                    keys.is_valid(i).then(|| String::from_utf8(keys.value(i).to_vec()).unwrap());
                let header = headers.is_valid(i).then(|| {
                    let entries = headers.value(i);
                    let names = entries.column(0).as_string::<i32>().value(0).to_owned();
                    let values = entries.column(1).as_binary::<i32>().value(0).to_vec();
                    (names, String::from_utf8(values).unwrap())
                });
                rows.push((key, header, times.is_valid(i).then(|| times.value(i))));
            }
        }
    }
    rows.sort();
    let kafka = |n: i64| {
        (
            Some(format!("member-{n}")),
            Some(("source".to_owned(), "kafka".to_owned())),
            Some(1_700_000_000_000 + n),
        )
    };
    assert_eq!(rows, vec![(None, None, None), kafka(0), kafka(1), kafka(2)]);
}
