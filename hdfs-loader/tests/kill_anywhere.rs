//! The loader binary killed with SIGKILL at random moments, over and over, under a steady
//! stream of events, against a local directory and against S3 (SeaweedFS): after every kill
//! the files visible under the topic's prefix hold no row twice, and after a last complete
//! run every offset of every partition is there exactly once.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
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
    kill_anywhere(&url, &[], store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_anywhere_on_s3_loads_every_offset_exactly_once() {
    let s3 = tokio::task::spawn_blocking(|| S3Server::start("warehouse")).await.unwrap();
    let store: Arc<dyn ObjectStore> = Arc::new(PrefixStore::new(
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
    ));
    kill_anywhere(&s3.url("tributary"), &s3.env(), store).await;
}

async fn kill_anywhere(url: &str, env: &[(&'static str, String)], store: Arc<dyn ObjectStore>) {
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
    .map(|s| s.to_string())
    .collect();
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
    visible.check(&store).await;
    let committed_by_timed_run = visible.files.len();
    for attempt in 0.. {
        assert!(attempt < KILLS * 4, "only {kills} kills in {attempt} attempts");
        let log = logs.path().join(format!("run-{attempt}.log"));
        let mut child = spawn(&args, env, &log);
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
        visible.check(&store).await;
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
    visible.check(&store).await;
    let expected = log_positions(cluster.broker(), TOPIC, PARTITIONS as i32).await;
    assert_eq!(visible.positions(), expected, "every offset of every partition, exactly once");
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
    async fn check(&mut self, store: &Arc<dyn ObjectStore>) {
        let prefix = object_store::path::Path::from(TOPIC);
        let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await.unwrap();
        let listed: HashSet<String> = metas.iter().map(|m| m.location.to_string()).collect();
        self.files.retain(|path, _| listed.contains(path));
        for meta in metas {
            let path = meta.location.to_string();
            assert!(path.ends_with(".parquet"), "a stray object under the topic: {path}");
            if let std::collections::hash_map::Entry::Vacant(entry) = self.files.entry(path) {
                entry.insert(read_positions(store, &meta.location).await);
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
