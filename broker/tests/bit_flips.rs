//! Flipped bits and a torn write in the segment files of a stopped `broker` (the binary),
//! written by the test: the last segment's are cut by recovery on start (the log says what
//! was cut); one in an older segment, which recovery does not read, is served as stored and
//! refused by the consumer's CRC check. No corrupt message is ever yielded as good data.
//!
//! In a replicated partition (three `broker` processes in a real ZooKeeper), the scrubber
//! finds a flipped bit in a sealed segment — a follower's, flipped while it is stopped, and
//! the leader's, flipped while it runs — and writes the range over with another replica's
//! bytes: every replica's segment files are as they were, byte for byte.

use std::time::Duration;

use client::{ConsumerError, FetchedMessages};
use nix::sys::signal::Signal;
use protocol::Acks;
use testkit::broker::message_set;
use testkit::broker_processes::{read_partition, segment_files, three_with_topic};
use testkit::eventually;
use testkit::process::{Process, free_port};
use testkit::zookeeper::ZooKeeperServer;

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
/// Bytes of each message: 9 of overhead and a 91-byte payload.
const MESSAGE_BYTES: u64 = 100;
/// The tests run one at a time: the first stops its broker and starts it again on the same
/// port, which the other's brokers, picking free ports meanwhile, could otherwise be given;
/// `Process::spawn` would then see that broker listening and the log would not be this one's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[test]
fn flipped_bits_are_cut_by_recovery_or_refused_by_the_consumer() {
    let _one_at_a_time = ONE_AT_A_TIME.blocking_lock();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bits_in_a_replicated_partition_are_repaired_from_a_replica() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    const WAIT: Duration = Duration::from_secs(60);
    let connect = ZooKeeperServer::shared().connect_string();
    let args = [
        "--zookeeper-session-timeout-ms",
        "2000",
        "--segment-bytes",
        "1000",
        "--flush-messages",
        "1",
        "--scrub-interval-ms",
        "200",
        "--scrub-bytes-per-s",
        "0",
    ];
    let (mut brokers, registry) =
        three_with_topic(BINARY.as_ref(), &connect, &args, "rot", 1).await;
    let state = eventually(WAIT, "every replica in sync", || async {
        let (state, _) = registry.partition_state("rot", 0).await.ok()??;
        (state.leader >= 0 && state.isr.len() == 3).then_some(state)
    })
    .await;
    let leader = state.leader;
    let follower = (0..3).find(|&id| id != leader).unwrap();
    let conn = client::Connection::connect(&brokers.addr(leader)).await.unwrap();
    // Three sealed segments of ten messages, and five in the last.
    // The leader may take up its election a moment after the registry shows it: a refusal
    // (not leader, too few in sync) appends nothing, and is tried again.
    for n in 0..35u8 {
        let mut tries = 0;
        while let Err(e) = conn.produce("rot", 0, Acks::All, message_set(&[vec![n; 91]])).await {
            tries += 1;
            assert!(tries < 100, "message {n}: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    drop(conn);
    let dirs: Vec<_> = (0..3).map(|id| brokers.data_dir(id).join("rot-0")).collect();
    let dir = |id: i32| dirs[id as usize].clone();
    let whole = eventually(WAIT, "every replica with the same segment files", || async {
        let replicas: Vec<_> = (0..3).map(|id| segment_files(&dir(id))).collect();
        (replicas.windows(2).all(|w| w[0] == w[1]) && replicas[0].len() == 4)
            .then(|| replicas[0].clone())
    })
    .await;
    let segment = |id: i32, base: u64| dir(id).join(format!("{base:020}.log"));

    // Bit rot on the follower's disk while it is down: recovery on start reads only the last
    // segment, so the damage in the first is there once it runs again.
    brokers.kill(follower);
    flip_bit(&segment(follower, 0), 350);
    brokers.restart(follower);
    // And under the running leader, in its second segment.
    flip_bit(&segment(leader, 1_000), 250);
    assert_ne!(segment_files(&dir(leader)), whole);

    let deadline = std::time::Instant::now() + WAIT;
    while !(0..3).all(|id| segment_files(&dir(id)) == whole) {
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> =
                (0..3).map(|id| format!("broker {id}:\n{}", brokers.log(id))).collect();
            panic!(
                "the replicas are not repaired (leader {leader}, follower {follower}):\n{}",
                logs.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in [follower, leader] {
        let log = brokers.log(id);
        assert!(log.contains("damaged messages in a sealed segment"), "broker {id}:\n{log}");
        assert!(log.contains("damaged range repaired from a replica"), "broker {id}:\n{log}");
    }
    let read = read_partition(&brokers.addr(leader), "rot", 0).await;
    let payloads: Vec<Vec<u8>> = read.into_iter().map(|(_, payload)| payload).collect();
    assert_eq!(payloads, (0..35u8).map(|n| vec![n; 91]).collect::<Vec<_>>());
}

/// Flips one bit in place, as rot under a file does: the file keeps its length throughout
/// (a rewrite would empty it for a moment under a running broker).
fn flip_bit(path: &std::path::Path, at: usize) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at as u64).unwrap();
    file.write_all_at(&[byte[0] ^ 0x04], at as u64).unwrap();
}
