//! The `broker` binary as an operator runs it: its `/metrics` page read by a real parser
//! during traffic, SIGTERM, and the one-line refusals of a bad config key or duration.

use std::time::Duration;

use protocol::{Acks, FetchRequest};
use testkit::broker::message_set;
use testkit::metrics::{has, parse, scrape, value};
use testkit::process::{Process, config_file, free_port, terminates_cleanly, usage_error};

const BINARY: &str = env!("CARGO_BIN_EXE_broker");

#[test]
fn metrics_show_a_produce_and_consume_run_to_a_scraper() {
    let dir = tempfile::tempdir().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--metrics",
        &format!("127.0.0.1:{metrics_port}"),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let mut process = Process::spawn(BINARY.as_ref(), &args, port, &dir.path().join("broker.log"));
    let addr = format!("127.0.0.1:{port}");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        for i in 0..10 {
            let set = message_set(&[format!("a-{i}"), format!("b-{i}")]);
            conn.produce("views", 0, Acks::Flushed, set).await.unwrap();
        }
        let fetched = conn.fetch("views", 0, 0, 1 << 20).await.unwrap();
        assert!(!fetched.is_empty());
        let waited = conn
            .multi_fetch_wait(
                50,
                1 << 20,
                vec![FetchRequest {
                    topic: "views".into(),
                    partition: 0,
                    offset: fetched.len() as i64,
                    max_bytes: 1024,
                }],
            )
            .await
            .unwrap();
        assert!(waited[0].messages.is_empty(), "nothing new: the long poll times out");
        assert!(conn.fetch("no-such-topic", 0, 0, 100).await.is_err());
    });

    let samples = parse(&scrape(&format!("127.0.0.1:{metrics_port}")));
    let views = [("topic", "views")];
    assert_eq!(value(&samples, "tributary_broker_messages_in_total", &views), 20.0);
    assert!(value(&samples, "tributary_broker_bytes_in_total", &views) > 0.0);
    assert!(value(&samples, "tributary_broker_bytes_out_total", &views) > 0.0);
    assert_eq!(value(&samples, "tributary_broker_requests_total", &[("request", "produce")]), 10.0);
    assert!(value(&samples, "tributary_broker_requests_total", &[("request", "fetch")]) >= 2.0);
    let unknown = [("request", "fetch"), ("error", "unknown_topic")];
    assert_eq!(value(&samples, "tributary_broker_request_errors_total", &unknown), 1.0);
    for operation in ["produce", "fetch", "long_poll_wait"] {
        let count = value(
            &samples,
            "tributary_broker_request_latency_seconds_count",
            &[("operation", operation)],
        );
        assert!(count >= 1.0, "{operation} latency observed");
    }
    assert!(value(&samples, "tributary_broker_flush_latency_seconds_count", &[]) >= 10.0);
    assert!(value(&samples, "tributary_broker_connections_accepted_total", &[]) >= 1.0);
    assert!(has(&samples, "tributary_broker_connections_open"));
    assert!(has(&samples, "tributary_broker_parked_fetches"));
    assert_eq!(value(&samples, "tributary_broker_fetches_parked_total", &[]), 1.0);
    let partition = [("topic", "views"), ("partition", "0")];
    let end = value(&samples, "tributary_broker_log_end_offset", &partition);
    assert!(end > 0.0);
    assert_eq!(value(&samples, "tributary_broker_log_visible_offset", &partition), end);
    assert_eq!(value(&samples, "tributary_broker_log_size_bytes", &partition), end);
    terminates_cleanly(&mut process, Duration::from_secs(10));
}

#[test]
fn bad_config_keys_and_durations_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(dir.path(), "port = 7000\nprot = 7001\n");
    let error = usage_error(BINARY.as_ref(), &["--config", &file]);
    assert!(
        error.starts_with("broker: ") && error.contains("prot") && error.contains("line 2"),
        "{error}"
    );
    let error = usage_error(BINARY.as_ref(), &["--flush-ms", "1s"]);
    assert!(error.contains("--flush-ms") && error.contains("1s"), "{error}");
    let file = config_file(dir.path(), "flush_ms = \"1s\"\n");
    let error = usage_error(BINARY.as_ref(), &["--config", &file]);
    assert!(error.contains("line 1 `flush_ms = \"1s\"`") && error.contains("u64"), "{error}");
    let error = usage_error(BINARY.as_ref(), &["--flush-ms", "0"]);
    assert!(error.contains("flush_ms"), "{error}");
    let error = usage_error(BINARY.as_ref(), &["--client-timeout-ms", "0"]);
    assert!(error.contains("client_timeout_ms") && error.contains("at least 1"), "{error}");
    let error = usage_error(BINARY.as_ref(), &["--request-memory-bytes", "1000"]);
    assert!(
        error.contains("request_memory_bytes") && error.contains("max_request_bytes"),
        "{error}"
    );
    let error = usage_error(BINARY.as_ref(), &["--kafka-advertised-port", "9092"]);
    assert!(error.contains("kafka_advertised_port") && error.contains("kafka_port"), "{error}");
    let no_port = ["--kafka-port", "0", "--kafka-advertised-port", "0"];
    let error = usage_error(BINARY.as_ref(), &no_port);
    assert!(error.contains("kafka_advertised_port") && error.contains("1 to 65535"), "{error}");
}

/// `--advertised-host` and `--advertised-port` are what metadata answers, not the address the
/// broker listens on (a proxy or NAT in front of it).
#[test]
fn metadata_answers_the_advertised_address() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--advertised-host",
        "localhost",
        "--advertised-port",
        "7777",
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    let mut process = Process::spawn(BINARY.as_ref(), &args, port, &dir.path().join("broker.log"));
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let conn = client::Connection::connect(&format!("127.0.0.1:{port}")).await.unwrap();
        let metadata = conn.metadata(&[]).await.unwrap();
        let brokers: Vec<(String, i32)> =
            metadata.brokers.iter().map(|b| (b.host.clone(), b.port)).collect();
        assert_eq!(brokers, [("localhost".to_owned(), 7777)]);
    });
    terminates_cleanly(&mut process, Duration::from_secs(10));
}

#[test]
fn the_scrubber_reads_sealed_segments_no_faster_than_scrub_bytes_per_s() {
    let dir = tempfile::tempdir().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--metrics",
        &format!("127.0.0.1:{metrics_port}"),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
        "--segment-bytes",
        "1000",
        "--scrub-interval-ms",
        "100",
        "--scrub-bytes-per-s",
        "1000",
    ]
    .map(String::from)
    .to_vec();
    let mut process = Process::spawn(BINARY.as_ref(), &args, port, &dir.path().join("broker.log"));
    let addr = format!("127.0.0.1:{port}");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        // 100-byte messages: three sealed segments of 1,000 bytes, and the active one.
        for n in 0..35u8 {
            conn.produce("rot", 0, Acks::Flushed, message_set(&[vec![n; 91]])).await.unwrap();
        }
    });
    let metrics = format!("127.0.0.1:{metrics_port}");
    let scrubbed = || value(&parse(&scrape(&metrics)), "tributary_broker_scrub_bytes_total", &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while scrubbed() < 1000.0 {
        assert!(std::time::Instant::now() < deadline, "the scrubber read nothing");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Unthrottled, a pass over the 3,000 sealed bytes would repeat every 100 ms.
    let before = scrubbed();
    std::thread::sleep(Duration::from_secs(3));
    let read = scrubbed() - before;
    assert!((1000.0..=5000.0).contains(&read), "{read} bytes in 3 s at 1,000 bytes/s");
    let samples = parse(&scrape(&metrics));
    assert_eq!(value(&samples, "tributary_broker_scrub_damage_found_total", &[]), 0.0);
    terminates_cleanly(&mut process, Duration::from_secs(10));
}
