//! The loader's memory does not grow with its backlog: `hdfs-loader serve`, started as a user
//! starts it, loads a backlog many times its row-group bound, and its peak resident set
//! (VmHWM) grows by less than the bound the README states per partition loaded at once.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::loader::{Cluster, TOPIC};
use testkit::process::peak_rss;

const BIN: &str = env!("CARGO_BIN_EXE_hdfs-loader");
/// `--row-group-bytes` of the run.
const ROW_GROUP_BYTES: u64 = 192 << 10;
/// The README's bound for one partition loaded at once, besides its row group: the store
/// upload's buffer and two parts in flight (8 MiB each), one Arrow batch and one fetch.
const PER_PARTITION_BYTES: u64 = ROW_GROUP_BYTES + 3 * (8 << 20) + (8 << 20);
/// Events of the backlog: over 20 times `ROW_GROUP_BYTES` of Parquet, which a row group
/// without the byte bound (`row_group_rows` is 1M) would hold whole.
const BACKLOG_EVENTS: usize = 400_000;

/// Every `.parquet` file under `dir`.
fn parquet_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(parquet_files(&path));
        } else if path.extension().is_some_and(|e| e == "parquet") {
            files.push(path);
        }
    }
    files
}

async fn rows_committed(metrics: &str) -> f64 {
    let addr = metrics.to_owned();
    let samples = tokio::task::spawn_blocking(move || {
        testkit::metrics::parse(&testkit::metrics::scrape(&addr))
    })
    .await
    .unwrap();
    testkit::metrics::value(&samples, "tributary_loader_rows_committed_total", &[])
}

/// Waits until the loader `child` (logging to `log`) has committed `rows` rows; a loader that
/// ends first fails the test at once, with what it logged.
async fn until_committed(
    child: &mut std::process::Child,
    log: &std::path::Path,
    metrics: &str,
    rows: usize,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    let logged = || std::fs::read_to_string(log).unwrap_or_default();
    let mut alive = || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the loader ended ({status}) before committing {rows} rows:\n{}", logged());
        }
    };
    while tokio::net::TcpStream::connect(metrics).await.is_err() {
        alive();
        assert!(Instant::now() < deadline, "the loader's /metrics never listened:\n{}", logged());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    while rows_committed(metrics).await < rows as f64 {
        alive();
        assert!(
            Instant::now() < deadline,
            "{rows} rows not committed in {timeout:?}:\n{}",
            logged()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts `hdfs-loader serve` into `store_url`, waits until it committed `rows` rows, stops
/// it; returns its peak resident set.
async fn serve_until(
    cluster: &Cluster,
    store_url: &str,
    rows: usize,
    dir: &std::path::Path,
) -> u64 {
    let metrics = format!("127.0.0.1:{}", testkit::process::free_port());
    let log = dir.join("serve.log");
    let mut child = Command::new(BIN)
        .args(["serve", "--zookeeper", &cluster.zookeeper, "--registry"])
        .arg(cluster.registry_server.url())
        .args(["--store", store_url, "--interval", "500ms", "--metrics", &metrics])
        .args(["--row-group-bytes", &ROW_GROUP_BYTES.to_string(), "--partitions-in-parallel", "1"])
        .args(["--max-messages-per-commit", "100000000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    until_committed(&mut child, &log, &metrics, rows, Duration::from_secs(600)).await;
    let peak = peak_rss(pid);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap());
    peak
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_far_beyond_the_row_group_bound_loads_in_bounded_memory() {
    let cluster = Cluster::start(1).await;
    // A loader's resident set after a small backlog: the runtime, the registry's schemas, one
    // file's writer.
    cluster.produce_page_views(5_000, 1).await;
    let small = tempfile::tempdir().unwrap();
    let small_url = format!("file://{}", small.path().display());
    let baseline = serve_until(&cluster, &small_url, 5_000, small.path()).await;

    // A backlog that is all there before a second loader starts: one run loads it all.
    cluster.produce_page_views(BACKLOG_EVENTS, 1).await;
    let root = tempfile::tempdir().unwrap();
    let store_url = format!("file://{}", root.path().display());
    let begun = Instant::now();
    let peak = serve_until(&cluster, &store_url, 5_000 + BACKLOG_EVENTS, root.path()).await;

    // Its file was cut into row groups at the byte bound.
    let (mut row_groups, mut parquet_bytes) = (0, 0);
    for file in parquet_files(&root.path().join(TOPIC)) {
        parquet_bytes += std::fs::metadata(&file).unwrap().len();
        let reader = parquet::file::serialized_reader::SerializedFileReader::new(
            std::fs::File::open(&file).unwrap(),
        )
        .unwrap();
        row_groups += parquet::file::reader::FileReader::metadata(&reader).num_row_groups();
    }
    eprintln!(
        "loader memory: {} MiB after 5000 events, {} MiB after {} ({} KiB of Parquet in \
         {row_groups} row groups, loaded in {:?})",
        baseline >> 20,
        peak >> 20,
        5_000 + BACKLOG_EVENTS,
        parquet_bytes >> 10,
        begun.elapsed()
    );
    assert!(parquet_bytes > 16 * ROW_GROUP_BYTES, "the backlog is many row groups' worth");
    assert!(row_groups as u64 >= parquet_bytes / ROW_GROUP_BYTES / 2, "{row_groups} row groups");
    assert!(
        peak < baseline + PER_PARTITION_BYTES,
        "peak {peak} grew by more than {PER_PARTITION_BYTES} over {baseline}"
    );
}
