//! The loader binary killed with SIGKILL at random moments, over and over, under a steady
//! stream of events, against a local directory and against S3 (SeaweedFS), in the Hive layout
//! and as an Iceberg table: after every kill the committed files (those under the topic's
//! prefix; those of the table's current snapshot) hold no row twice, and after a last complete
//! run every offset of every partition is there exactly once. For the table, `maintain` then
//! leaves no file under its `data/` that the snapshot does not name.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use hdfs_loader::{Config, Format, Output};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::prefix::PrefixStore;
use rand::RngExt;
use testkit::broker::log_positions;
use testkit::loader::{Cluster, TOPIC};
use testkit::s3::S3Server;
use tokio_util::sync::CancellationToken;

const KILLS: usize = 50;
const PARTITIONS: u32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_anywhere_on_a_local_directory_loads_every_offset_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let store = hdfs_loader::store_from_url(&url).unwrap();
    kill_anywhere(&url, &[], Output::Hive(store), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_anywhere_on_s3_loads_every_offset_exactly_once() {
    let s3 = tokio::task::spawn_blocking(|| S3Server::start("warehouse")).await.unwrap();
    kill_anywhere(&s3.url("tributary"), &s3.env(), Output::Hive(s3_store(&s3)), &[]).await;
}

/// The store `s3://warehouse/tributary` of `s3`, as the loader processes see it.
fn s3_store(s3: &S3Server) -> Arc<dyn ObjectStore> {
    service::tls::install_crypto_provider();
    Arc::new(PrefixStore::new(
        AmazonS3Builder::new()
            .with_endpoint(s3.endpoint())
            .with_bucket_name("warehouse")
            .with_region("us-east-1")
            .with_access_key_id("tributary")
            .with_secret_access_key("tributary")
            .with_allow_http(true)
            .build()
            .unwrap(),
        "tributary",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_anywhere_on_s3_commits_every_offset_once_to_an_iceberg_table() {
    let s3 = tokio::task::spawn_blocking(|| S3Server::start("warehouse")).await.unwrap();
    let url = s3.url("tributary");
    let catalog_dir = tempfile::tempdir().unwrap();
    let catalog = format!("sqlite://{}/catalog.db", catalog_dir.path().display());
    let config = Config {
        store: Some(url.clone()),
        format: Format::Iceberg,
        catalog: Some(catalog.clone()),
        ..Config::default()
    };
    let output = Output::open(&config, s3_store(&s3)).await.unwrap();
    let iceberg = ["--format", "iceberg", "--catalog", &catalog];
    kill_anywhere(&url, &s3.env(), output, &iceberg).await;
}

/// Kills the loader `KILLS` times with `extra` flags; for an Iceberg `output` the killed
/// processes are `serve`s (rounds every 200 ms), and the test ends with `maintain`.
async fn kill_anywhere(url: &str, env: &[(&'static str, String)], output: Output, extra: &[&str]) {
    let iceberg = matches!(output, Output::Iceberg(_));
    let cluster = Arc::new(Cluster::start(PARTITIONS).await);
    let logs = tempfile::tempdir().unwrap();
    let args: Vec<String> = [
        "run",
        "--zookeeper",
        &cluster.zookeeper,
        "--registry",
        cluster.registry_server.url(),
        "--store",
        url,
        "--host-name",
        "killed",
        "--max-messages-per-commit",
        "40",
        "--batch-rows",
        "16",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    // A killed `serve` dies in the middle of a round, like a killed `run`.
    let mut killed_args = args.clone();
    if iceberg {
        killed_args[0] = "serve".into();
        killed_args.extend(["--interval".into(), "200ms".into()]);
    }
    let stream = CancellationToken::new();
    let producer = tokio::spawn({
        let (cluster, stream) = (Arc::clone(&cluster), stream.clone());
        async move {
            while !stream.is_cancelled() {
                cluster.produce_page_views(10, 1_000).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    // Kills are spread over the time a whole run takes here (a debug build on a loaded
    // machine is slow to start), so they land in every phase of it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let timed = Instant::now();
    let status = spawn(&args, env, &logs.path().join("timed.log")).wait().unwrap();
    assert!(status.success());
    let run_ms = (timed.elapsed().as_millis() as u64).max(100);
    let mut visible = VisibleRows::default();
    let (mut kills, mut completed) = (0, 0);
    let started = Instant::now();
    visible.check(&output).await;
    let committed_by_timed_run = visible.files.len();
    for attempt in 0.. {
        assert!(attempt < KILLS * 4, "only {kills} kills in {attempt} attempts");
        let log = logs.path().join(format!("run-{attempt}.log"));
        let mut child = spawn(&killed_args, env, &log);
        let delay_ms = rand::rng().random_range(5..run_ms * 3 / 2);
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        match child.try_wait().unwrap() {
            Some(status) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(status.success(), "run {attempt} failed: {status}\n{text}");
                completed += 1;
            }
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                kills += 1;
            }
        }
        visible.check(&output).await;
        if kills >= KILLS {
            break;
        }
    }
    stream.cancel();
    producer.await.unwrap();
    // The kills landed while runs were committing, not only before they started.
    let committed_while_killed = visible.files.len() - committed_by_timed_run;
    assert!(
        committed_while_killed >= 10,
        "only {committed_while_killed} files committed between kills"
    );
    // Whatever the kills left half done, the next complete run finishes or rolls back.
    let log = logs.path().join("final.log");
    let status = spawn(&args, env, &log).wait().unwrap();
    assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
    visible.check(&output).await;
    let expected = log_positions(cluster.broker(), TOPIC, PARTITIONS as i32).await;
    assert_eq!(visible.positions(), expected, "every offset of every partition, exactly once");
    if iceberg {
        // The files of killed rounds are in no snapshot; maintenance compacts the closed hours,
        // expires every snapshot but the current one and (no grace) deletes what no snapshot
        // reads: those files, and the ones compaction replaced.
        let mut maintain: Vec<String> =
            ["maintain", "--store", url, "--staging-grace-ms", "0", "--snapshot-max-age", "1ms"]
                .iter()
                .chain(extra)
                .map(|s| s.to_string())
                .collect();
        maintain.push("--json".into());
        let log = logs.path().join("maintain.log");
        let status = spawn(&maintain, env, &log).wait().unwrap();
        assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
        let committed: HashSet<String> = hdfs_loader::readback::files(&output, TOPIC)
            .await
            .unwrap()
            .iter()
            .map(|p| p.to_string())
            .collect();
        let data = object_store::path::Path::from(format!("default/{TOPIC}/data"));
        let stored: Vec<_> = output.store().list(Some(&data)).try_collect().await.unwrap();
        let stored: HashSet<String> = stored.iter().map(|m| m.location.to_string()).collect();
        assert_eq!(stored, committed, "no orphan data file after maintenance");
        visible.check(&output).await;
        assert_eq!(visible.positions(), expected, "maintenance removed nothing committed");
    }
    eprintln!(
        "a run takes {run_ms} ms; {kills} kills, {completed} completed runs, {committed_while_killed} files committed between kills, {} rows, {} files in {:?}",
        expected.len(),
        visible.files.len(),
        started.elapsed()
    );
}

fn spawn(
    args: &[String],
    env: &[(&'static str, String)],
    log: &std::path::Path,
) -> std::process::Child {
    let log = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_hdfs-loader"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The rows of the files visible under the topic's prefix. A file's name is its range and it
/// never changes, so each is read once.
#[derive(Default)]
struct VisibleRows {
    files: HashMap<String, Vec<(i32, i64)>>,
}

impl VisibleRows {
    async fn check(&mut self, output: &Output) {
        let store = output.store();
        let paths: Vec<object_store::path::Path> = match output {
            Output::Hive(store) => {
                let prefix = object_store::path::Path::from(TOPIC);
                let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await.unwrap();
                metas.into_iter().map(|m| m.location).collect()
            }
            Output::Iceberg(_) => hdfs_loader::readback::files(output, TOPIC).await.unwrap(),
        };
        let listed: HashSet<String> = paths.iter().map(|p| p.to_string()).collect();
        self.files.retain(|path, _| listed.contains(path));
        for location in paths {
            let path = location.to_string();
            assert!(path.ends_with(".parquet"), "a stray object under the topic: {path}");
            if let std::collections::hash_map::Entry::Vacant(entry) = self.files.entry(path) {
                entry.insert(read_positions(store, &location).await);
            }
        }
        let mut seen = HashSet::new();
        for (path, positions) in &self.files {
            for position in positions {
                assert!(seen.insert(*position), "row {position:?} of {path} is visible twice");
            }
        }
    }

    fn positions(&self) -> HashSet<(i32, i64)> {
        self.files.values().flatten().cloned().collect()
    }
}

async fn read_positions(
    store: &Arc<dyn ObjectStore>,
    path: &object_store::path::Path,
) -> Vec<(i32, i64)> {
    use arrow_array::cast::AsArray;
    use object_store::ObjectStoreExt;
    let bytes = store.get(path).await.unwrap().bytes().await.unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .unwrap_or_else(|e| panic!("{path} is not a whole Parquet file: {e}"))
        .build()
        .unwrap();
    let mut positions = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let partitions = batch
            .column_by_name("_partition")
            .unwrap()
            .as_primitive::<arrow_array::types::Int32Type>()
            .clone();
        let offsets = batch
            .column_by_name("_offset")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>()
            .clone();
        for i in 0..batch.num_rows() {
            positions.push((partitions.value(i), offsets.value(i)));
        }
    }
    positions
}
