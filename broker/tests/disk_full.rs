//! The `broker` binary on a filesystem that fills: a 16 MiB tmpfs (the test mounts it, so it
//! runs as root). Produces are refused with error 15 (storage full) and nothing of them kept;
//! fetches go on serving every acknowledged message; produces succeed again once space
//! returns; and after `kill -9` the log recovers with every acknowledged message and nothing
//! torn.

use std::time::Duration;

use nix::sys::signal::Signal;
use protocol::{Acks, ErrorCode};
use testkit::broker::{message_set, messages_of};
use testkit::disk::Tmpfs;
use testkit::metrics::{parse, scrape, value};
use testkit::process::{Process, free_port};

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
const DISK_BYTES: u64 = 16 << 20;
const BALLAST_BYTES: usize = 4 << 20;

#[test]
fn a_full_disk_refuses_produces_keeps_serving_and_recovers_whole() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Tmpfs::mount(&dir.path().join("disk"), DISK_BYTES);
    let ballast = disk.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; BALLAST_BYTES]).unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--metrics",
        &format!("127.0.0.1:{metrics_port}"),
        "--data-dir",
        disk.path().join("data").to_str().unwrap(),
        "--segment-bytes",
        &(64u64 << 20).to_string(),
    ]
    .map(String::from)
    .to_vec();
    let log = dir.path().join("broker.log");
    let mut process = Process::spawn(BINARY.as_ref(), &args, port, &log);
    let addr = format!("127.0.0.1:{port}");
    let runtime = tokio::runtime::Runtime::new().unwrap();

    let (acknowledged, refusal) = runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        let mut acknowledged = Vec::new();
        for n in 0.. {
            let payloads: Vec<String> =
                (0..256).map(|i| format!("{n}-{i}-{}", "x".repeat(1000))).collect();
            match conn.produce("views", 0, Acks::Flushed, message_set(&payloads)).await {
                Ok(_) => acknowledged.extend(payloads),
                Err(e) => return (acknowledged, e),
            }
            assert!(n < 100, "16 MiB cannot hold {n} sets of 256 KiB");
        }
        unreachable!()
    });
    assert_eq!(refusal.code(), Some(ErrorCode::StorageFull), "{refusal}");
    eprintln!("{} messages acknowledged before the disk filled: {refusal}", acknowledged.len());
    assert!(acknowledged.len() >= 256 * 30, "most of the free space was used");

    let samples = parse(&scrape(&format!("127.0.0.1:{metrics_port}")));
    let full = [("request", "produce"), ("error", "storage_full")];
    assert!(value(&samples, "tributary_broker_request_errors_total", &full) >= 1.0);

    // Fetches go on: every acknowledged message, nothing of the refused set.
    let read = runtime.block_on(read_all(&addr));
    assert_eq!(read, acknowledged, "the full disk's log holds exactly what was acknowledged");

    // Space returns: produces succeed again.
    std::fs::remove_file(&ballast).unwrap();
    let later: Vec<String> = (0..256).map(|i| format!("later-{i}")).collect();
    runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        conn.produce("views", 0, Acks::Flushed, message_set(&later)).await.unwrap();
    });
    let mut expected = acknowledged;
    expected.extend(later);

    // A crash, and the log recovers whole: no torn message, nothing acknowledged missing.
    process.signal(Signal::SIGKILL);
    process.wait_exit(Duration::from_secs(10));
    let process = Process::spawn(BINARY.as_ref(), &args, port, &log);
    assert_eq!(runtime.block_on(read_all(&addr)), expected);
    let recovered = std::fs::read_to_string(&log).unwrap();
    assert!(!recovered.contains("truncat"), "recovery cut nothing:\n{recovered}");
    drop(process);
}

/// Every payload of `views` partition 0, in order (each message's CRC checked).
async fn read_all(addr: &str) -> Vec<String> {
    let conn = client::Connection::connect(addr).await.unwrap();
    let end = conn.offsets("views", 0, -1, 1).await.unwrap()[0];
    let mut offset = 0;
    let mut payloads = Vec::new();
    while offset < end {
        let set = conn.fetch("views", 0, offset, 1 << 20).await.unwrap();
        let messages = messages_of(&set, offset);
        let (last, payload) = messages.last().expect("a whole message per fetch");
        offset = last + 4 + 5 + payload.len() as i64;
        payloads.extend(messages.into_iter().map(|(_, p)| String::from_utf8(p).unwrap()));
    }
    payloads
}
