//! Replicated partitions in a cluster of three brokers in a real ZooKeeper: every partition
//! has three replicas and needs two in sync; an acks-all producer keeps producing while the
//! leader of a partition is stopped, and every acknowledged message is there, in order, on the
//! new leader — and on every replica, byte for byte, once the old leader is back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use client::{Producer, ProducerConfig, RegistryBrokers};
use protocol::Acks;
use testkit::broker_processes::segment_files;
use testkit::cluster::TestCluster;
use testkit::eventually;
use testkit::metrics::value;

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

/// A broker's metrics page, as its `/metrics` would serve it, parsed.
fn metrics_of(broker: &testkit::broker::TestBroker) -> Vec<testkit::metrics::Sample> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &broker.broker.metrics().registry())
        .unwrap();
    testkit::metrics::parse(&text)
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
    // The new leader's metrics say the partition is short of a replica; one broker controls.
    let leader = cluster.brokers.iter().find(|b| b.broker.config().broker_id == moved.leader);
    let samples = metrics_of(leader.unwrap());
    let p0 = [("topic", TOPIC), ("partition", "0")];
    assert_eq!(value(&samples, "tributary_broker_partition_in_sync_replicas", &p0), 2.0);
    assert_eq!(value(&samples, "tributary_broker_partition_replicas", &p0), 3.0);
    assert_eq!(value(&samples, "tributary_broker_under_replicated_partitions", &[]), 1.0);
    let controllers: f64 = cluster
        .brokers
        .iter()
        .map(|b| value(&metrics_of(b), "tributary_broker_active_controller", &[]))
        .sum();
    assert_eq!(controllers, 1.0, "one controller among the brokers still up");
    for broker in &cluster.brokers {
        assert_eq!(value(&metrics_of(broker), "tributary_broker_offline_partitions", &[]), 0.0);
    }

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
        let contents: Vec<BTreeMap<String, Vec<u8>>> =
            dirs.iter().map(|dir| segment_files(dir)).collect();
        contents.windows(2).all(|w| w[0] == w[1]).then_some(())
    })
    .await;
    producer.close().await;
}

/// A leader cut off from ZooKeeper loses its session; the controller elects another member of
/// the ISR. The old leader, which cannot hear of it, must acknowledge nothing with acks all
/// from then on: its followers have moved to the new leader, and it cannot shrink its ISR
/// without writing the change to ZooKeeper. Healed, it follows the new leader and cuts what
/// it wrote alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_zookeeper_acknowledges_nothing_once_fenced() {
    let upstream = format!("127.0.0.1:{}", testkit::zookeeper::ZooKeeperServer::shared().port);
    let proxy = testkit::proxy::start(upstream.parse().unwrap()).await;
    let proxied = proxy.addr().to_string();
    const ISOLATED: i32 = 2;
    let cluster = TestCluster::start_with(3, move |c| {
        c.replica_lag_ms = 1_000;
        c.ack_timeout_ms = 3_000;
        c.zookeeper_session.zookeeper_session_timeout_ms = Some(2_000);
        if c.broker_id == ISOLATED {
            let connect = c.zookeeper.take().unwrap();
            let chroot = &connect[connect.find('/').unwrap()..];
            c.zookeeper = Some(format!("{proxied}{chroot}"));
        }
    })
    .await;
    let registry = cluster.registry();
    eventually(WAIT, "three brokers registered", || async {
        (registry.brokers().await.ok()?.len() == 3).then_some(())
    })
    .await;
    let configs = [("replication_factor", "3"), ("min_insync_replicas", "2")];
    cluster.brokers[0].connect().await.create_topic(TOPIC, 3, &configs).await.unwrap();
    // The partition the isolated broker leads (leaders are spread over the brokers).
    let (partition, before) =
        eventually(WAIT, "a partition led by the isolated broker", || async {
            for p in 0..3 {
                let (state, _) = registry.partition_state(TOPIC, p).await.ok()??;
                if state.leader == ISOLATED && state.isr.len() == 3 {
                    return Some((p, state));
                }
            }
            None
        })
        .await;
    let isolated = cluster.brokers.iter().find(|b| b.broker.config().broker_id == ISOLATED);
    let conn = isolated.unwrap().connect().await;
    let set = |tag: &str| testkit::broker::message_set(&[tag]);
    // Acknowledged once the isolated broker has taken up the leadership the registry gives it.
    eventually(WAIT, "the isolated broker leading", || async {
        conn.produce(TOPIC, partition, Acks::All, set("before")).await.ok()
    })
    .await;

    proxy.cut();
    let (after, _) = eventually(WAIT, "another leader elected", || async {
        let found = registry.partition_state(TOPIC, partition).await.ok()??;
        (found.0.leader != ISOLATED && found.0.leader >= 0).then_some(found)
    })
    .await;
    assert!(after.leader_epoch > before.leader_epoch);
    for attempt in 0..3 {
        let refused = conn.produce(TOPIC, partition, Acks::All, set("alone")).await;
        assert!(refused.is_err(), "attempt {attempt}: a fenced leader acknowledged {refused:?}");
    }
    let new_leader = cluster.leader_of(TOPIC, partition).await;
    let new_conn = client::Connection::connect(&new_leader).await.unwrap();
    new_conn.produce(TOPIC, partition, Acks::All, set("after")).await.unwrap();

    proxy.heal();
    eventually(WAIT, "the old leader back in the ISR", || async {
        let (s, _) = registry.partition_state(TOPIC, partition).await.ok()??;
        (s.isr.len() == 3).then_some(())
    })
    .await;
    let read = |addr: String| async move {
        let consumer = client::SimpleConsumer::connect(&addr, Default::default()).await.unwrap();
        let fetched = consumer.fetch(TOPIC, partition, 0).await.unwrap();
        fetched.iter().map(|m| m.unwrap().payload.to_vec()).collect::<Vec<_>>()
    };
    let expected = vec![b"before".to_vec(), b"after".to_vec()];
    eventually(WAIT, "the leader serves what was acknowledged", || async {
        (read(new_leader.clone()).await == expected).then_some(())
    })
    .await;
    // The old leader's own copy: what it wrote alone is cut.
    let dir = |id: i32| {
        let broker = cluster.brokers.iter().find(|b| b.broker.config().broker_id == id).unwrap();
        broker.data_dir().join(format!("{TOPIC}-{partition}"))
    };
    eventually(WAIT, "the old leader's log is the new leader's", || async {
        let segments = |id| segment_files(&dir(id));
        (segments(ISOLATED) == segments(after.leader)).then_some(())
    })
    .await;
}
