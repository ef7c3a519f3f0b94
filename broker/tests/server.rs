//! The server as a whole: concurrency, limits, topics, shutdown, and the real binary's flags.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use protocol::{Acks, ErrorCode};
use testkit::broker::{TestBroker, message_set, messages_of};
use testkit::process::{Process, free_port};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_and_partitions_at_once() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 100).await;
    broker.connect().await.create_topic("wide", 16, &[]).await.unwrap();
    let mut tasks = Vec::new();
    for client in 0..32 {
        let addr = broker.addr.clone();
        tasks.push(tokio::spawn(async move {
            let conn = client::Connection::connect(&addr).await.unwrap();
            // Pipelined: every request is queued before any answer is awaited.
            let sends: Vec<_> = (0..50)
                .map(|i| {
                    let set = message_set(&[format!("{client}:{i}")]);
                    conn.produce("wide", (client + i) % 16, Acks::Written, set)
                })
                .collect();
            for ack in futures::future::join_all(sends).await {
                ack.unwrap().unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let conn = broker.connect().await;
    let mut messages =
        testkit::eventually(Duration::from_secs(5), "every message visible", || async {
            let mut messages = Vec::new();
            for p in 0..16 {
                let set = conn.fetch("wide", p, 0, 1 << 20).await.unwrap();
                messages.extend(
                    messages_of(&set, 0).into_iter().map(|(_, m)| String::from_utf8(m).unwrap()),
                );
            }
            (messages.len() == 32 * 50).then_some(messages)
        })
        .await;
    messages.sort();
    messages.dedup();
    assert_eq!(messages.len(), 32 * 50, "each message exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_does_not_hold_up_others() {
    let broker = TestBroker::start_with(|c| c.flush_messages = 1).await;
    // Half a frame, then silence.
    let mut slow = TcpStream::connect(&broker.addr).await.unwrap();
    slow.write_all(&[0, 0, 0, 100, 0, 0, 0]).await.unwrap();
    // A producer waiting for a flush on one partition does not hold up another partition.
    let waiting = broker.connect().await;
    waiting
        .create_topic("slow", 1, &[("flush_ms", "3600000"), ("flush_messages", "1000000")])
        .await
        .unwrap();
    waiting.produce("slow", 0, Acks::Written, message_set(&[b"unflushed"])).await.unwrap();
    let started = Instant::now();
    let conn = broker.connect().await;
    for i in 0..20 {
        conn.produce("fast", 0, Acks::Flushed, message_set(&[format!("{i}")])).await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(slow);
}

#[tokio::test]
async fn connections_over_the_limit_are_closed() {
    let broker = TestBroker::start_with(|c| c.max_connections = 2).await;
    let a = broker.connect().await;
    let b = broker.connect().await;
    a.metadata(&[]).await.unwrap();
    b.metadata(&[]).await.unwrap();
    let c = broker.connect().await;
    assert!(c.metadata(&[]).await.is_err(), "the third connection is closed");
    drop(a);
    let d = testkit::eventually(Duration::from_secs(5), "a free slot", || async {
        let d = broker.connect().await;
        d.metadata(&[]).await.is_ok().then_some(d)
    })
    .await;
    d.metadata(&[]).await.unwrap();
}

#[tokio::test]
async fn partition_minus_one_lets_the_broker_pick() {
    let broker = TestBroker::start_with(|c| c.num_partitions = 4).await;
    let conn = broker.connect().await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        let ack =
            conn.produce("lb", -1, Acks::Written, message_set(&[b"x"])).await.unwrap().unwrap();
        seen.insert(ack.partition);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3]);
    let err = conn.produce("lb", -2, Acks::Written, message_set(&[b"x"])).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::WrongPartition));
}

#[tokio::test]
async fn topics_keep_their_settings_across_restarts() {
    let broker = TestBroker::start().await;
    let conn = broker.connect().await;
    conn.create_topic("kept", 3, &[("segment_bytes", "40"), ("flush_messages", "1")])
        .await
        .unwrap();
    conn.create_topic("auto", 0, &[]).await.unwrap();
    conn.create_topic("kept", 5, &[("segment_bytes", "40"), ("flush_messages", "1")])
        .await
        .unwrap();
    drop(conn);
    let broker = broker.restart(|_| {}).await;
    let conn = broker.connect().await;
    let meta = conn.metadata(&[]).await.unwrap();
    let counts = |m: &protocol::MetadataResponse| -> Vec<(String, usize)> {
        m.topics.iter().map(|t| (t.name.clone(), t.partitions.len())).collect()
    };
    assert_eq!(counts(&meta), [("auto".to_owned(), 1), ("kept".to_owned(), 5)]);
    let asked = conn.metadata(&["kept", "gone"]).await.unwrap();
    assert_eq!(counts(&asked), [("kept".to_owned(), 5), ("gone".to_owned(), 0)]);
    assert_eq!(asked.topics[1].error, ErrorCode::UnknownTopic);
    let kept = &asked.topics[0].partitions[4];
    assert_eq!(
        (kept.leader, kept.leader_epoch, &kept.replicas, &kept.isr),
        (0, 0, &vec![0], &vec![0])
    );
    assert_eq!(asked.brokers.len(), 1, "a broker alone answers for itself");
    // segment_bytes 40 still applies: two 30-byte messages land in two segments.
    for _ in 0..2 {
        conn.produce("kept", 4, Acks::Written, message_set(&[[0u8; 21]])).await.unwrap();
    }
    let logs = std::fs::read_dir(broker.data_dir().join("kept-4"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"))
        .count();
    assert_eq!(logs, 2);
}

fn broker_bin() -> &'static str {
    env!("CARGO_BIN_EXE_broker")
}

#[test]
fn sigterm_flushes_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--flush-messages",
        "1000000",
        "--flush-ms",
        "3600000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = dir.path().join("broker.log");
    let mut process = Process::spawn(broker_bin().as_ref(), &args, port, &log);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let addr = format!("127.0.0.1:{port}");
    runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        conn.produce("t", 0, Acks::Written, message_set(&[b"unflushed until shutdown"]))
            .await
            .unwrap();
        assert!(conn.fetch("t", 0, 0, 1000).await.unwrap().is_empty());
    });
    process.signal(Signal::SIGTERM);
    let status = process.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status}");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("every partition flushed"), "{log}");
    assert_eq!(
        std::fs::metadata(dir.path().join("t-0/00000000000000000000.log")).unwrap().len(),
        33
    );
}

#[test]
fn bad_flags_and_config_values_get_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.toml");
    std::fs::write(&config, "port = 7\nflush_messages = \"many\"\n").unwrap();
    let unknown_key = dir.path().join("typo.toml");
    std::fs::write(&unknown_key, "prot = 7\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--port".into(), "seventy".into()], "--port"),
        (vec!["--no-such-flag".into()], "--no-such-flag"),
        (vec!["--flush-ms".into(), "0".into()], "flush_ms"),
        (vec!["--segment-bytes".into(), "0".into()], "segment_bytes"),
        (vec!["--visible-after".into(), "sometimes".into()], "--visible-after"),
        (vec!["--config".into(), config.display().to_string()], "flush_messages"),
        (vec!["--config".into(), unknown_key.display().to_string()], "prot"),
        (vec!["--config".into(), "/no/such/file.toml".into()], "/no/such/file.toml"),
    ];
    for (args, mention) in cases {
        let out = std::process::Command::new(broker_bin()).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(mention), "{args:?}: {stderr}");
    }
}

#[test]
fn flags_override_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("broker.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!("port = 1\nbroker_id = 7\nnum_partitions = 3\ndata_dir = {:?}\n", data),
    )
    .unwrap();
    let args =
        vec!["--config".into(), config.display().to_string(), "--port".into(), port.to_string()];
    let _process = Process::spawn(broker_bin().as_ref(), &args, port, &dir.path().join("log"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let conn = client::Connection::connect(&format!("127.0.0.1:{port}")).await.unwrap();
        conn.produce("x", 0, Acks::Written, message_set(&[b"x"])).await.unwrap();
        let meta = conn.metadata(&["x"]).await.unwrap();
        assert_eq!((meta.broker_id, meta.topics[0].partitions.len()), (7, 3));
    });
    assert!(data.join("x-2").is_dir());
}

#[test]
fn limit_and_log_flags_are_applied() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("data");
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--data-dir",
        data.to_str().unwrap(),
        "--auto-create-topics",
        "false",
        "--max-message-bytes",
        "64",
        "--max-request-bytes",
        "4096",
        "--max-connections",
        "2",
        "--segment-bytes",
        "100",
        "--segment-ms",
        "3600000",
        "--retention-bytes",
        "250",
        "--retention-check-ms",
        "100",
        "--flush-messages",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let _process = Process::spawn(broker_bin().as_ref(), &args, port, &dir.path().join("log"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let addr = format!("127.0.0.1:{port}");
    runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        // --auto-create-topics false: an unknown topic is refused.
        let err = conn.produce("unknown", 0, Acks::Written, message_set(&[b"x"])).await;
        assert!(format!("{err:?}").contains("UnknownTopic"), "{err:?}");
        conn.create_topic("t", 1, &[]).await.unwrap();
        // --max-message-bytes 64.
        let err = conn.produce("t", 0, Acks::Written, message_set(&[[7u8; 100]])).await;
        assert!(format!("{err:?}").contains("MessageTooLarge"), "{err:?}");
        // --segment-bytes 100 rolls after each 50-byte message pair; --retention-bytes 250
        // then deletes head segments.
        for _ in 0..20 {
            conn.produce("t", 0, Acks::Written, message_set(&[[1u8; 41]])).await.unwrap();
        }
        testkit::eventually(Duration::from_secs(15), "retention by size", || async {
            let bytes: u64 = std::fs::read_dir(data.join("t-0"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|path| path.extension().is_some_and(|x| x == "log"))
                // A segment that retention deletes between the listing and its stat is gone:
                // it counts nothing (CI once saw NotFound here).
                .filter_map(|path| path.metadata().ok())
                .map(|meta| meta.len())
                .sum();
            (bytes <= 350).then_some(())
        })
        .await;
        // --max-request-bytes 4096: a larger request, of messages each within
        // --max-message-bytes, closes the connection (no error code: nothing was read).
        let big = conn.produce("t", 0, Acks::Written, message_set(&[[0u8; 30]; 200])).await;
        let err = big.expect_err("a request over --max-request-bytes must be refused");
        assert!(!format!("{err:?}").contains("MessageTooLarge"), "{err:?}");
        // --max-connections 2: a third connection is closed at once.
        let _second = client::Connection::connect(&addr).await.unwrap();
        let _third = client::Connection::connect(&addr).await.unwrap();
        let _fourth = client::Connection::connect(&addr).await.unwrap();
        let refused = _fourth.metadata(&[]).await;
        assert!(refused.is_err(), "over --max-connections, got {refused:?}");
    });
}

#[test]
fn host_num_partitions_and_retention_ms_flags_are_applied() {
    /// Kills the broker when the test ends, passed or failed.
    struct Broker(std::process::Child);
    impl Drop for Broker {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("data");
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = std::process::Command::new(broker_bin())
        .args(["--host", "127.0.0.2", "--port", &port.to_string()])
        .args(["--data-dir", data.to_str().unwrap(), "--num-partitions", "3"])
        .args(["--segment-bytes", "100", "--flush-messages", "1"])
        .args(["--retention-ms", "300", "--retention-check-ms", "100"])
        .stderr(log)
        .spawn()
        .unwrap();
    let _broker = Broker(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.2", port)).is_err() {
        assert!(Instant::now() < deadline, "not listening on 127.0.0.2:{port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "--host 127.0.0.2: nothing listens on 127.0.0.1"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let conn = client::Connection::connect(&format!("127.0.0.2:{port}")).await.unwrap();
        // --num-partitions 3: a topic its first produce creates has partitions 0, 1 and 2.
        conn.produce("auto", 2, Acks::Written, message_set(&[b"x"])).await.unwrap();
        let err = conn.produce("auto", 3, Acks::Written, message_set(&[b"x"])).await;
        assert!(format!("{err:?}").contains("WrongPartition"), "{err:?}");
        // --retention-ms 300: rolled segments go once they are that old.
        for _ in 0..10 {
            conn.produce("auto", 0, Acks::Written, message_set(&[[1u8; 41]])).await.unwrap();
        }
        testkit::eventually(Duration::from_secs(15), "retention by age", || async {
            let earliest = conn.offsets("auto", 0, -2, 1).await.ok()?;
            (earliest.first().copied()? > 0).then_some(())
        })
        .await;
    });
}

#[test]
fn flush_and_segment_flags_are_applied() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("data");
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--data-dir",
        data.to_str().unwrap(),
        "--flush-ms",
        "3600000",
        "--flush-messages",
        "3",
        "--segment-ms",
        "200",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let _process = Process::spawn(broker_bin().as_ref(), &args, port, &dir.path().join("log"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let conn = client::Connection::connect(&format!("127.0.0.1:{port}")).await.unwrap();
        conn.create_topic("f", 1, &[]).await.unwrap();
        // --flush-ms an hour: one message stays unflushed, so invisible (the default flushes
        // within a second).
        conn.produce("f", 0, Acks::Written, message_set(&[b"a"])).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert!(conn.fetch("f", 0, 0, 1 << 20).await.unwrap().is_empty(), "--flush-ms");
        // --flush-messages 3: the third message flushes all three.
        conn.produce("f", 0, Acks::Written, message_set(&[b"b", b"c"])).await.unwrap();
        // (--segment-ms 200 below put them in a second segment: a fetch reads one segment.)
        testkit::eventually(Duration::from_secs(15), "flush after 3 messages", || async {
            let (mut offset, mut visible) = (0, 0);
            loop {
                let set = conn.fetch("f", 0, offset, 1 << 20).await.ok()?;
                if set.is_empty() {
                    break;
                }
                visible += messages_of(&set, offset).len();
                offset += set.len() as i64;
            }
            (visible == 3).then_some(())
        })
        .await;
        // --segment-ms 200: the append 1.5 s after the first started a new segment file.
        let segments = std::fs::read_dir(data.join("f-0"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"))
            .count();
        assert!(segments >= 2, "--segment-ms: {segments} segment file(s)");
    });
}
