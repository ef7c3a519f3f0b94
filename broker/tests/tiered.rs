//! Tiered storage with the real broker binary against a real S3 server (SeaweedFS): a topic
//! written far past its local retention reads back byte for byte from offset 0 through the
//! native protocol and through kcat (record numbers too), while the partition's directory holds
//! only its newest segments; a broker killed with `kill -9` in the middle of uploads leaves
//! every sealed segment in the manifest exactly once; remote retention moves the log start; an
//! unreachable store keeps every segment on disk until uploads resume; ListOffsets by time and
//! topic deletion reach the store; and, in a cluster of three in a real ZooKeeper (tiering to
//! a shared local directory), a new leader goes on with the uploads of one killed in the
//! middle of them, and a replica whose disk was wiped copies only the local part of the log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use client::{ClientError, Connection};
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, ObjectStoreExt};
use protocol::record_batch::RecordBatchBuilder;
use protocol::{Acks, MessageSetIter};
use testkit::broker::message_set;
use testkit::broker_processes::three_with_topic;
use testkit::process::{Process, free_port};
use testkit::s3::S3Server;
use testkit::zookeeper::ZooKeeperServer;

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
const TOPIC: &str = "views";
/// Small segments and a small local retention: the log is mostly in the store.
const SEGMENT_BYTES: u64 = 64 << 10;
const LOCAL_RETENTION_BYTES: u64 = 128 << 10;

struct Tiered {
    s3: S3Server,
    dir: tempfile::TempDir,
    port: u16,
    kafka_port: u16,
    process: Option<Process>,
    starts: u32,
    /// Flags after the common ones.
    extra: Vec<String>,
}

impl Tiered {
    fn start() -> Tiered {
        Tiered::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Tiered {
        let mut tiered = Tiered {
            s3: S3Server::start("tiers"),
            dir: tempfile::tempdir().unwrap(),
            port: free_port(),
            kafka_port: free_port(),
            process: None,
            starts: 0,
            extra: extra.iter().map(|a| a.to_string()).collect(),
        };
        tiered.spawn();
        tiered
    }

    fn spawn(&mut self) {
        let args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--kafka-port",
            &self.kafka_port.to_string(),
            "--data-dir",
            self.data_dir().to_str().unwrap(),
            "--remote-store",
            &self.s3.url("live"),
            "--remote-storage",
            "true",
            "--segment-bytes",
            &SEGMENT_BYTES.to_string(),
            "--local-retention-bytes",
            &LOCAL_RETENTION_BYTES.to_string(),
            "--retention-check-ms",
            "100",
            "--remote-task-interval-ms",
            "100",
            "--flush-ms",
            "10",
        ]
        .map(String::from)
        .to_vec();
        let args = [args, self.extra.clone()].concat();
        self.starts += 1;
        let log = self.dir.path().join(format!("broker-{}.log", self.starts));
        let process =
            Process::spawn_with_env(BINARY.as_ref(), &args, &self.s3.env(), self.port, &log);
        self.process = Some(process);
    }

    fn kill(&mut self) {
        self.process.take().expect("running").signal(nix::sys::signal::Signal::SIGKILL);
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Base offsets of the partition's segments on disk.
    fn local_bases(&self) -> Vec<u64> {
        segment_bases(&self.data_dir().join(format!("{TOPIC}-0")), ".log")
    }

    /// Base offsets of the segments the manifest names, with how many entries name each.
    async fn manifest(&self) -> BTreeMap<u64, usize> {
        let stems = self.manifest_stems().await;
        stems.into_iter().map(|(base, stems)| (base, stems.len())).collect()
    }

    /// The stems (`{base:020}-{epoch}-{id}`) of the manifest's entries, by base offset.
    async fn manifest_stems(&self) -> BTreeMap<u64, Vec<String>> {
        let store = self.store();
        let prefix = object_store::path::Path::from(format!("live/{TOPIC}/0/manifest"));
        let listed: Vec<_> = store.list(Some(&prefix)).collect().await;
        let mut bases: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for meta in listed {
            let name = meta.unwrap().location.filename().unwrap().to_owned();
            let base: u64 = name.split('-').next().unwrap().parse().unwrap();
            bases.entry(base).or_default().push(name.trim_end_matches(".json").to_owned());
        }
        bases
    }

    /// The S3 server's bucket, as a client of its own.
    fn store(&self) -> object_store::aws::AmazonS3 {
        service::tls::install_crypto_provider();
        AmazonS3Builder::new()
            .with_endpoint(self.s3.endpoint())
            .with_bucket_name(&self.s3.bucket)
            .with_access_key_id("tributary")
            .with_secret_access_key("tributary")
            .with_region("us-east-1")
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .build()
            .unwrap()
    }
}

/// The base offsets in the names of `dir`'s files ending in `suffix`.
fn segment_bases(dir: &Path, suffix: &str) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(suffix)?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    bases.sort();
    bases
}

/// Produces `sets` sets of five 100-byte messages; returns the bytes of all of them.
async fn produce(conn: &Connection, sets: usize, tag: &str) -> Vec<u8> {
    let mut all = Vec::new();
    for i in 0..sets {
        let payloads: Vec<String> =
            (0..5).map(|j| format!("{tag}-{i:05}-{j}-{:>86}", "")).collect();
        let set = message_set(&payloads);
        all.extend_from_slice(&set);
        conn.produce(TOPIC, 0, Acks::Flushed, set).await.unwrap();
    }
    all
}

/// The log from byte 0 to `end`, fetched `max_bytes` at a time and cut at whole messages.
async fn read_bytes(conn: &Connection, end: u64, max_bytes: i32) -> Vec<u8> {
    read_from(conn, 0, end, max_bytes).await
}

/// The log from byte `start` to `end`, 1 MiB at a time.
async fn read_bytes_from(conn: &Connection, start: u64, end: u64) -> Vec<u8> {
    read_from(conn, start, end, 1 << 20).await
}

async fn read_from(conn: &Connection, start: u64, end: u64, max_bytes: i32) -> Vec<u8> {
    let mut log = Vec::new();
    while start + (log.len() as u64) < end {
        let offset = (start + log.len() as u64) as i64;
        let fetched = conn.fetch(TOPIC, 0, offset, max_bytes).await.unwrap();
        let mut messages = MessageSetIter::new(&fetched, 0);
        for message in messages.by_ref() {
            message.expect("a whole, valid message");
        }
        let whole = messages.valid_bytes();
        assert!(whole > 0, "no whole message at {} of {end}", log.len());
        log.extend_from_slice(&fetched[..whole]);
    }
    log
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_log_past_its_local_retention_reads_back_whole_from_the_store() {
    let tiered = Tiered::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    // About 600 KiB: ten segments, of which about two stay on disk.
    let written = runtime.block_on(produce(&conn, 1000, "a"));
    wait_until("the head of the log deleted locally", Duration::from_secs(60), || {
        let bases = tiered.local_bases();
        bases.len() <= 4 && bases[0] > 0
    });
    let local = tiered.local_bases();

    // The native protocol, from byte 0: the very bytes produced, whatever the fetch size.
    let end = written.len() as u64;
    for max_bytes in [1 << 20, 5000] {
        let read = runtime.block_on(read_bytes(&conn, end, max_bytes));
        assert!(read == written, "the log read back with {max_bytes}-byte fetches differs");
    }
    let earliest = runtime.block_on(conn.offsets(TOPIC, 0, -2, 1)).unwrap();
    assert_eq!(earliest, vec![0], "the log starts in the store");
    let messages: Vec<_> = MessageSetIter::new(&written, 0).map(|m| m.unwrap()).collect();
    let (tenth, _) = messages[10];
    let record = runtime.block_on(conn.record_number(TOPIC, 0, tenth)).unwrap();
    assert_eq!(record, 10, "a record number below the local log");
    assert!(tiered.local_bases()[0] >= local[0], "reads bring nothing back to the log");

    // kcat, a Kafka consumer: every record from the beginning, numbered from 0.
    let out = Command::new("kcat")
        .args(["-C", "-b", &format!("127.0.0.1:{}", tiered.kafka_port), "-t", TOPIC])
        .args(["-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o %s\\n"])
        .output()
        .expect("kcat (apt install kcat)");
    assert!(out.status.success(), "kcat: {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> =
        String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect();
    assert_eq!(lines.len(), messages.len());
    for (i, (line, (_, message))) in lines.iter().zip(&messages).enumerate() {
        let expected = format!("{i} {}", String::from_utf8_lossy(message.payload));
        assert_eq!(*line, expected, "record {i}");
    }
}

/// Offsets by time reach into the store: Kafka's ListOffsets (kcat -Q) finds the first record
/// at or after a time exactly, in remote segments and local ones alike, and the native OFFSETS
/// by time lists remote segments' bases after the local ones.
#[test]
fn offsets_by_time_are_found_in_the_store_too() {
    let tiered = Tiered::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    // 800 Kafka batches of 5 records each, record n stamped 1_000_000 + 10·n.
    const BATCHES: i64 = 800;
    for i in 0..BATCHES {
        let mut builder = RecordBatchBuilder::new(0);
        for j in 0..5 {
            let n = 5 * i + j;
            let value = format!("{n:06}-{:>90}", "");
            builder.push(j, 1_000_000 + 10 * n, Some(b"k"), Some(value.as_bytes()), &[]);
        }
        let mut set = BytesMut::new();
        protocol::encode_batch_message(&mut set, &builder.finish());
        runtime.block_on(conn.produce(TOPIC, 0, Acks::Flushed, set.freeze())).unwrap();
    }
    wait_until("the head of the log deleted locally", Duration::from_secs(60), || {
        let bases = tiered.local_bases();
        bases.len() <= 4 && bases[0] > 0
    });
    let local_start = tiered.local_bases()[0];
    let local_record = runtime.block_on(conn.record_number(TOPIC, 0, local_start as i64)).unwrap();
    assert!(local_record > 100, "most records are in the store: local from {local_record}");

    let kafka = format!("127.0.0.1:{}", tiered.kafka_port);
    let query = |time: i64| -> i64 {
        let out = Command::new("kcat")
            .args(["-Q", "-b", &kafka, "-t", &format!("{TOPIC}:0:{time}")])
            .output()
            .expect("kcat (apt install kcat)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let offset = text.split("offset ").nth(1).and_then(|rest| rest.split_whitespace().next());
        offset.and_then(|o| o.parse().ok()).unwrap_or_else(|| panic!("kcat -Q {time}: {text}"))
    };
    let last = 5 * BATCHES - 1;
    for record in [0, 1, 7, 52, 333, local_record - 1, local_record, last] {
        let time = 1_000_000 + 10 * record;
        assert_eq!(query(time), record, "the first record at {time}");
        assert_eq!(query(time - 5), record, "the first record after {}", time - 5);
    }
    assert_eq!(query(0), 0);

    // OFFSETS by time: every segment written by now, the store's after the disk's.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let bases = runtime.block_on(conn.offsets(TOPIC, 0, now.as_millis() as i64 + 1000, 1000));
    let bases = bases.unwrap();
    assert_eq!(bases.last(), Some(&0), "{bases:?}");
    assert!(bases.windows(2).all(|w| w[0] > w[1]), "newest first: {bases:?}");
    assert!(bases.contains(&(local_start as i64)));
}

/// A deleted topic's objects leave the store with it, and a topic created again under its name
/// starts an empty manifest: what it reads back from the store is its own.
#[test]
fn deleting_a_topic_deletes_its_objects_in_the_store() {
    let tiered = Tiered::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    runtime.block_on(produce(&conn, 1000, "old"));
    wait_until("segments uploaded", Duration::from_secs(60), || {
        runtime.block_on(tiered.manifest()).len() >= 5
    });
    let objects = || -> usize {
        let store = tiered.store();
        let prefix = object_store::path::Path::from(format!("live/{TOPIC}"));
        runtime.block_on(store.list(Some(&prefix)).collect::<Vec<_>>()).len()
    };
    assert!(objects() > 10, "data, index and entry of each segment");
    let delete = format!(
        "from confluent_kafka.admin import AdminClient\n\
         admin = AdminClient({{'bootstrap.servers': '127.0.0.1:{}'}})\n\
         admin.delete_topics(['{TOPIC}'])['{TOPIC}'].result(30)",
        tiered.kafka_port
    );
    let out = Command::new("python3").args(["-c", &delete]).output().expect("python3");
    assert!(out.status.success(), "delete_topics: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(objects(), 0, "the store keeps nothing of the deleted topic");

    // The same name again: its log, uploaded and read back from offset 0, is the new one.
    let written = runtime.block_on(produce(&conn, 1000, "new"));
    wait_until("the new log's head deleted locally", Duration::from_secs(60), || {
        let bases = tiered.local_bases();
        bases.len() <= 4 && bases[0] > 0
    });
    let read = runtime.block_on(read_bytes(&conn, written.len() as u64, 1 << 20));
    assert!(read == written, "the topic created again reads back its own log");
}

#[test]
fn a_broker_killed_while_uploading_leaves_every_segment_in_the_manifest_once() {
    let mut tiered = Tiered::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    let mut written = runtime.block_on(produce(&conn, 400, "a"));
    wait_until("uploads under way", Duration::from_secs(60), || {
        runtime.block_on(tiered.manifest()).len() >= 2
    });
    tiered.kill();
    tiered.spawn();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    written.extend(runtime.block_on(produce(&conn, 400, "b")));
    // Every sealed segment below the last uploaded, once: the restarted broker went on from
    // where the manifest ended.
    wait_until("every old segment uploaded", Duration::from_secs(60), || {
        let manifest = runtime.block_on(tiered.manifest());
        let local = tiered.local_bases();
        manifest.keys().last().is_some_and(|last| local.len() <= 4 && *last >= local[0])
    });
    let manifest = runtime.block_on(tiered.manifest());
    assert!(manifest.values().all(|&n| n == 1), "a segment named twice: {manifest:?}");
    assert_eq!(manifest.keys().next(), Some(&0));
    let read = runtime.block_on(read_bytes(&conn, written.len() as u64, 1 << 20));
    assert!(read == written, "the log read back differs from what was written");
}

#[test]
fn remote_retention_deletes_the_oldest_segments_from_the_store() {
    // The whole log, remote and local, is kept to about 300 KiB.
    let tiered = Tiered::start_with(&["--retention-bytes", "300000"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    let written = runtime.block_on(produce(&conn, 1000, "a"));
    // Retention deletes from the store's head until the whole log fits; the log then starts
    // at the store's first segment.
    let end = written.len() as u64;
    let mut earliest = 0;
    wait_until("remote retention done", Duration::from_secs(60), || {
        earliest = runtime.block_on(conn.offsets(TOPIC, 0, -2, 1)).unwrap()[0];
        let first = runtime.block_on(tiered.manifest()).keys().next().copied();
        first.is_some_and(|first| first > 0 && earliest as u64 == first)
            && end - earliest as u64 <= 300_000 + SEGMENT_BYTES
    });
    let below = runtime.block_on(conn.fetch(TOPIC, 0, 0, 1000));
    assert!(below.is_err(), "a fetch before the log start is out of range");
    // What is left reads back as written.
    let tail = runtime.block_on(read_bytes_from(&conn, earliest as u64, end));
    assert!(tail == written[earliest as usize..], "the kept log differs from what was written");
}

#[test]
fn an_unreachable_store_keeps_every_segment_on_disk_until_uploads_resume() {
    let mut tiered = Tiered::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    let mut written = runtime.block_on(produce(&conn, 400, "a"));
    wait_until("the head of the log in the store only", Duration::from_secs(60), || {
        tiered.local_bases()[0] > 0
    });
    tiered.s3.stop();
    // A read of what only the store holds is refused with a retriable error meanwhile.
    match runtime.block_on(conn.fetch(TOPIC, 0, 0, 1 << 20)) {
        Err(client::ClientError::Broker { code: protocol::ErrorCode::RequestTimedOut, .. }) => {}
        other => panic!("a fetch from the store while it is away: {other:?}"),
    }
    // What is written from here on cannot be in the store. (A segment uploaded just before
    // the store stopped may still be deleted from the disk after it: its upload counts.)
    let stopped_at = written.len() as u64;
    written.extend(runtime.block_on(produce(&conn, 600, "b")));
    // Nothing is deleted that is not uploaded: every new segment stays while the store is
    // away (a minute in the long run: `TRIBUTARY_STORE_DOWN_MS=60000`).
    std::thread::sleep(Duration::from_millis(millis_from_env("TRIBUTARY_STORE_DOWN_MS", 1500)));
    let kept = tiered.local_bases();
    let start = kept[0];
    assert!(start <= stopped_at, "the disk keeps what the store does not have: {kept:?}");
    let on_disk = written.len() as u64 - start;
    assert!(on_disk > 2 * LOCAL_RETENTION_BYTES, "{on_disk} bytes on disk, more than retention");
    tiered.s3.restart();
    wait_until("uploads resumed and the disk freed", Duration::from_secs(90), || {
        let bases = tiered.local_bases();
        bases.len() <= 4 && bases[0] > start
    });
    let read = runtime.block_on(read_bytes(&conn, written.len() as u64, 1 << 20));
    assert!(read == written, "the log read back differs from what was written");
}

fn millis_from_env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A replica whose disk was wiped copies only the local part of the log, and learns the
/// idempotent producers of the part in the store from the producer snapshot uploaded with it:
/// once it leads, a producer's retry of a batch that is only in the store is still answered
/// where the batch is, not appended again.
#[test]
fn a_wiped_replica_copies_only_the_local_log() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = tempfile::tempdir().unwrap();
    let (mut brokers, registry) = runtime.block_on(tiered_cluster(store.path(), &[]));
    let mut conn = None;
    // One idempotent batch first, which the rest pushes into the store.
    runtime.block_on(produce_to_leader(&registry, &mut conn, message_set(&["warm-up"])));
    let leading = conn.as_ref().expect("connected to the leader");
    let id = runtime.block_on(leading.init_producer_id()).unwrap();
    let producer = (id.producer_id, id.producer_epoch);
    let first = idempotent_batch(producer, 0, &["once", "only"]);
    let first_at = runtime.block_on(produce_idempotent(leading, first.clone())).unwrap();
    // The plain sets that follow begin where the batch ends.
    let start = first_at as u64 + first.len() as u64;
    let written = runtime.block_on(produce_to_leader_n(&registry, &mut conn, 1000));
    let dirs: Vec<PathBuf> =
        (0..3).map(|id| brokers.data_dir(id).join(format!("{TOPIC}-0"))).collect();
    let local = |id: i32| segment_bases(&dirs[id as usize], ".log");
    let (leader, _) = runtime.block_on(registry.leader(TOPIC, 0)).unwrap().unwrap();
    wait_until("the head of the leader's log in the store only", Duration::from_secs(60), || {
        local(leader).first().is_some_and(|&base| base > 0)
    });
    let follower = (0..3).find(|&id| id != leader).unwrap();
    brokers.kill(follower);
    brokers.wipe(follower);
    brokers.restart(follower);
    // Back in sync, and caught up: its last segment is the leader's.
    wait_until("the wiped replica back in sync", Duration::from_secs(90), || {
        let state = runtime.block_on(registry.partition_state(TOPIC, 0)).ok().flatten();
        let (copied, led) = (local(follower), local(leader));
        state.is_some_and(|(s, _)| s.isr.contains(&follower))
            && !copied.is_empty()
            && copied.last() == led.last()
    });
    let copied = local(follower);
    assert!(copied[0] > 0, "the wiped replica copied the store's part too: {copied:?}");
    let conn = conn.expect("connected to the leader");
    let read = runtime.block_on(read_bytes_from(&conn, start, start + written.len() as u64));
    assert!(read == written, "the log read back differs from what was written");
    drop(conn);

    // The wiped replica leads: the others are killed, one after the other.
    let mut dead = leader;
    brokers.kill(leader);
    let next = loop {
        let (next, _) = wait_for_leader(&runtime, &registry, dead);
        if next == follower {
            break next;
        }
        brokers.kill(next);
        dead = next;
    };
    let led = runtime.block_on(Connection::connect(&brokers.addr(next))).unwrap();
    let again = eventually_produced(&runtime, &led, first);
    assert_eq!(again, first_at, "the retry of a batch in the store was appended again");
    let gap = runtime.block_on(produce_idempotent(&led, idempotent_batch(producer, 5, &["gap"])));
    assert_eq!(gap.err().and_then(|e| e.code()), Some(protocol::ErrorCode::OutOfOrderSequence));
    let next_at = runtime.block_on(produce_idempotent(&led, idempotent_batch(producer, 2, &["n"])));
    assert!(next_at.unwrap() > first_at);
}

/// One magic-2 message: a batch of `producer` (id, epoch) whose first record has sequence
/// number `sequence`, a record per value.
fn idempotent_batch(producer: (i64, i16), sequence: i32, values: &[&str]) -> bytes::Bytes {
    let mut builder = RecordBatchBuilder::new(0).with_producer(producer.0, producer.1, sequence);
    for (i, value) in values.iter().enumerate() {
        builder.push(i as i64, 1_000, None, Some(value.as_bytes()), &[]);
    }
    let mut set = BytesMut::new();
    protocol::encode_batch_message(&mut set, &builder.finish());
    set.freeze()
}

/// Produces an idempotent batch with acks 1: where it is.
async fn produce_idempotent(conn: &Connection, set: bytes::Bytes) -> Result<i64, ClientError> {
    let answer = conn.produce_idempotent(TOPIC, 0, Acks::Written, set).await?;
    Ok(answer.expect("acks 1 is answered").offset)
}

/// [`produce_idempotent`] to a broker that is taking up its leadership: NOT_LEADER is retried.
fn eventually_produced(
    runtime: &tokio::runtime::Runtime,
    conn: &Connection,
    set: bytes::Bytes,
) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match runtime.block_on(produce_idempotent(conn, set.clone())) {
            Ok(offset) => return offset,
            Err(ClientError::Broker { code: protocol::ErrorCode::NotLeader, .. })
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("produce failed: {e}"),
        }
    }
}

/// Three brokers in the shared ZooKeeper, tiering `TOPIC` (one partition, three replicas) to
/// the local directory `store`, with the standalone tests' small segments and local retention
/// and `extra` flags.
async fn tiered_cluster(
    store: &Path,
    extra: &[&str],
) -> (testkit::broker_processes::BrokerProcesses, cluster::Registry) {
    let store_url = format!("file://{}", store.display());
    let (segment_bytes, local_retention) =
        (SEGMENT_BYTES.to_string(), LOCAL_RETENTION_BYTES.to_string());
    let mut args = vec![
        "--remote-store",
        &store_url,
        "--remote-storage",
        "true",
        "--segment-bytes",
        &segment_bytes,
        "--local-retention-bytes",
        &local_retention,
        "--retention-check-ms",
        "100",
        "--remote-task-interval-ms",
        "100",
        "--flush-ms",
        "10",
        "--zookeeper-session-timeout-ms",
        "2000",
    ];
    args.extend_from_slice(extra);
    let connect = ZooKeeperServer::shared().connect_string();
    three_with_topic(BINARY.as_ref(), &connect, &args, TOPIC, 1).await
}

/// Produces `sets` sets of five 100-byte messages to the partition's leader
/// ([`produce_to_leader`]); returns the bytes of all of them.
async fn produce_to_leader_n(
    registry: &cluster::Registry,
    conn: &mut Option<Connection>,
    sets: usize,
) -> Vec<u8> {
    let mut written = Vec::new();
    for i in 0..sets {
        let payloads: Vec<String> = (0..5).map(|j| format!("a-{i:05}-{j}-{:>86}", "")).collect();
        let set = message_set(&payloads);
        written.extend_from_slice(&set);
        produce_to_leader(registry, conn, set).await;
    }
    written
}

/// The base offsets the manifest entries of `TOPIC`-0 name in the local directory store
/// `store`, with how many entries name each.
fn entries_in(store: &Path) -> BTreeMap<u64, usize> {
    let dir = store.join(format!("{TOPIC}/0/manifest"));
    let mut bases = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().into_string().unwrap();
        if let Some(base) = name.split('-').next().and_then(|b| b.parse::<u64>().ok()) {
            *bases.entry(base).or_default() += 1;
        }
    }
    bases
}

/// The leader killed -9 in the middle of slow uploads: the new leader goes on from the
/// manifest, and in the end every sealed segment is in it once and the log reads back whole
/// from offset 0; the old leader rejoins.
#[test]
fn a_new_leader_continues_the_uploads_of_a_killed_one() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = tempfile::tempdir().unwrap();
    // 32 KiB/s: a 64 KiB segment takes two seconds to upload.
    let throttle = ["--remote-upload-bytes-per-s", "32768"];
    let (mut brokers, registry) = runtime.block_on(tiered_cluster(store.path(), &throttle));
    let mut conn = None;
    let written = runtime.block_on(produce_to_leader_n(&registry, &mut conn, 1000));
    let (leader, _) = runtime.block_on(registry.leader(TOPIC, 0)).unwrap().unwrap();
    wait_until("some segments uploaded, not all", Duration::from_secs(60), || {
        !entries_in(store.path()).is_empty()
    });
    let before = entries_in(store.path());
    brokers.kill(leader);
    eprintln!("leader {leader} killed with {} segments in the manifest", before.len());
    let (next, info) = wait_for_leader(&runtime, &registry, leader);
    let conn = runtime.block_on(Connection::connect(&info.addr())).unwrap();
    // Every segment the new leader has sealed, or the store had, is in the manifest once.
    let total = written.len() as u64;
    wait_until("the new leader's uploads done", Duration::from_secs(120), || {
        let entries = entries_in(store.path());
        let local = segment_bases(&brokers.data_dir(next).join(format!("{TOPIC}-0")), ".log");
        entries.len() >= before.len()
            && local.first().is_some_and(|&first| first > 0)
            && local.len() >= 2
            && entries.keys().last() == Some(&local[local.len() - 2])
    });
    let entries = entries_in(store.path());
    assert!(entries.values().all(|&n| n == 1), "a segment named twice: {entries:?}");
    let bases: Vec<u64> = entries.keys().copied().collect();
    assert_eq!(bases[0], 0, "the manifest starts at the log's start: {bases:?}");
    let read = runtime.block_on(read_bytes(&conn, total, 1 << 20));
    assert!(read == written, "the log read back differs from what was written");
    brokers.restart(leader);
    wait_until("the old leader back in sync", Duration::from_secs(90), || {
        let state = runtime.block_on(registry.partition_state(TOPIC, 0)).ok().flatten();
        state.is_some_and(|(s, _)| s.isr.contains(&leader))
    });
}

/// The partition's leader once it is another than `old`.
fn wait_for_leader(
    runtime: &tokio::runtime::Runtime,
    registry: &cluster::Registry,
    old: i32,
) -> (i32, cluster::BrokerInfo) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some((id, info))) = runtime.block_on(registry.leader(TOPIC, 0))
            && id != old
        {
            return (id, info);
        }
        assert!(Instant::now() < deadline, "no new leader within a minute");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Produces `set` with acks all to the partition's leader, connecting to it anew after a
/// refusal: the registry can name a leader a moment before the broker has taken up the role
/// (error 10, which a producer retries). A refused set was not appended.
async fn produce_to_leader(
    registry: &cluster::Registry,
    conn: &mut Option<Connection>,
    set: bytes::Bytes,
) {
    for _ in 0..100 {
        if conn.is_none() {
            let (_, info) = registry.leader(TOPIC, 0).await.unwrap().expect("a leader");
            *conn = Some(Connection::connect(&info.addr()).await.unwrap());
        }
        let to = conn.as_ref().expect("connected");
        match to.produce(TOPIC, 0, Acks::All, set.clone()).await {
            Ok(_) => return,
            Err(client::ClientError::Broker { code: protocol::ErrorCode::NotLeader, .. }) => {
                eprintln!("produce refused: not the leader yet; asking the registry again");
                *conn = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("produce failed: {e}"),
        }
    }
    panic!("no leader took the set in 100 tries");
}

#[test]
fn the_store_is_scrubbed_and_a_damaged_segment_uploaded_again_from_disk() {
    let tiered = Tiered::start_with(&["--scrub-interval-ms", "300"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    let written = runtime.block_on(produce(&conn, 1000, "a"));
    // Settled: every sealed segment uploaded, and local retention done (what is on disk
    // fits it), so that the first segment on disk stays there.
    let end = written.len() as u64;
    wait_until("uploads and local retention done", Duration::from_secs(60), || {
        let (local, stems) = (tiered.local_bases(), runtime.block_on(tiered.manifest_stems()));
        local.len() >= 2
            && stems.keys().last() == Some(&local[local.len() - 2])
            && end - local[0] <= LOCAL_RETENTION_BYTES
    });
    let local = tiered.local_bases();
    let stems = runtime.block_on(tiered.manifest_stems());
    // A segment still on disk (sealed, and in the store), and one that is in the store only.
    let (on_disk, store_only) = (local[0], *stems.keys().next().unwrap());
    assert!(stems.contains_key(&on_disk) && store_only < on_disk);
    let store = tiered.store();
    let damage = |base: u64| {
        let path =
            object_store::path::Path::from(format!("live/{TOPIC}/0/{}.log", stems[&base][0]));
        let mut bytes =
            runtime.block_on(async { store.get(&path).await?.bytes().await }).unwrap().to_vec();
        bytes[100] ^= 0x10;
        runtime.block_on(store.put(&path, bytes.into())).unwrap();
    };
    damage(on_disk);
    damage(store_only);
    // The one on disk is uploaded again: a new entry, the only one for its base, and objects
    // that hold the segment file's bytes.
    wait_until("the damaged segment uploaded again", Duration::from_secs(60), || {
        let now = runtime.block_on(tiered.manifest_stems());
        now.get(&on_disk).is_some_and(|s| s.len() == 1 && s[0] != stems[&on_disk][0])
    });
    let stem = runtime.block_on(tiered.manifest_stems())[&on_disk][0].clone();
    let path = object_store::path::Path::from(format!("live/{TOPIC}/0/{stem}.log"));
    let uploaded = runtime.block_on(async { store.get(&path).await?.bytes().await }).unwrap();
    let file = tiered.data_dir().join(format!("{TOPIC}-0/{on_disk:020}.log"));
    assert!(uploaded == std::fs::read(file).unwrap(), "the new upload is the segment file");
    // The other is reported: no copy is left to upload it from.
    let log = tiered.dir.path().join("broker-1.log");
    wait_until("the store-only damage reported", Duration::from_secs(30), || {
        std::fs::read_to_string(&log).unwrap().contains("no replica has it whole")
    });
    assert_eq!(runtime.block_on(tiered.manifest_stems())[&store_only], stems[&store_only]);
    // What is not damaged reads back as written.
    let tail = runtime.block_on(read_bytes_from(&conn, on_disk, end));
    assert!(tail == written[on_disk as usize..], "the log read back differs");
}

/// A damaged remote segment the leader no longer has on disk is uploaded again from a
/// follower that still has it (one that keeps more of the log on disk, by its own default).
#[test]
fn a_damaged_segment_the_leader_no_longer_has_is_uploaded_again_from_a_replica() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = tempfile::tempdir().unwrap();
    let scrub = ["--scrub-interval-ms", "300"];
    let (mut brokers, registry) = runtime.block_on(tiered_cluster(store.path(), &scrub));
    let (leader, _) = runtime.block_on(registry.leader(TOPIC, 0)).unwrap().unwrap();
    let keeper = (0..3).find(|&id| id != leader).unwrap();
    brokers.restart_with(keeper, &[("--local-retention-bytes", "1073741824")]);
    wait_until("the restarted follower back in sync", Duration::from_secs(60), || {
        let state = runtime.block_on(registry.partition_state(TOPIC, 0)).ok().flatten();
        state.is_some_and(|(s, _)| s.isr.contains(&keeper) && s.leader == leader)
    });
    let mut conn = None;
    let written = runtime.block_on(produce_to_leader_n(&registry, &mut conn, 1000));
    let dir = |id: i32| brokers.data_dir(id).join(format!("{TOPIC}-0"));
    wait_until(
        "the head in the store, gone from the leader's disk",
        Duration::from_secs(60),
        || {
            let entries = entries_in(store.path());
            segment_bases(&dir(leader), ".log").first().is_some_and(|&b| b > 0)
                && entries.contains_key(&0)
                && segment_bases(&dir(keeper), ".log").first() == Some(&0)
        },
    );
    let stem_of = |base: u64| {
        let manifest = store.path().join(format!("{TOPIC}/0/manifest"));
        std::fs::read_dir(manifest)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .filter(|name| name.starts_with(&format!("{base:020}-")))
            .map(|name| name.trim_end_matches(".json").to_owned())
            .collect::<Vec<_>>()
    };
    let damaged = stem_of(0);
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    let object = store.path().join(format!("{TOPIC}/0/{}.log", damaged[0]));
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[100] ^= 0x10;
    std::fs::write(&object, bytes).unwrap();
    wait_until("the damaged segment uploaded again", Duration::from_secs(60), || {
        let now = stem_of(0);
        now.len() == 1 && now != damaged
    });
    let stem = stem_of(0).remove(0);
    let uploaded = std::fs::read(store.path().join(format!("{TOPIC}/0/{stem}.log"))).unwrap();
    let kept = std::fs::read(dir(keeper).join(format!("{:020}.log", 0))).unwrap();
    assert!(uploaded == kept, "the new upload is the follower's segment file");
    assert!(!object.exists(), "the damaged object was deleted");
    assert!(brokers.log(leader).contains("uploaded again from a replica"));
    let conn = conn.expect("connected to the leader");
    let read = runtime.block_on(read_bytes(&conn, written.len() as u64, 1 << 20));
    assert!(read == written, "the log read back differs from what was written");
}

#[test]
fn the_upload_throttle_the_cache_bound_and_local_retention_by_age_apply() {
    // 200,000 B/s of uploads, a cache of at most one chunk, and sealed segments kept on disk
    // for at most a second once the store holds them.
    let tiered = Tiered::start_with(&[
        "--remote-upload-bytes-per-s",
        "200000",
        "--remote-cache-bytes",
        "1",
        "--local-retention-ms",
        "1000",
    ]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&tiered.addr())).unwrap();
    // Uploads begin as segments seal, while the producer is still writing.
    let started = Instant::now();
    let written = runtime.block_on(produce(&conn, 1000, "a"));
    let sealed = tiered.local_bases().len() - 1;
    wait_until("every sealed segment uploaded", Duration::from_secs(60), || {
        runtime.block_on(tiered.manifest()).len() >= sealed
    });
    // Each upload is read back too, but the throttle counts the upload's bytes alone.
    let least = Duration::from_secs_f64((sealed as u64 * SEGMENT_BYTES) as f64 / 200_000.0);
    assert!(started.elapsed() >= least.mul_f64(0.9), "{:?} < {least:?}", started.elapsed());
    // By age, every sealed segment goes once uploaded: only the active one stays.
    wait_until("only the active segment on disk", Duration::from_secs(30), || {
        tiered.local_bases().len() == 1
    });
    let read = runtime.block_on(read_bytes(&conn, written.len() as u64, 1 << 20));
    assert!(read == written, "the log read back differs from what was written");
    // The cache keeps one chunk (a segment here) however much was read through it.
    let cache = tiered.data_dir().join(".remote-cache");
    let cached: u64 =
        std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(cached <= SEGMENT_BYTES, "{cached} bytes cached");
}
