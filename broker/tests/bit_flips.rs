//! Flipped bits and a torn write in the segment files of a stopped `broker` (the binary),
//! written by the test: the last segment's are cut by recovery on start (the log says what
//! was cut); one in an older segment, which recovery does not read, is served as stored and
//! refused by the consumer's CRC check. No corrupt message is ever yielded as good data.

use std::time::Duration;

use client::{ConsumerError, FetchedMessages};
use nix::sys::signal::Signal;
use protocol::Acks;
use testkit::broker::message_set;
use testkit::process::{Process, free_port};

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
/// Bytes of each message: 9 of overhead and a 91-byte payload.
const MESSAGE_BYTES: u64 = 100;

#[test]
fn flipped_bits_are_cut_by_recovery_or_refused_by_the_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--data-dir",
        data.to_str().unwrap(),
        "--segment-bytes",
        "1000",
        "--flush-messages",
        "1",
    ]
    .map(String::from)
    .to_vec();
    let log = dir.path().join("broker.log");
    let addr = format!("127.0.0.1:{port}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut process = Process::spawn(BINARY.as_ref(), &args, port, &log);
    runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        // Two segments of ten messages, then five in the last.
        for n in 0..25u8 {
            conn.produce("rot", 0, Acks::Flushed, message_set(&[vec![n; 91]])).await.unwrap();
        }
    });
    process.signal(Signal::SIGTERM);
    process.wait_exit(Duration::from_secs(10));

    let partition = data.join("rot-0");
    let segment = |base: u64| partition.join(format!("{base:020}.log"));
    assert!(segment(2_000).exists(), "three segments");
    // The payload of message 3 of the first segment (offset 300), and of message 2 of the last
    // (offset 2,200); then half a message appended to the last, as a crash mid-write leaves.
    flip_bit(&segment(0), 300 + 50);
    flip_bit(&segment(2_000), 200 + 50);
    let mut last = std::fs::read(segment(2_000)).unwrap();
    last.extend_from_slice(&[0, 0, 0, 95, 1, 2, 3]);
    std::fs::write(segment(2_000), &last).unwrap();

    let _process = Process::spawn(BINARY.as_ref(), &args, port, &log);
    let recovered = std::fs::read_to_string(&log).unwrap();
    assert!(recovered.contains("truncat"), "recovery says what it cut:\n{recovered}");
    runtime.block_on(async {
        let conn = client::Connection::connect(&addr).await.unwrap();
        // The last segment is cut at its flipped message: the log ends at 2,200.
        assert_eq!(conn.offsets("rot", 0, -1, 1).await.unwrap(), [2_200]);
        assert_eq!(std::fs::metadata(segment(2_000)).unwrap().len(), 200);

        // The first segment's flipped message is sent as stored; the consumer yields the
        // three before it and then refuses it, and nothing after it.
        let set = conn.fetch("rot", 0, 0, 1_000).await.unwrap();
        let fetched = FetchedMessages::new("rot", 0, 0, set);
        let read: Vec<_> = fetched.iter().collect();
        let good: Vec<i64> =
            read.iter().filter_map(|m| m.as_ref().ok()).map(|m| m.offset).collect();
        assert_eq!(good, [0, 100, 200]);
        assert_eq!(read.len(), 4, "nothing after the corrupt message is yielded");
        let refused = read[3].as_ref().unwrap_err();
        assert!(matches!(refused, ConsumerError::InvalidMessage { .. }), "{refused}");
        assert!(refused.to_string().to_lowercase().contains("crc"), "{refused}");

        // The second segment is whole, and so is the last up to the cut.
        for (offset, count) in [(1_000, 10), (2_000, 2)] {
            let set = conn.fetch("rot", 0, offset, 1_000).await.unwrap();
            let fetched = FetchedMessages::new("rot", 0, offset, set);
            let messages: Vec<_> = fetched.iter().map(|m| m.expect("a good message")).collect();
            assert_eq!(messages.len(), count);
            assert!(messages.iter().all(|m| (m.offset as u64).is_multiple_of(MESSAGE_BYTES)));
        }
    });
}

fn flip_bit(path: &std::path::Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x04;
    std::fs::write(path, &bytes).unwrap();
}
