//! A client that reads its own acknowledged writes right after a leader change sees every one
//! of them: three processes of the real `broker` binary in a real ZooKeeper, a topic of
//! replication factor 3 and `min_insync_replicas` 2. Each round an acks-all producer writes a
//! run of messages to every partition; then the leader of one partition is killed with
//! `kill -9`, and as soon as the registry names its successor the partition is read from it,
//! from the start to the end it answers `OFFSETS` latest with, as `trib consume --offset
//! earliest` reads. The new leader's high watermark starts where it was as a follower, which
//! can be short of what the old leader acknowledged; the read must not take that for the end.
//!
//! `TRIBUTARY_ROUNDS=N` changes the number of rounds (default 10; the scenario is 20).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use client::{ConsumerError, SimpleConsumer};
use protocol::ErrorCode;
use testkit::broker_processes::{acks_all_producer, three_with_topic};
use testkit::eventually;
use testkit::zookeeper::ZooKeeperServer;

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
const TOPIC: &str = "own-writes";
const PARTITIONS: i32 = 3;
const RUN_MESSAGES: usize = 200;
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_are_read_back_at_once_from_a_new_leader() {
    testkit::broker::init_logging();
    let rounds =
        std::env::var("TRIBUTARY_ROUNDS").map_or(10, |n| n.parse().expect("TRIBUTARY_ROUNDS"));
    let connect = ZooKeeperServer::shared().connect_string();
    let args = ["--zookeeper-session-timeout-ms", "2000", "--replica-lag-ms", "3000"];
    let (mut brokers, registry) =
        three_with_topic(BINARY.as_ref(), &connect, &args, TOPIC, PARTITIONS).await;
    let in_sync = |partition: i32| {
        let registry = registry.clone();
        async move {
            let (state, _) = registry.partition_state(TOPIC, partition).await.ok()??;
            (state.leader >= 0 && state.isr.len() == 3).then_some(state)
        }
    };
    let producer = acks_all_producer(&registry);
    let mut acknowledged: Vec<BTreeSet<Vec<u8>>> = vec![BTreeSet::new(); PARTITIONS as usize];
    let mut waited = Vec::new();
    for round in 0..rounds {
        for partition in 0..PARTITIONS {
            eventually(WAIT, "every replica in sync", || in_sync(partition)).await;
        }
        let mut pending = Vec::new();
        for i in 0..RUN_MESSAGES {
            let partition = (i % PARTITIONS as usize) as i32;
            let payload = format!("{round}:{i}").into_bytes();
            let key = partition.to_be_bytes();
            let ack = producer.enqueue(TOPIC, Some(&key), &payload).await.expect("enqueued");
            pending.push((partition, payload, ack));
        }
        for (partition, payload, ack) in pending {
            ack.await.expect("acknowledged: every replica is in sync");
            acknowledged[partition as usize].insert(payload);
        }
        let partition = round % PARTITIONS;
        let old = eventually(WAIT, "a leader", || in_sync(partition)).await.leader;
        brokers.kill(old);
        let new = eventually(WAIT, "another leader", || async {
            let (state, _) = registry.partition_state(TOPIC, partition).await.ok()??;
            (state.leader >= 0 && state.leader != old).then_some(state.leader)
        })
        .await;
        let started = Instant::now();
        let read = read_from_new_leader(&brokers.addr(new), partition).await;
        waited.push(started.elapsed());
        let missing = acknowledged[partition as usize].difference(&read).count();
        assert_eq!(
            missing,
            0,
            "round {round}: broker {new}, just elected for partition {partition}, answered \
             without {missing} of {} acknowledged messages",
            acknowledged[partition as usize].len()
        );
        brokers.restart(old);
    }
    producer.close().await;
    waited.sort();
    eprintln!(
        "{rounds} leader changes, every acknowledged message read back at once; the read took \
         p50 {:?}, max {:?}",
        waited[waited.len() / 2],
        waited.last().unwrap()
    );
}

/// Every payload of `partition` from the start to the end the broker at `addr` answers
/// OFFSETS latest with. The registry names a leader before the broker has taken the role up:
/// until then it answers NOT_LEADER, and the read asks again, as a client does.
async fn read_from_new_leader(addr: &str, partition: i32) -> BTreeSet<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    loop {
        match read_to_end(addr, partition).await {
            Ok(read) => return read,
            Err(ConsumerError::Request { source, .. })
                if source.code() == Some(ErrorCode::NotLeader) && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("reading partition {partition} from {addr}: {e}"),
        }
    }
}

async fn read_to_end(addr: &str, partition: i32) -> Result<BTreeSet<Vec<u8>>, ConsumerError> {
    let consumer = SimpleConsumer::connect(addr, Default::default()).await?;
    let end = consumer.latest_offset(TOPIC, partition).await?;
    let (mut offset, mut read) = (0, BTreeSet::new());
    while offset < end {
        for message in consumer.fetch(TOPIC, partition, offset).await?.iter() {
            let message = message?;
            read.insert(message.payload.to_vec());
            offset = message.next_offset;
        }
    }
    Ok(read)
}
