//! The real `trib` binary against a broker started in the test: what a person at a terminal
//! types, and what they see.

use std::process::{Output, Stdio};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use testkit::broker::TestBroker;

const TRIB: &str = env!("CARGO_BIN_EXE_trib");

async fn trib(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(TRIB)
        .args(args)
        .env_remove("RUST_LOG") // what a user sees by default
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("trib starts");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).await.unwrap();
    drop(input);
    child.wait_with_output().await.unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "trib failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produced_lines_come_back_from_consume() {
    let broker = TestBroker::start().await;
    let b = broker.addr.as_str();
    let lines: String = (0..500).map(|i| format!("line {i}\n")).collect();
    let produced = trib(
        &["produce", "--brokers", b, "--topic", "cli", "--acks", "2", "--compression", "zstd"],
        lines.as_bytes(),
    )
    .await;
    stdout(&produced);
    let consumed = trib(
        &["consume", "--brokers", b, "--topic", "cli", "--partition", "0", "--offset", "earliest"],
        b"",
    )
    .await;
    assert_eq!(stdout(&consumed), lines);
    let limited =
        trib(&["consume", "--brokers", b, "--topic", "cli", "--max-messages", "3"], b"").await;
    assert_eq!(stdout(&limited), "line 0\nline 1\nline 2\n");
}

/// `--idempotent`: the lines go as an idempotent producer's batches and come back once each;
/// with `--acks 0` it is refused before anything is sent. Without it a produce is idempotent
/// too, and `--no-idempotence` sends plain message sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_produce_comes_back_once_and_acks_0_is_refused() {
    let broker = TestBroker::start().await;
    let b = broker.addr.as_str();
    broker.connect().await.create_topic("idem", 1, &[]).await.unwrap();
    let lines: String = (0..300).map(|i| format!("line {i}\n")).collect();
    let args = ["produce", "--brokers", b, "--topic", "idem", "--partition", "0", "--idempotent"];
    // Acks 2: consumers see messages once they are flushed, so the read below sees them all
    // only when the produce waited for the flush.
    stdout(&trib(&[&args[..], &["--acks", "2"]].concat(), lines.as_bytes()).await);
    let consumed = trib(&["consume", "--brokers", b, "--topic", "idem"], b"").await;
    assert_eq!(stdout(&consumed), lines);
    let set = broker.connect().await.fetch("idem", 0, 0, 1 << 20).await.unwrap();
    let (_, first) = protocol::MessageSetIter::new(&set, 0).next().unwrap().unwrap();
    assert_eq!(first.magic, protocol::MAGIC_BATCH, "one batch per message");

    let refused = trib(&[&args[..], &["--acks", "0"]].concat(), b"x\n").await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("idempotence needs acks 1 or more"), "{stderr}");

    // Idempotent by default; plain message sets with --no-idempotence.
    for (topic, flags, batch) in
        [("by-default", &[][..], true), ("plain", &["--no-idempotence"][..], false)]
    {
        broker.connect().await.create_topic(topic, 1, &[]).await.unwrap();
        let args = ["produce", "--brokers", b, "--topic", topic, "--partition", "0"];
        stdout(&trib(&[&args[..], flags, &["--acks", "2"]].concat(), b"one\ntwo\n").await);
        let set = broker.connect().await.fetch(topic, 0, 0, 1 << 20).await.unwrap();
        let (_, first) = protocol::MessageSetIter::new(&set, 0).next().unwrap().unwrap();
        assert_eq!(first.magic == protocol::MAGIC_BATCH, batch, "{topic}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_says_offsets_and_summaries() {
    let broker = TestBroker::start().await;
    let b = broker.addr.as_str();
    let produced = trib(
        &["--json", "produce", "--brokers", b, "--topic", "j", "--acks", "2"],
        b"alpha\nbeta\n",
    )
    .await;
    let summary: serde_json::Value = serde_json::from_str(stdout(&produced).trim()).unwrap();
    assert_eq!((summary["topic"].as_str(), summary["messages"].as_u64()), (Some("j"), Some(2)));

    let consumed = trib(&["consume", "--json", "--brokers", b, "--topic", "j"], b"").await;
    let messages: Vec<serde_json::Value> =
        stdout(&consumed).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[0],
        serde_json::json!({"offset": 0, "next_offset": 14, "payload": "alpha"})
    );
    assert_eq!(messages[1]["offset"], 14);

    let offsets =
        trib(&["offsets", "--json", "--brokers", b, "--topic", "j", "--time", "latest"], b"").await;
    let offsets: serde_json::Value = serde_json::from_str(stdout(&offsets).trim()).unwrap();
    assert_eq!(offsets["offsets"], serde_json::json!([27]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_listed_and_described() {
    let broker = TestBroker::start().await;
    let b = broker.addr.as_str();
    let created = trib(
        &[
            "topics",
            "create",
            "--brokers",
            b,
            "--topic",
            "made",
            "--partitions",
            "3",
            "--config",
            "retention_ms=3600000",
        ],
        b"",
    )
    .await;
    assert!(stdout(&created).contains("created made with 3 partition(s)"));
    let listed = trib(&["topics", "list", "--json", "--brokers", b], b"").await;
    let listed: serde_json::Value = serde_json::from_str(stdout(&listed).trim()).unwrap();
    assert_eq!(listed[0]["topic"], "made");
    assert_eq!(listed[0]["partitions"], 3);
    assert_eq!(listed[0]["replication_factor"], 1);
    let described = trib(&["topics", "describe", "--brokers", b, "--topic", "made"], b"").await;
    let text = stdout(&described);
    assert_eq!(text.lines().count(), 1 + 3, "a header and one row per partition:\n{text}");
    let bad = trib(
        &[
            "topics",
            "create",
            "--brokers",
            b,
            "--topic",
            "x",
            "--partitions",
            "1",
            "--config",
            "nope=1",
        ],
        b"",
    )
    .await;
    assert_eq!(bad.status.code(), Some(2), "a refusal, like a bad argument");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid topic config"));
    // --replication-factor reaches the broker: one alone keeps one replica, and says so.
    let replicated = trib(
        &[
            "topics",
            "create",
            "--brokers",
            b,
            "--topic",
            "r",
            "--partitions",
            "1",
            "--replication-factor",
            "2",
        ],
        b"",
    )
    .await;
    assert_eq!(replicated.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&replicated.stderr).contains("invalid topic config"));
    let single = trib(
        &[
            "topics",
            "create",
            "--brokers",
            b,
            "--topic",
            "r",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
        ],
        b"",
    )
    .await;
    assert!(stdout(&single).contains("replication factor 1"));
}

#[tokio::test]
async fn bad_arguments_exit_2_with_one_line_on_stderr() {
    for args in [
        &["produce", "--topic", "t"][..],
        &["consume", "--brokers", "127.0.0.1:1", "--topic", "t", "--offset", "soon"],
        &["produce", "--brokers", "127.0.0.1:1", "--topic", "t", "--acks", "4"],
        &[
            "produce",
            "--brokers",
            "127.0.0.1:1",
            "--topic",
            "t",
            "--partition",
            "1",
            "--key-field",
            "2",
        ],
        &["offsets", "--brokers", "127.0.0.1:1", "--topic", "t", "--time", "yesterday"],
        &["frobnicate"],
    ] {
        let output = trib(args, b"").await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("trib: ") && !stderr.contains("error: "), "{stderr}");
    }
}

#[tokio::test]
async fn an_unreachable_broker_is_one_line_and_exit_1() {
    let output = trib(&["offsets", "--brokers", "127.0.0.1:1", "--topic", "t"], b"").await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("127.0.0.1:1"), "{stderr}");
    // Each cause of the chain is said once.
    let output = trib(&["produce", "--brokers", "127.0.0.1:1", "--topic", "x"], b"hi\n").await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("no broker answered").count(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_produce_puts_equal_keys_in_one_partition() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("keys", 4, &[]).await.unwrap();
    let b = broker.addr.as_str();
    let lines: String =
        (0..40).map(|i| format!("{}\tevent {i}\n", ["ann", "bob", "cy"][i % 3])).collect();
    let produced = trib(
        &["produce", "--brokers", b, "--topic", "keys", "--key-field", "1", "--acks", "2"],
        lines.as_bytes(),
    )
    .await;
    stdout(&produced);
    let mut total = 0;
    for partition in 0..4 {
        let p = partition.to_string();
        let consumed =
            trib(&["consume", "--brokers", b, "--topic", "keys", "--partition", &p], b"").await;
        let text = stdout(&consumed);
        let keys: std::collections::HashSet<&str> =
            text.lines().map(|l| l.split('\t').next().unwrap()).collect();
        total += text.lines().count();
        for key in keys {
            assert_eq!(
                text.lines().filter(|l| l.starts_with(key)).count(),
                lines.lines().filter(|l| l.starts_with(key)).count()
            );
        }
    }
    assert_eq!(total, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_waits_at_the_end_of_the_log_for_new_messages() {
    let broker = TestBroker::start().await;
    broker.connect().await.create_topic("live", 1, &[]).await.unwrap();
    let b = broker.addr.clone();
    // A long poll of a minute: only its wake-up by the new data can end this test in time.
    let args = [
        "consume",
        "--brokers",
        &b,
        "--topic",
        "live",
        "--follow",
        "--poll-ms",
        "60000",
        "--max-messages",
        "2",
    ];
    let following = tokio::spawn({
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            trib(&args, b"").await
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!following.is_finished(), "an empty log does not end a --follow consume");
    stdout(
        &trib(
            &["produce", "--brokers", &b, "--topic", "live", "--acks", "all"],
            b"late 1\nlate 2\n",
        )
        .await,
    );
    let output =
        tokio::time::timeout(std::time::Duration::from_secs(10), following).await.unwrap().unwrap();
    assert_eq!(stdout(&output), "late 1\nlate 2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_and_offsets_flags_take_effect() {
    let broker = TestBroker::start_with(|c| c.segment_bytes = 200).await;
    let conn = broker.connect().await;
    conn.create_topic("csv", 4, &[]).await.unwrap();
    conn.create_topic("spread", 4, &[]).await.unwrap();
    let b = broker.addr.as_str();
    let count_in =
        |text: &str, prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();

    // --field-delimiter: the key is the first comma-separated field, so each name's lines
    // share a partition (with the default tab the whole line would be the key).
    let lines: String =
        (0..60).map(|i| format!("{},event {i}\n", ["ann", "bob", "cy"][i % 3])).collect();
    // One plain message per request, so that the 200-byte segments roll (checked with
    // offsets).
    let args = ["--topic", "csv", "--key-field", "1", "--field-delimiter", ",", "--acks", "2"];
    let args =
        [&args[..], &["--batch-messages", "1", "--linger-ms", "0", "--no-idempotence"]].concat();
    stdout(&trib(&[&["produce", "--brokers", b][..], &args].concat(), lines.as_bytes()).await);
    let mut holders = std::collections::BTreeMap::new();
    for partition in 0..4 {
        let p = partition.to_string();
        let args = ["consume", "--brokers", b, "--topic", "csv", "--partition", &p];
        let text = stdout(&trib(&args, b"").await);
        for name in ["ann,", "bob,", "cy,"] {
            match count_in(&text, name) {
                0 => {}
                20 => assert!(holders.insert(name, partition).is_none()),
                n => panic!(
                    "{n} of 20 {name} lines in partition {partition}: split by the wrong field"
                ),
            }
        }
    }
    assert_eq!(holders.len(), 3, "every name's 20 lines in one partition");

    // --any-partition with --batch-messages 10 and --linger-ms 0: 20 requests, each to a
    // partition the broker picks.
    let lines: String = (0..200).map(|i| format!("spread {i}\n")).collect();
    let args =
        ["--topic", "spread", "--any-partition", "--batch-messages", "10", "--linger-ms", "0"];
    stdout(
        &trib(&[&["produce", "--brokers", b, "--acks", "2"][..], &args].concat(), lines.as_bytes())
            .await,
    );
    let mut used = 0;
    let mut total = 0;
    for partition in 0..4 {
        let p = partition.to_string();
        let args = ["consume", "--brokers", b, "--topic", "spread", "--partition", &p];
        let n = stdout(&trib(&args, b"").await).lines().count();
        used += usize::from(n > 0);
        total += n;
    }
    assert_eq!(total, 200);
    assert!(used > 1, "every request went to one partition: batches were not of 10");

    // consume --offset at a byte offset starts at the message there; --fetch-bytes 64 still
    // reads messages larger than one fetch.
    let args = [
        "consume",
        "--json",
        "--brokers",
        b,
        "--topic",
        "csv",
        "--partition",
        &holders["bob,"].to_string(),
    ];
    let messages: Vec<serde_json::Value> =
        stdout(&trib(&args, b"").await).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let third = messages[2]["offset"].as_i64().unwrap().to_string();
    let p = holders["bob,"].to_string();
    let args = [
        "consume",
        "--brokers",
        b,
        "--topic",
        "csv",
        "--partition",
        &p,
        "--offset",
        &third,
        "--fetch-bytes",
        "64",
        "--max-messages",
        "1",
    ];
    assert_eq!(
        stdout(&trib(&args, b"").await),
        format!("{}\n", messages[2]["payload"].as_str().unwrap())
    );

    // offsets --partition, --time and --max. Segments of 200 bytes: bob's 20 lines span
    // several, and a time in the future names every segment start, newest first.
    let empty = (0..4).find(|p| !holders.values().any(|h| h == p)).unwrap().to_string();
    let offsets = |partition: String, extra: &'static [&'static str]| {
        let b = b.to_owned();
        async move {
            let mut args = vec!["offsets", "--json", "--brokers", &b, "--topic", "csv"];
            args.extend(["--partition", &partition]);
            args.extend(extra);
            let out = stdout(&trib(&args, b"").await);
            let offsets = serde_json::from_str::<serde_json::Value>(out.trim()).unwrap();
            serde_json::from_value::<Vec<i64>>(offsets["offsets"].clone()).unwrap()
        }
    };
    let end = offsets(p.clone(), &[]).await;
    assert!(end.len() == 1 && end[0] > 0, "partition {p} holds bob's lines: {end:?}");
    let starts = offsets(p.clone(), &["--time", "4102444800000"]).await;
    assert!(starts.len() > 2 && starts.last() == Some(&0), "{starts:?}");
    assert_eq!(offsets(p.clone(), &["--time", "4102444800000", "--max", "2"]).await, starts[..2]);
    assert_eq!(offsets(p.clone(), &["--time", "earliest"]).await, [0]);
    assert_eq!(offsets(empty, &[]).await, [0], "an empty partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_compression_acks_and_latest_take_effect() {
    // Flushes only when asked: data is visible once a produce with --acks 2 has returned.
    let broker = TestBroker::start_with(|c| {
        c.flush_ms = 3_600_000;
        c.flush_messages = 1_000_000;
    })
    .await;
    broker.connect().await.create_topic("p", 3, &[]).await.unwrap();
    let b = broker.addr.as_str();
    let args = ["produce", "--brokers", b, "--topic", "p", "--partition", "2", "--acks", "2"];
    stdout(&trib(&[&args[..], &["--compression", "zstd"]].concat(), b"x\ny\nz\n").await);
    let consume = |partition: &'static str, offset: &'static str| {
        let b = b.to_owned();
        async move {
            let args =
                ["consume", "--json", "--brokers", &b, "--topic", "p", "--partition", partition];
            stdout(&trib(&[&args[..], &["--offset", offset]].concat(), b"").await)
        }
    };
    // --partition 2 (and --acks 2: visible at once although the broker flushes hourly).
    assert_eq!(consume("0", "earliest").await, "");
    let lines: Vec<serde_json::Value> =
        consume("2", "earliest").await.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let payloads: Vec<&str> = lines.iter().map(|m| m["payload"].as_str().unwrap()).collect();
    assert_eq!(payloads, ["x", "y", "z"]);
    // --compression zstd: the three travel in one wrapper, so they share its offset.
    assert!(lines.iter().all(|m| m["offset"] == 0), "{lines:?}");
    // --offset latest: nothing of what is there.
    assert_eq!(consume("2", "latest").await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reports_on_stderr_while_a_produce_runs() {
    let broker = TestBroker::start().await;
    let mut child = Command::new(TRIB)
        .args(["produce", "--brokers", &broker.addr, "--topic", "slow", "--progress"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"first\n").await.unwrap();
    input.flush().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    input.write_all(b"second\n").await.unwrap();
    drop(input);
    let output = child.wait_with_output().await.unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    // A report a second in (stderr is no terminal here, so only --progress asks for it), then
    // the summary.
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with("trib: ") && lines[0].ends_with("MiB/s"), "{stderr}");
    assert!(lines[1].ends_with("to slow"), "{stderr}");
}

/// `consume --read-committed`: of Kafka producers' transactions in the log (written here as a
/// broker has them: transactional batches, then the marker a transaction coordinator has the
/// leader append with WRITE_TXN_MARKER), only the committed one is read, and reading stops at
/// the one still open; without the flag every record is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_reads_only_committed_transactions() {
    use protocol::record_batch::RecordBatchBuilder;
    use protocol::{Acks, Request, WriteTxnMarkerRequest};
    use tokio::io::AsyncReadExt;

    let broker = TestBroker::start().await;
    let b = broker.addr.as_str();
    let conn = client::Connection::connect(b).await.unwrap();
    let transactional = |producer: i64, value: &str| {
        let mut batch = RecordBatchBuilder::new(0).with_producer(producer, 0, 0).transactional();
        batch.push(0, 1_000, Some(b"k"), Some(value.as_bytes()), &[]);
        let mut set = bytes::BytesMut::new();
        protocol::encode_batch_message(&mut set, &batch.finish());
        set.freeze()
    };
    let marker = |producer: i64, commit: bool| async move {
        let request = Request::WriteTxnMarker(WriteTxnMarkerRequest {
            topic: "txn".into(),
            partition: 0,
            producer_id: producer,
            producer_epoch: 0,
            commit,
            coordinator_epoch: 0,
        });
        let mut frame = bytes::BytesMut::new();
        request.encode(&mut frame).unwrap();
        let mut stream = tokio::net::TcpStream::connect(b).await.unwrap();
        stream.write_all(&frame).await.unwrap();
        let size = stream.read_u32().await.unwrap();
        assert_eq!(stream.read_i16().await.unwrap(), 0, "the marker is refused ({size} bytes)");
    };
    for (producer, value, commit) in [(5, "kept", Some(true)), (6, "dropped", Some(false))] {
        conn.produce("txn", 0, Acks::Flushed, transactional(producer, value)).await.unwrap();
        if let Some(commit) = commit {
            marker(producer, commit).await;
        }
    }
    conn.produce("txn", 0, Acks::Flushed, transactional(7, "open")).await.unwrap();
    conn.produce("txn", 0, Acks::Flushed, transactional(8, "after the open one")).await.unwrap();
    marker(8, true).await;

    let consume = ["consume", "--brokers", b, "--topic", "txn"];
    let everything = trib(&consume, b"").await;
    assert_eq!(stdout(&everything), "kept\ndropped\nopen\nafter the open one\n");
    let committed = trib(&[&consume[..], &["--read-committed"]].concat(), b"").await;
    assert_eq!(stdout(&committed), "kept\n");
}
