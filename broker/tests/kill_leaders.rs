//! The real `broker` binary, three processes in a real ZooKeeper, one topic with replication
//! factor 3 and `min_insync_replicas` 2: the leader of a partition is killed with `kill -9`
//! fifty times, one leader after another, each restarted (one of them at once, on a wiped data
//! directory), while a producer with acks all keeps producing and a consumer group keeps reading.
//! Every acknowledged message is there at the end, in order; nothing a consumer read was taken
//! back; and every replica of a partition has the same segment files, byte for byte. With an
//! idempotent producer (ten kills), no message is in the log twice either: a batch retried
//! across a failover is acknowledged where the old leader appended it.
//!
//! `TRIBUTARY_KILLS=N` changes the number of kills of both tests; `TRIBUTARY_DUMP_LOGS=1` prints every
//! broker's log at the end (a broker's log tail is printed anyway if the cluster fails to heal).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{GroupConsumer, GroupConsumerConfig};
use testkit::broker_processes::{
    KillPlan, kill_leaders, read_partition, registry, segment_files, sequence, three_with_topic,
};
use testkit::eventually;
use testkit::proxy::AckDropper;
use testkit::zookeeper::ZooKeeperServer;

const BINARY: &str = env!("CARGO_BIN_EXE_broker");
const TOPIC: &str = "replicated";
const PARTITIONS: i32 = 3;
const WAIT: Duration = Duration::from_secs(120);

type Consumed = Arc<Mutex<Vec<(i32, i64, Vec<u8>)>>>;

/// Two members of one group reading the topic, each message noted with where it was read.
async fn start_group(connect: &str, consumed: &Consumed) -> Vec<GroupConsumer> {
    let mut members = Vec::new();
    for member in 0..2 {
        let mut config = GroupConsumerConfig::new("readers");
        config.consumer_id = Some(format!("reader-{member}"));
        config.auto_commit_ms = 500;
        let consumer = GroupConsumer::connect(registry(connect).await, config).unwrap();
        let topics = BTreeMap::from([(TOPIC.to_owned(), 1)]);
        let mut streams = consumer.create_message_streams(&topics).await.unwrap();
        let mut stream = streams.remove(TOPIC).unwrap().pop().unwrap();
        let consumed = Arc::clone(consumed);
        tokio::spawn(async move {
            while let Some(message) = stream.next_message().await {
                let m = message.expect("the group reads on through every failover");
                consumed.lock().unwrap().push((m.partition, m.offset, m.payload.to_vec()));
            }
        });
        members.push(consumer);
    }
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_leader_kills_lose_no_acknowledged_message() {
    kill_leaders_under_a_producer(kills_or(50), false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kills_under_an_idempotent_producer_store_no_message_twice() {
    kill_leaders_under_a_producer(kills_or(10), true, false).await;
}

/// The idempotent producer again, with every fifth produce answer lost as well: each broker
/// advertises a proxy in front of it that closes the connection instead of relaying the
/// answer to an IDEMPOTENT_PRODUCE, so the producer sends the batch again — to the same
/// leader, or to the next one after a kill. No message is in the log twice. The fifty
/// kills: `TRIBUTARY_KILLS=50 cargo test -p broker --test kill_leaders lost_answers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kills_and_lost_answers_under_an_idempotent_producer_store_no_message_twice() {
    kill_leaders_under_a_producer(kills_or(10), true, true).await;
}

fn kills_or(default: usize) -> usize {
    std::env::var("TRIBUTARY_KILLS").map_or(default, |n| n.parse().expect("TRIBUTARY_KILLS"))
}

/// One cluster of three at a time: two at once, on two cores, would time each other out.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Kills leaders `kills` times under an acks-all producer (an idempotent one if
/// `idempotence`) and a consumer group, and checks the logs, the group and the replicas. With
/// `lost_answers`, every fifth answer to an IDEMPOTENT_PRODUCE is lost on its way back.
async fn kill_leaders_under_a_producer(kills: usize, idempotence: bool, lost_answers: bool) {
    let _one = ONE_CLUSTER.lock().await;
    testkit::broker::init_logging();
    let connect = ZooKeeperServer::shared().connect_string();
    let mut args = vec![
        "--zookeeper-session-timeout-ms",
        "2000",
        "--replica-lag-ms",
        "3000",
        "--flush-ms",
        "5",
    ];
    if lost_answers {
        args.extend(["--advertised-port", "0"]);
    }
    let (mut brokers, registry) =
        three_with_topic(BINARY.as_ref(), &connect, &args, TOPIC, PARTITIONS).await;
    let mut proxies = Vec::new();
    if lost_answers {
        for id in 0..3 {
            let (port, advertised, _, _) = brokers.advertised_ports(id);
            let listen = std::net::SocketAddr::from(([127, 0, 0, 1], advertised));
            let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let idempotent_produce = protocol::ApiKey::IdempotentProduce as i16;
            proxies.push(AckDropper::start(listen, upstream, &[idempotent_produce], 5).await);
        }
    }
    let consumed: Consumed = Arc::default();
    let group = start_group(&connect, &consumed).await;

    let plan = KillPlan {
        topic: TOPIC.into(),
        partitions: PARTITIONS,
        kills,
        wipe_at: Some(kills / 2),
        rate: 300,
        message_bytes: 100,
        idempotence,
    };
    let report = kill_leaders(&mut brokers, &registry, &plan).await;
    let lost: u64 = proxies.iter().map(AckDropper::dropped).sum();
    if lost_answers {
        eprintln!("{lost} produce answers lost");
        assert!(lost > 0, "no answer was lost");
    }
    let mut failovers = report.failovers.clone();
    failovers.sort();
    eprintln!(
        "{} kills; failover p50 {:?}, max {:?}; {} acknowledged, {} not",
        failovers.len(),
        failovers[failovers.len() / 2],
        failovers.last().unwrap(),
        report.acknowledged.values().map(Vec::len).sum::<usize>(),
        report.unacknowledged,
    );

    for partition in 0..PARTITIONS {
        let (state, _) = registry.partition_state(TOPIC, partition).await.unwrap().unwrap();
        let log = read_partition(&brokers.addr(state.leader), TOPIC, partition).await;
        // Every acknowledged message, in the order produced (a retried batch of a producer
        // that is not idempotent may be stored twice; its first copy counts).
        let mut first_seen = BTreeMap::new();
        let mut twice = Vec::new();
        for (index, (_, payload)) in log.iter().enumerate() {
            if first_seen.insert(payload.clone(), index).is_some() {
                twice.push(sequence(payload));
            }
        }
        eprintln!("partition {partition}: {} messages stored twice", twice.len());
        if idempotence {
            assert!(twice.is_empty(), "partition {partition}: stored twice: {twice:?}");
        }
        let acknowledged = &report.acknowledged[&partition];
        let mut last = None;
        for payload in acknowledged {
            let index = first_seen.get(payload).unwrap_or_else(|| {
                panic!("partition {partition}: acknowledged {} is gone", sequence(payload))
            });
            assert!(
                last < Some(*index),
                "partition {partition}: {} out of order",
                sequence(payload)
            );
            last = Some(*index);
        }
        // What the group read was never taken back: the log still has it at that offset (a
        // batch's records share its offset). And it read on to the end.
        let mut by_offset: BTreeMap<i64, BTreeSet<&Vec<u8>>> = BTreeMap::new();
        for (offset, payload) in &log {
            by_offset.entry(*offset).or_default().insert(payload);
        }
        let wanted: BTreeSet<&Vec<u8>> = acknowledged.iter().collect();
        eventually(WAIT, "the group read every acknowledged message", || async {
            let consumed = consumed.lock().unwrap();
            let read: BTreeSet<&Vec<u8>> =
                consumed.iter().filter(|(p, ..)| *p == partition).map(|(.., m)| m).collect();
            wanted.is_subset(&read).then_some(())
        })
        .await;
        for (p, offset, payload) in
            consumed.lock().unwrap().iter().filter(|(p, ..)| *p == partition)
        {
            assert!(
                by_offset.get(offset).is_some_and(|stored| stored.contains(payload)),
                "partition {p} offset {offset} changed"
            );
        }
        // Every replica the same bytes.
        eventually(WAIT, "identical segment files on every replica", || async {
            let replicas: Vec<_> = (0..3)
                .map(|id| segment_files(&brokers.data_dir(id).join(format!("{TOPIC}-{partition}"))))
                .collect();
            replicas.windows(2).all(|w| w[0] == w[1]).then_some(())
        })
        .await;
    }
    if std::env::var_os("TRIBUTARY_DUMP_LOGS").is_some() {
        for id in 0..3 {
            eprintln!("=== broker {id}\n{}", brokers.log(id));
        }
    }
    for member in group {
        member.close().await.unwrap();
    }
}
