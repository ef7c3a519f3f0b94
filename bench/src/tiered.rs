//! `tributary-bench tiered`: what tiered storage costs, on the release `broker` with a
//! SeaweedFS store (`weed mini`), both started here.
//!
//! 1. `--history-gib` of `--message-bytes` messages (1 MiB sets) is written to topic `local`
//!    (never tiered) and to `history` (not tiered yet).
//! 2. Uploads: a probe producer writes one 200-byte message every millisecond to `probe`
//!    (acks 1) for `--probe-seconds` on the quiet broker; then `history` is tiered
//!    (`remote_storage = true` by CREATE_TOPIC) and the probe runs again while the broker
//!    uploads its sealed segments. Upload throughput is the sealed bytes over the time from
//!    the switch to the last manifest entry; the probe's p50 and p99 are compared.
//! 3. Reads: one consumer reads `local` from byte 0 with 1 MiB fetches, one at a time (its
//!    segments in the page cache or on disk), then `history` from byte 0 twice: cold (all but
//!    its local retention from the store) and again (from the broker's chunk cache).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::{Bytes, BytesMut};
use client::Connection;
use futures::StreamExt;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use protocol::{Acks, Codec, MessageSetIter};
use serde::{Deserialize, Serialize};
use testkit::process::{Process, free_port};
use testkit::s3::S3Server;

use crate::peer::BenchResult;
use crate::replication::{quantile, wait_for};

const SET_BYTES: usize = 1 << 20;
const FETCH_BYTES: i32 = 1 << 20;

#[derive(Debug, Clone, clap::Args)]
pub struct TieredArgs {
    /// History written to each topic.
    #[arg(long, default_value_t = 2.0)]
    pub history_gib: f64,
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(8..=(1 << 19)))]
    pub message_bytes: u64,
    /// How long each probe run lasts at most.
    #[arg(long, default_value_t = 10)]
    pub probe_seconds: u64,
    /// The broker's upload throttle (`remote_upload_bytes_per_s`); 0: none.
    #[arg(long, default_value_t = 0)]
    pub upload_bytes_per_s: u64,
    /// The broker binary; by default the one beside this binary.
    #[arg(long)]
    pub broker_bin: Option<PathBuf>,
    /// Where report.md and results.json go.
    #[arg(long, default_value = "bench-results/tiered")]
    pub out: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct TieredReport {
    pub date: String,
    pub machine: String,
    pub command: String,
    pub history_bytes: u64,
    pub segment_bytes: u64,
    pub local_retention_bytes: u64,
    pub message_bytes: u64,
    /// Bytes of sealed segments uploaded after the switch, and how long it took.
    pub uploaded_bytes: u64,
    pub upload_seconds: f64,
    pub upload_mib_per_s: f64,
    /// The probe's produce latency (ms), quiet and while uploads run.
    pub probe_quiet_p50_ms: f64,
    pub probe_quiet_p99_ms: f64,
    pub probe_uploading_p50_ms: f64,
    pub probe_uploading_p99_ms: f64,
    /// Consumer throughput (MiB/s) reading the whole history.
    pub read_local_mib_per_s: f64,
    pub read_remote_cold_mib_per_s: f64,
    pub read_remote_cached_mib_per_s: f64,
}

pub async fn run(args: TieredArgs, date: String, machine: String) -> BenchResult<()> {
    let broker_bin = match &args.broker_bin {
        Some(path) => path.clone(),
        None => crate::tributary::Tributary::beside_this_binary()?,
    };
    ensure!(
        broker_bin.is_file(),
        "no broker binary at {} (cargo build --release -p broker)",
        broker_bin.display()
    );
    let history = (args.history_gib * (1u64 << 30) as f64) as u64;
    // 32 segments of history (64 MiB ones for 2 GiB), two of them kept on disk.
    let segment_bytes = (history / 32).clamp(1 << 20, 64 << 20);
    let local_retention_bytes = 2 * segment_bytes;
    let s3 = tokio::task::spawn_blocking(|| S3Server::start("bench")).await?;
    let dir = tempfile::tempdir()?;
    let port = free_port();
    let broker_args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--data-dir",
        dir.path().join("data").to_str().context("a UTF-8 path")?,
        "--remote-store",
        &s3.url("live"),
        "--segment-bytes",
        &segment_bytes.to_string(),
        "--local-retention-bytes",
        &local_retention_bytes.to_string(),
        "--retention-check-ms",
        "1000",
        "--remote-task-interval-ms",
        "500",
        "--remote-cache-bytes",
        &(history + (256 << 20)).to_string(),
        "--remote-upload-bytes-per-s",
        &args.upload_bytes_per_s.to_string(),
        "--flush-ms",
        "100",
    ]
    .map(String::from)
    .to_vec();
    let log = dir.path().join("broker.log");
    let _broker = Process::spawn_with_env(&broker_bin, &broker_args, &s3.env(), port, &log);
    let addr = format!("127.0.0.1:{port}");
    let conn = Connection::connect(&addr).await?;
    conn.create_topic("local", 1, &[]).await?;
    conn.create_topic("history", 1, &[("remote_storage", "false")]).await?;
    conn.create_topic("probe", 1, &[]).await?;

    let set = message_set(args.message_bytes as usize);
    let sets = history.div_ceil(set.len() as u64);
    for topic in ["local", "history"] {
        let started = Instant::now();
        for _ in 0..sets {
            conn.produce(topic, 0, Acks::Written, set.clone()).await?;
        }
        let mib = (sets * set.len() as u64) as f64 / (1 << 20) as f64;
        eprintln!("bench: wrote {mib:.0} MiB to {topic} in {:.1?}", started.elapsed());
    }
    let history_bytes = sets * set.len() as u64;

    let quiet = probe(&addr, Duration::from_secs(args.probe_seconds), None).await?;
    eprintln!("bench: probe on a quiet broker: p99 {:.2} ms", quantile(&quiet, 0.99));

    // The sealed segments the switch makes the broker upload.
    let history_dir = dir.path().join("data/history-0");
    let sealed = segment_bases(&history_dir).len().saturating_sub(1);
    let store = store(&s3)?;
    let started = Instant::now();
    conn.create_topic("history", 1, &[("remote_storage", "true")]).await?;
    let done = Arc::new(tokio::sync::Notify::new());
    let probing = tokio::spawn({
        let (addr, done) = (addr.clone(), Arc::clone(&done));
        async move { probe(&addr, Duration::from_secs(args.probe_seconds), Some(done)).await }
    });
    wait_for(Duration::from_secs(3600), "every sealed segment uploaded", || async {
        entries(&store).await >= sealed
    })
    .await?;
    let upload_seconds = started.elapsed().as_secs_f64();
    done.notify_one();
    let uploading = probing.await??;
    let uploaded_bytes = sealed as u64 * segment_bytes.min(history_bytes);
    eprintln!(
        "bench: uploaded {sealed} segments in {upload_seconds:.1} s; probe p99 {:.2} ms",
        quantile(&uploading, 0.99)
    );
    wait_for(Duration::from_secs(120), "the history's head deleted locally", || async {
        segment_bases(&history_dir).first().is_some_and(|&b| b > 0)
    })
    .await?;

    let read_local = read_all(&conn, "local", history_bytes).await?;
    let read_cold = read_all(&conn, "history", history_bytes).await?;
    let read_cached = read_all(&conn, "history", history_bytes).await?;
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let report = TieredReport {
        date,
        machine,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        history_bytes,
        segment_bytes,
        local_retention_bytes,
        message_bytes: args.message_bytes,
        uploaded_bytes,
        upload_seconds,
        upload_mib_per_s: mib(uploaded_bytes) / upload_seconds,
        probe_quiet_p50_ms: quantile(&quiet, 0.5),
        probe_quiet_p99_ms: quantile(&quiet, 0.99),
        probe_uploading_p50_ms: quantile(&uploading, 0.5),
        probe_uploading_p99_ms: quantile(&uploading, 0.99),
        read_local_mib_per_s: mib(history_bytes) / read_local,
        read_remote_cold_mib_per_s: mib(history_bytes) / read_cold,
        read_remote_cached_mib_per_s: mib(history_bytes) / read_cached,
    };
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&report)?)?;
    std::fs::write(args.out.join("report.md"), report.markdown())?;
    println!("{}", report.markdown());
    Ok(())
}

/// A set of 1 MiB of `message_bytes` messages.
fn message_set(message_bytes: usize) -> Bytes {
    let payload = vec![b'x'; message_bytes];
    let mut set = Vec::with_capacity(SET_BYTES + 64);
    while set.len() + message_bytes + 10 <= SET_BYTES {
        protocol::encode_message(&mut set, Codec::None, &payload);
    }
    Bytes::from(set)
}

/// Produce latencies (ms) of one 200-byte message a millisecond, acks 1, for `length` or
/// until `done`.
async fn probe(
    addr: &str,
    length: Duration,
    done: Option<Arc<tokio::sync::Notify>>,
) -> BenchResult<Vec<f64>> {
    let conn = Connection::connect(addr).await?;
    let mut set = BytesMut::new();
    let mut encoded = Vec::new();
    protocol::encode_message(&mut encoded, Codec::None, &[b'p'; 200]);
    set.extend_from_slice(&encoded);
    let set = set.freeze();
    let mut latencies = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let ended = tokio::time::sleep(length);
    tokio::pin!(ended);
    let finished = async {
        match &done {
            Some(done) => done.notified().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(finished);
    loop {
        tokio::select! {
            _ = &mut ended => break,
            _ = &mut finished => break,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        conn.produce("probe", 0, Acks::Written, set.clone()).await?;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(latencies)
}

/// Reads `topic` from byte 0 to `end`, a fetch at a time; the seconds it took.
async fn read_all(conn: &Connection, topic: &str, end: u64) -> BenchResult<f64> {
    let started = Instant::now();
    let mut offset = 0u64;
    while offset < end {
        let fetched = conn.fetch(topic, 0, offset as i64, FETCH_BYTES).await?;
        let mut messages = MessageSetIter::new(&fetched, 0);
        for message in messages.by_ref() {
            message.context("a valid message")?;
        }
        ensure!(messages.valid_bytes() > 0, "no whole message at {offset} of {topic}");
        offset += messages.valid_bytes() as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("bench: read {topic} in {seconds:.1} s");
    Ok(seconds)
}

/// The base offsets of the segment files in `dir`, ascending.
fn segment_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    bases.sort();
    bases
}

fn store(s3: &S3Server) -> BenchResult<Arc<dyn ObjectStore>> {
    ::service::tls::install_crypto_provider();
    let store = AmazonS3Builder::new()
        .with_endpoint(s3.endpoint())
        .with_bucket_name(&s3.bucket)
        .with_access_key_id("tributary")
        .with_secret_access_key("tributary")
        .with_region("us-east-1")
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .build()?;
    Ok(Arc::new(store))
}

/// Manifest entries of `history`'s partition 0.
async fn entries(store: &Arc<dyn ObjectStore>) -> usize {
    let prefix = object_store::path::Path::from("live/history/0/manifest");
    store.list(Some(&prefix)).filter(|m| std::future::ready(m.is_ok())).count().await
}

impl TieredReport {
    fn markdown(&self) -> String {
        let gib = self.history_bytes as f64 / (1u64 << 30) as f64;
        format!(
            "# Tiered storage — {date}\n\n{machine}\n\n`{command}`\n\n\
             {gib:.2} GiB of {mb}-byte messages; {seg} MiB segments, {kept} MiB kept on disk, a \
             SeaweedFS store on the same machine.\n\n\
             | consumer reading the whole history, 1 MiB fetches | MiB/s | × local |\n|---|---:|---:|\n\
             | local disk | {local:.0} | 1.00 |\n\
             | store, cold | {cold:.0} | {cold_ratio:.2} |\n\
             | store, cached chunks | {cached:.0} | {cached_ratio:.2} |\n\n\
             | uploads | |\n|---|---:|\n\
             | uploaded | {up_mib:.0} MiB in {up_s:.1} s: {up_rate:.0} MiB/s |\n\
             | probe produce p50 / p99, quiet | {qp50:.2} / {qp99:.2} ms |\n\
             | probe produce p50 / p99, while uploading | {up50:.2} / {up99:.2} ms |\n",
            date = self.date,
            machine = self.machine,
            command = self.command,
            mb = self.message_bytes,
            seg = self.segment_bytes >> 20,
            kept = self.local_retention_bytes >> 20,
            local = self.read_local_mib_per_s,
            cold = self.read_remote_cold_mib_per_s,
            cached = self.read_remote_cached_mib_per_s,
            cold_ratio = self.read_remote_cold_mib_per_s / self.read_local_mib_per_s,
            cached_ratio = self.read_remote_cached_mib_per_s / self.read_local_mib_per_s,
            up_mib = self.uploaded_bytes as f64 / (1 << 20) as f64,
            up_s = self.upload_seconds,
            up_rate = self.upload_mib_per_s,
            qp50 = self.probe_quiet_p50_ms,
            qp99 = self.probe_quiet_p99_ms,
            up50 = self.probe_uploading_p50_ms,
            up99 = self.probe_uploading_p99_ms,
        )
    }
}
