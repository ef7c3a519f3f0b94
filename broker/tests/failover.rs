//! Replicated partitions in a cluster of three brokers in a real ZooKeeper: every partition
//! has three replicas and needs two in sync; an acks-all producer keeps producing while the
//! leader of a partition is stopped, and every acknowledged message is there, in order, on the
//! new leader — and on every replica, byte for byte, once the old leader is back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use client::{Producer, ProducerConfig, RegistryBrokers};
use protocol::Acks;
use testkit::cluster::TestCluster;
use testkit::eventually;

const TOPIC: &str = "replicated";
const WAIT: Duration = Duration::from_secs(60);

fn producer(cluster: &TestCluster) -> Producer {
    let config = ProducerConfig {
        acks: Acks::All,
        linger_ms: 1,
        retries_max: 50,
        retry_backoff_ms: 50,
        retry_backoff_max_ms: 500,
        metadata_refresh_ms: 500,
        ..ProducerConfig::default()
    };
    Producer::new(config, Arc::new(RegistryBrokers::new(cluster.registry()))).unwrap()
}

/// The payloads of partition 0 as its leader serves them, in log order.
async fn partition_payloads(cluster: &TestCluster) -> Vec<Vec<u8>> {
    let leader = cluster.leader_of(TOPIC, 0).await;
    let consumer = client::SimpleConsumer::connect(&leader, Default::default()).await.unwrap();
    let end = consumer.latest_offset(TOPIC, 0).await.unwrap();
    let mut offset = 0;
    let mut payloads = Vec::new();
    while offset < end {
        let fetched = consumer.fetch(TOPIC, 0, offset).await.unwrap();
        for message in fetched.iter() {
            let message = message.unwrap();
            payloads.push(message.payload.to_vec());
            offset = message.next_offset;
        }
    }
    payloads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_the_leaders_loss() {
    let cluster = TestCluster::start_with(3, |c| {
        c.replica_lag_ms = 2_000;
        c.flush_ms = 5;
    })
    .await;
    let registry = cluster.registry();
    eventually(WAIT, "three brokers registered", || async {
        (registry.brokers().await.ok()?.len() == 3).then_some(())
    })
    .await;
    let configs = [("replication_factor", "3"), ("min_insync_replicas", "2")];
    cluster.brokers[0].connect().await.create_topic(TOPIC, 1, &configs).await.unwrap();
    let (state, _) = registry.partition_state(TOPIC, 0).await.unwrap().unwrap();
    assert_eq!(state.isr.len(), 3, "{state:?}");
    cluster.leader_of(TOPIC, 0).await;

    let producer = producer(&cluster);
    let mut acknowledged = Vec::new();
    for i in 0..200u32 {
        let payload = format!("m{i:05}");
        producer.send(TOPIC, None, payload.as_bytes()).await.unwrap();
        acknowledged.push(payload.into_bytes());
    }
    // Stop the leader: the controller elects another member of the ISR.
    let mut cluster = cluster;
    let old_leader = state.leader;
    let index = cluster.brokers.iter().position(|b| b.broker.config().broker_id == old_leader);
    let stopped = cluster.stop_broker(index.unwrap()).await;
    let (moved, _) = eventually(WAIT, "a new leader", || async {
        let found = registry.partition_state(TOPIC, 0).await.ok()??;
        (found.0.leader != old_leader && found.0.leader >= 0).then_some(found)
    })
    .await;
    assert_eq!(moved.leader_epoch, state.leader_epoch + 1);
    for i in 200..400u32 {
        let payload = format!("m{i:05}");
        producer.send(TOPIC, None, payload.as_bytes()).await.unwrap();
        acknowledged.push(payload.into_bytes());
    }
    // Acknowledged once in the ISR; visible to a consumer once flushed too (flush_ms 5).
    let served = eventually(WAIT, "every acknowledged message visible", || async {
        let payloads = partition_payloads(&cluster).await;
        (payloads.len() >= acknowledged.len()).then_some(payloads)
    })
    .await;
    assert_eq!(served, acknowledged, "every acknowledged message once, in order");

    // The old leader comes back as a follower and catches up: every replica the same files.
    cluster.start_again(stopped).await;
    eventually(WAIT, "all three in sync again", || async {
        let (s, _) = registry.partition_state(TOPIC, 0).await.ok()??;
        (s.isr.len() == 3).then_some(())
    })
    .await;
    let dirs: Vec<std::path::PathBuf> =
        cluster.brokers.iter().map(|b| b.data_dir().join(format!("{TOPIC}-0"))).collect();
    eventually(WAIT, "identical segment files", || async {
        let contents: Vec<BTreeMap<String, Vec<u8>>> = dirs
            .iter()
            .map(|dir| {
                std::fs::read_dir(dir)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .map(|p| {
                        (
                            p.file_name().unwrap().to_string_lossy().into_owned(),
                            std::fs::read(&p).unwrap(),
                        )
                    })
                    .collect()
            })
            .collect();
        contents.windows(2).all(|w| w[0] == w[1]).then_some(())
    })
    .await;
    producer.close().await;
}
