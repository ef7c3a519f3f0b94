//! `visible_after`: with `flush` (the default, the paper's rule) fetches see only flushed
//! data; with `write` they see data once appended, while flushing, `acks` 2 and recovery stay
//! as they were.

use std::io::Write;
use std::time::{Duration, Instant};

use broker::VisibleAfter;
use nix::sys::signal::Signal;
use protocol::{Acks, ErrorCode, FetchRequest, OFFSETS_LATEST};
use testkit::broker::{TestBroker, message_set, messages_of};
use testkit::process::{Process, free_port};

/// Flushes only when asked: data stays unflushed for the whole test.
const NEVER_MS: &str = "3600000";

fn never_flush(c: &mut broker::BrokerConfig) {
    c.flush_ms = NEVER_MS.parse().unwrap();
    c.flush_messages = 1_000_000;
}

fn part(topic: &str, offset: i64) -> FetchRequest {
    FetchRequest { topic: topic.into(), partition: 0, offset, max_bytes: 1 << 20 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_visibility_serves_data_before_the_flush() {
    let broker = TestBroker::start_with(never_flush).await;
    let conn = broker.connect().await;
    conn.create_topic("w", 1, &[("visible_after", "write")]).await.unwrap();
    conn.create_topic("f", 1, &[]).await.unwrap();
    for topic in ["w", "f"] {
        conn.produce(topic, 0, Acks::Written, message_set(&[b"early"])).await.unwrap();
    }
    // Nothing is flushed, yet "w" serves its data and reports it in OFFSETS; "f" does not.
    let w = &broker.broker.logs().topic("w").unwrap().partitions[&0];
    assert_eq!((w.flushed_end(), w.end()), (0, 14));
    assert_eq!(messages_of(&conn.fetch("w", 0, 0, 1000).await.unwrap(), 0)[0].1, b"early");
    assert_eq!(conn.offsets("w", 0, OFFSETS_LATEST, 1).await.unwrap(), [14]);
    assert!(conn.fetch("f", 0, 0, 1000).await.unwrap().is_empty());
    assert_eq!(conn.offsets("f", 0, OFFSETS_LATEST, 1).await.unwrap(), [0]);
    // A long poll on "w" is woken by the append itself.
    let poller = broker.connect().await;
    let started = Instant::now();
    let poll =
        tokio::spawn(async move { poller.multi_fetch_wait(20_000, 1, vec![part("w", 14)]).await });
    testkit::eventually(Duration::from_secs(10), "parked", || async {
        (broker.broker.parked_fetches() == 1).then_some(())
    })
    .await;
    conn.produce("w", 0, Acks::Written, message_set(&[b"woken"])).await.unwrap();
    let parts = poll.await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(messages_of(&parts[0].messages, 14)[0].1, b"woken");
    assert_eq!(w.flushed_end(), 0, "serving it did not flush it");
    // acks 2 still waits for the flush.
    let ack = conn.produce("w", 0, Acks::Flushed, message_set(&[b"durable"])).await.unwrap();
    assert_eq!(ack.unwrap().offset, 28);
    assert_eq!(w.flushed_end(), 44);
}

#[tokio::test]
async fn visible_after_is_kept_across_restarts_and_can_change() {
    let broker = TestBroker::start_with(never_flush).await;
    let conn = broker.connect().await;
    conn.create_topic("w", 1, &[("visible_after", "write")]).await.unwrap();
    let err = conn.create_topic("x", 1, &[("visible_after", "later")]).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidConfig));
    drop(conn);
    let settings = std::fs::read_to_string(broker.data_dir().join(".topics/w.toml")).unwrap();
    assert!(settings.contains("visible_after = \"write\""), "{settings}");
    let broker = broker.restart(never_flush).await;
    let conn = broker.connect().await;
    conn.produce("w", 0, Acks::Written, message_set(&[b"one"])).await.unwrap();
    assert_eq!(messages_of(&conn.fetch("w", 0, 0, 1000).await.unwrap(), 0).len(), 1);
    // Back to flush: what was seen stays visible, new data waits for the flush.
    conn.create_topic("w", 1, &[("visible_after", "flush")]).await.unwrap();
    conn.produce("w", 0, Acks::Written, message_set(&[b"two"])).await.unwrap();
    assert_eq!(messages_of(&conn.fetch("w", 0, 0, 1000).await.unwrap(), 0).len(), 1);
    // And to write again: everything written is visible at once.
    conn.create_topic("w", 1, &[("visible_after", "write")]).await.unwrap();
    assert_eq!(messages_of(&conn.fetch("w", 0, 0, 1000).await.unwrap(), 0).len(), 2);
}

#[tokio::test]
async fn broker_wide_write_visibility_applies_to_auto_created_topics() {
    let broker = TestBroker::start_with(|c| {
        never_flush(c);
        c.visible_after = VisibleAfter::Write;
    })
    .await;
    let conn = broker.connect().await;
    conn.produce("auto", 0, Acks::Written, message_set(&[b"seen"])).await.unwrap();
    assert_eq!(messages_of(&conn.fetch("auto", 0, 0, 1000).await.unwrap(), 0).len(), 1);
    // A topic may still ask for the paper's rule.
    conn.create_topic("careful", 1, &[("visible_after", "flush")]).await.unwrap();
    conn.produce("careful", 0, Acks::Written, message_set(&[b"unseen"])).await.unwrap();
    assert!(conn.fetch("careful", 0, 0, 1000).await.unwrap().is_empty());
}

/// Through the real binary: `--visible-after write` serves unflushed data, and after
/// `kill -9` (the page cache survives a process crash) a restarted broker recovers every
/// message, cutting a torn tail as always. Also checks the long-poll limit flags.
#[test]
fn write_visible_data_is_recovered_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let args = |extra: &[&str]| -> Vec<String> {
        let base = ["--port", &port.to_string(), "--data-dir", data.to_str().unwrap()]
            .map(String::from)
            .to_vec();
        base.into_iter().chain(extra.iter().map(|s| s.to_string())).collect()
    };
    let bin: &std::path::Path = env!("CARGO_BIN_EXE_broker").as_ref();
    let first = args(&[
        "--visible-after",
        "write",
        "--flush-ms",
        NEVER_MS,
        "--flush-messages",
        "1000000",
        "--max-fetch-wait-ms",
        "1500",
        "--max-parked-fetches",
        "1",
    ]);
    let mut process = Process::spawn(bin, &first, port, &dir.path().join("first.log"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let payloads: Vec<String> = (0..100).map(|i| format!("message {i:03}")).collect();
    let end = runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        for p in &payloads {
            conn.produce("t", 0, Acks::Written, message_set(&[p])).await.unwrap();
        }
        let set = conn.fetch("t", 0, 0, 1 << 20).await.unwrap();
        let got: Vec<_> = messages_of(&set, 0).into_iter().map(|(_, m)| m).collect();
        assert_eq!(got.len(), 100, "all visible before any flush");
        let end = set.len() as i64;
        // --max-fetch-wait-ms caps a long poll's wait; --max-parked-fetches 1 answers a
        // second at once.
        let parked = client::Connection::connect(&addr).await.unwrap();
        let started = Instant::now();
        let first = tokio::spawn(async move {
            parked.multi_fetch_wait(60_000, 1, vec![part("t", end)]).await.unwrap();
            started.elapsed()
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let second = Instant::now();
        conn.multi_fetch_wait(60_000, 1, vec![part("t", end)]).await.unwrap();
        assert!(second.elapsed() < Duration::from_millis(1000), "{:?}", second.elapsed());
        let waited = first.await.unwrap();
        assert!(waited >= Duration::from_millis(1400), "capped wait took {waited:?}");
        assert!(waited < Duration::from_secs(10), "capped wait took {waited:?}");
        end
    });
    process.signal(Signal::SIGKILL);
    process.wait_exit(Duration::from_secs(10));
    // A torn write at the tail, as a crash mid-append leaves.
    let segment = data.join("t-0/00000000000000000000.log");
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), end as u64);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap()
        .write_all(&[0, 0, 0, 40, 1])
        .unwrap();
    let log = dir.path().join("second.log");
    let _process = Process::spawn(bin, &args(&[]), port, &log);
    runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        assert_eq!(conn.offsets("t", 0, OFFSETS_LATEST, 1).await.unwrap(), [end]);
        let set = conn.fetch("t", 0, 0, 1 << 20).await.unwrap();
        let got: Vec<_> =
            messages_of(&set, 0).into_iter().map(|(_, m)| String::from_utf8(m).unwrap()).collect();
        assert_eq!(got, payloads);
        let ack = conn.produce("t", 0, Acks::Flushed, message_set(&[b"after"])).await.unwrap();
        assert_eq!(ack.unwrap().offset, end);
    });
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("truncating the partition's tail"), "{log}");
}
