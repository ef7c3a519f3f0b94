//! The `broker` binary against clients that hold its resources and give nothing back: 5,000
//! connections that send half a request and stop, and 500 consumers that pipeline fetches and
//! never read their socket. A well-behaved consumer connected before them goes on being
//! served, the broker's memory stays under its bound, and `/metrics` shows each limit hit:
//! connections refused past `max_connections`, half requests and unread responses cut off after
//! `client_timeout_ms`.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use protocol::{Acks, FetchRequest, Request};
use testkit::broker::message_set;
use testkit::metrics::{parse, scrape, value};
use testkit::process::{Process, config_file, free_port, peak_rss, terminates_cleanly};

const BINARY: &str = env!("CARGO_BIN_EXE_broker");

const HALF_REQUESTS: usize = 5_000;
const NON_READERS: usize = 500;
/// Fetches each non-reader pipelines: far more than its socket buffers hold.
const FETCHES_PER_NON_READER: usize = 16;
const MAX_CONNECTIONS: usize = 4_096;
/// Long enough for every connection's stall to be written before the first is timed out.
const CLIENT_TIMEOUT_MS: u64 = 15_000;
const REQUEST_MEMORY_BYTES: u64 = 64 << 20;
/// Threads opening the connections.
const OPENERS: usize = 4;
const LOG_BYTES: usize = 16 << 20;
const FETCH_BYTES: i32 = 1 << 20;

/// The stated bound (broker/README.md, "Memory"): a base, 16 KiB per connection, and the
/// large requests being read.
const RSS_BOUND: u64 = (32 << 20) + MAX_CONNECTIONS as u64 * (16 << 10) + REQUEST_MEMORY_BYTES;

#[test]
fn half_requests_and_unread_fetches_neither_starve_a_consumer_nor_grow_the_broker() {
    let dir = tempfile::tempdir().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let config = config_file(
        dir.path(),
        &format!("max_connections = {MAX_CONNECTIONS}\nmax_request_bytes = {}\n", 4 << 20),
    );
    // The two limits this test is about as flags, the way an operator sets them.
    let args: Vec<String> = [
        "--config",
        &config,
        "--client-timeout-ms",
        &CLIENT_TIMEOUT_MS.to_string(),
        "--request-memory-bytes",
        &REQUEST_MEMORY_BYTES.to_string(),
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
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let consumer = runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        let payload = vec![b'x'; 1000];
        let payloads: Vec<&[u8]> = vec![&payload; 1024];
        loop {
            conn.produce("views", 0, Acks::Flushed, message_set(&payloads)).await.unwrap();
            if conn.offsets("views", 0, -1, 1).await.unwrap()[0] as usize >= LOG_BYTES {
                return conn;
            }
        }
    });
    let idle = runtime.block_on(fetch_latencies(&consumer, 200));
    let rss_before = peak_rss(process.child.id());

    // First every connection, idle: an idle client is never timed out, so however long the
    // connects take on a busy machine, the broker holds max_connections of them at once and
    // refuses the rest. (Opened with their requests half sent, a slow run saw the first time
    // out before the last came, and so no refusal.)
    let started = Instant::now();
    let total = NON_READERS + HALF_REQUESTS;
    let connected: Vec<(usize, TcpStream)> = std::thread::scope(|scope| {
        let openers: Vec<_> = (0..OPENERS)
            .map(|opener| {
                let addr = addr.as_str();
                scope.spawn(move || {
                    (opener..total)
                        .step_by(OPENERS)
                        .filter_map(|i| Some((i, TcpStream::connect(addr).ok()?)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        openers.into_iter().flat_map(|opener| opener.join().unwrap()).collect()
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let samples = parse(&scrape(&metrics_addr));
        let open = value(&samples, "tributary_broker_connections_open", &[]);
        let refused = value(&samples, "tributary_broker_connections_refused_total", &[]);
        // The consumer's connection is one of the open ones.
        if open + refused >= connected.len() as f64 + 1.0 {
            assert_eq!(open, MAX_CONNECTIONS as f64, "max_connections held at once");
            break;
        }
        assert!(Instant::now() < deadline, "{open} open, {refused} refused after 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Then each one stalls: half a request, or fetches it never reads.
    let held: Vec<TcpStream> = connected
        .into_iter()
        .filter_map(|(i, mut stream)| {
            let bytes = if i < NON_READERS {
                pipelined_fetches(i)
            } else if i % 2 == 0 {
                // A FETCH of 40 bytes announced, 10 of them sent.
                vec![0, 0, 0, 40, 0, 1, 0, 5, b'v', b'i', b'e', b'w', b's', 0]
            } else {
                // A PRODUCE of 1 MiB announced, 64 KiB of it sent.
                let mut bytes = vec![0; 64 << 10];
                bytes[..4].copy_from_slice(&(1u32 << 20).to_be_bytes());
                bytes
            };
            stream.write_all(&bytes).is_ok().then_some(stream)
        })
        .collect();
    let opened = started.elapsed();
    let loaded = runtime.block_on(fetch_latencies(&consumer, 200));
    let rss = peak_rss(process.child.id());
    let samples = parse(&scrape(&metrics_addr));
    let refused = value(&samples, "tributary_broker_connections_refused_total", &[]);
    let memory_waits = value(&samples, "tributary_broker_request_memory_waits_total", &[]);
    let memory_held = value(&samples, "tributary_broker_request_memory_in_use_bytes", &[]);
    eprintln!(
        "{} connections held in {opened:?}; fetch p50/p99 idle {:?}/{:?}, loaded {:?}/{:?}; \
         broker peak RSS {} MiB (bound {} MiB, {} MiB before); refused {refused}; \
         request memory: {memory_held} bytes held, {memory_waits} requests waiting",
        held.len(),
        idle[idle.len() / 2],
        idle[idle.len() * 99 / 100],
        loaded[loaded.len() / 2],
        loaded[loaded.len() * 99 / 100],
        rss >> 20,
        RSS_BOUND >> 20,
        rss_before >> 20,
    );
    assert!(rss < RSS_BOUND, "peak RSS {rss} above the stated bound {RSS_BOUND}");
    assert!(refused > 0.0, "connections past max_connections are refused");
    assert!(memory_waits > 0.0, "large half requests wait for request memory");
    assert!(memory_held <= REQUEST_MEMORY_BYTES as f64, "{memory_held}");

    // The held connections run out of time: their slots come back to new clients.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (half, unread) = loop {
        let samples = parse(&scrape(&metrics_addr));
        let timed_out = |while_: &str| {
            value(&samples, "tributary_broker_clients_timed_out_total", &[("stalled", while_)])
        };
        let (half, unread) = (timed_out("request"), timed_out("response"));
        let open = value(&samples, "tributary_broker_connections_open", &[]);
        if open <= 1.0 {
            break (half, unread);
        }
        assert!(Instant::now() < deadline, "{open} connections still open after 30 s");
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("cut off after client_timeout_ms: {half} half requests, {unread} unread responses");
    assert!(half + unread + refused >= (HALF_REQUESTS + NON_READERS) as f64 - 1.0);
    assert!(half > 0.0 && unread > 0.0, "both kinds of stalled client are timed out");
    drop(held);
    runtime.block_on(async {
        let fresh = client::Connection::connect(&addr).await.unwrap();
        let fetched = fresh.fetch("views", 0, 0, 4096).await.unwrap();
        assert!(!fetched.is_empty(), "a new client is served once the slots are free");
        assert!(!consumer.fetch("views", 0, 0, 4096).await.unwrap().is_empty());
    });
    terminates_cleanly(&mut process, Duration::from_secs(10));
}

/// The requests of the `i`th consumer that never reads: fetches of 1 MiB, far more than its
/// socket buffers hold.
fn pipelined_fetches(i: usize) -> Vec<u8> {
    let mut requests = BytesMut::new();
    for j in 0..FETCHES_PER_NON_READER {
        let fetch = FetchRequest {
            topic: "views".into(),
            partition: 0,
            offset: (((i + j) * 1_030_000) % (LOG_BYTES - FETCH_BYTES as usize)) as i64,
            max_bytes: FETCH_BYTES,
        };
        Request::Fetch(fetch).encode(&mut requests).unwrap();
    }
    requests.to_vec()
}

/// `count` fetches of 64 KiB from spread offsets, their latencies sorted.
async fn fetch_latencies(conn: &client::Connection, count: usize) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        let offset = (i * 77_777) % (LOG_BYTES - (64 << 10));
        let started = Instant::now();
        conn.fetch("views", 0, offset as i64, 64 << 10).await.expect("the consumer is served");
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}
