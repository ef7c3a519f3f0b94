//! The broker binary's compaction flags, each seen to take effect: `--cleanup-policy compact`
//! makes an auto-created topic compacted (a keyless message refused with error 18, superseded
//! records removed), `--delete-retention-ms` lets an old tombstone go, `--cleaner-interval-ms`
//! runs the passes, and `--cleaner-bytes-per-s` holds a pass's reading to its rate.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use client::{ClientError, Connection};
use protocol::record_batch::{RecordBatchBuilder, RecordBatchRef};
use protocol::{Acks, Codec, ErrorCode, MAGIC_BATCH, MessageSetIter};
use testkit::process::{Process, free_port};

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
const TOPIC: &str = "table";
/// What the cleaner may read per second in this test.
const CLEANER_BYTES_PER_S: u64 = 200_000;
const SEGMENT_BYTES: u64 = 65_536;

/// One batch of one record: `key`, `value` (`None`: a tombstone), stamped `time`.
fn record(key: &str, value: Option<&str>, time: i64) -> Bytes {
    let mut batch = RecordBatchBuilder::new(0);
    batch.push(0, time, Some(key.as_bytes()), value.map(str::as_bytes), &[]);
    let mut set = BytesMut::new();
    protocol::encode_batch_message(&mut set, &batch.finish());
    set.freeze()
}

/// Every record of the topic read from byte 0: key → values in log order (`None` a tombstone).
async fn read_all(conn: &Connection) -> BTreeMap<String, Vec<Option<String>>> {
    let end = conn.offsets(TOPIC, 0, protocol::OFFSETS_LATEST, 1).await.unwrap()[0];
    let mut found: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    let mut offset = 0;
    while offset < end {
        let fetched = conn.fetch(TOPIC, 0, offset, 1 << 20).await.unwrap();
        let mut messages = MessageSetIter::new(&fetched, offset);
        for message in messages.by_ref() {
            let (_, message) = message.expect("a valid message");
            if message.magic != MAGIC_BATCH {
                continue; // a gap
            }
            let batch = RecordBatchRef::parse(message.payload).unwrap();
            for record in batch.records(1 << 20).unwrap().iter() {
                let record = record.unwrap();
                let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
                found.entry(text(record.key.unwrap())).or_default().push(record.value.map(text));
            }
        }
        assert!(messages.next_offset() > offset, "no whole message at {offset}");
        offset = messages.next_offset();
    }
    found
}

#[test]
fn the_compaction_flags_of_the_broker_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--segment-bytes",
        &SEGMENT_BYTES.to_string(),
        "--flush-ms",
        "10",
        "--cleanup-policy",
        "compact",
        "--delete-retention-ms",
        "1000",
        "--cleaner-interval-ms",
        "200",
        "--cleaner-bytes-per-s",
        &CLEANER_BYTES_PER_S.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let log = dir.path().join("broker.log");
    let _broker = Process::spawn(BINARY.as_ref(), &args, port, &log);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let conn = runtime.block_on(Connection::connect(&format!("127.0.0.1:{port}"))).unwrap();
    let produce = |set: Bytes| runtime.block_on(conn.produce(TOPIC, 0, Acks::Flushed, set));

    // The broker's default policy: an auto-created topic takes keyed records only.
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    produce(record("k0", Some("first"), now)).unwrap();
    let mut plain = BytesMut::new();
    protocol::encode_message(&mut plain, Codec::None, b"no key");
    match produce(plain.freeze()) {
        Err(ClientError::Broker { code: ErrorCode::InvalidRecord, .. }) => {}
        other => panic!("a keyless message to a compacted topic: {other:?}"),
    }
    // Ten keys written twenty times over, in 2 KB records; key 9 deleted by a tombstone
    // stamped a minute ago (past --delete-retention-ms); then another key, to seal the rest.
    let value = |k: usize, round: usize| format!("{k}:{round}:{}", "v".repeat(2000));
    for round in 0..20 {
        for k in 0..10 {
            produce(record(&format!("k{k}"), Some(&value(k, round)), now)).unwrap();
        }
    }
    produce(record("k9", None, now - 60_000)).unwrap();
    for n in 0..40 {
        produce(record("filler", Some(&value(99, n)), now)).unwrap();
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = runtime.block_on(read_all(&conn));
        let once = (0..9).all(|k| found.get(&format!("k{k}")).map(Vec::len) == Some(1));
        if once && !found.contains_key("k9") {
            for k in 0..9 {
                assert_eq!(found[&format!("k{k}")], [Some(value(k, 19))], "key {k}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "not compacted within a minute: {:?}", found.keys());
        std::thread::sleep(Duration::from_millis(200));
    }

    // The throttle: every pass that compacted read its bytes (whole sealed segments) no
    // faster than the flag allows. A segment is sealed before the append that would take it
    // past --segment-bytes, so one holds more than that less the largest set appended (a
    // pass that ran while only the first was sealed read just that one).
    let largest = record("filler", Some(&value(99, 39)), now).len() as u64;
    let text = std::fs::read_to_string(&log).unwrap();
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split(&format!(" {name}=")).nth(1)?.split_whitespace().next()?.parse().ok()
    };
    let passes: Vec<(u64, u64)> = text
        .lines()
        .filter(|l| l.contains("compacted"))
        .filter_map(|l| Some((field(l, "bytes_read")?, field(l, "ms")?)))
        .collect();
    assert!(!passes.is_empty(), "no pass logged with its bytes and time");
    for (bytes, ms) in passes {
        assert!(bytes + largest > SEGMENT_BYTES, "{bytes} bytes read: a segment at least");
        assert!(ms * CLEANER_BYTES_PER_S >= bytes * 1000, "{bytes} bytes in {ms} ms");
    }
}
