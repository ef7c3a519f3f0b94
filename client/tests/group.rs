//! The group consumer on both coordination backends: a real ZooKeeper server and the
//! embedded tree, with two real brokers in one cluster holding the 8 partitions of one topic.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use client::{GroupConsumer, GroupConsumerConfig, StreamId, assign};
use cluster::{Coordinator, Embedded, Registry, ZooKeeper, ZooKeeperConfig};
use protocol::Acks;
use testkit::broker::{TestBroker, message_set};
use testkit::eventually;
use testkit::zookeeper::ZooKeeperServer;

const TOPIC: &str = "events";
const GROUP: &str = "readers";
const WAIT: Duration = Duration::from_secs(30);

/// Two brokers in one cluster, with the 8 partitions of `TOPIC` spread over them.
struct Cluster {
    brokers: Vec<TestBroker>,
    service: Service,
    /// Each partition's leader, by partition.
    leaders: BTreeMap<i32, String>,
}

#[derive(Clone)]
enum Service {
    ZooKeeper(String),
    Embedded(Embedded),
}

impl Service {
    async fn session(&self) -> Arc<dyn Coordinator> {
        match self {
            Service::ZooKeeper(connect) => {
                let mut config = ZooKeeperConfig::new(connect.clone());
                config.session_timeout_ms = 2_000;
                ZooKeeper::connect(config).await.unwrap()
            }
            Service::Embedded(tree) => tree.session("/tributary/live-a").unwrap(),
        }
    }
}

impl Cluster {
    async fn start(zookeeper: bool) -> Cluster {
        let service = if zookeeper {
            Service::ZooKeeper(ZooKeeperServer::shared().connect_string())
        } else {
            Service::Embedded(Embedded::new())
        };
        let mut brokers = Vec::new();
        for id in 0..2 {
            let configure = |c: &mut broker::BrokerConfig| {
                c.broker_id = id;
                c.flush_messages = 1;
            };
            let broker = match &service {
                Service::ZooKeeper(connect) => {
                    let connect = connect.clone();
                    TestBroker::start_with(|c| {
                        configure(c);
                        c.zookeeper = Some(connect);
                    })
                    .await
                }
                Service::Embedded(_) => {
                    TestBroker::start_registered_in(service.session().await, configure).await
                }
            };
            brokers.push(broker);
        }
        let registry = Registry::new(service.session().await);
        eventually(WAIT, "both brokers registered", || async {
            (registry.brokers().await.unwrap().len() == 2).then_some(())
        })
        .await;
        brokers[0].connect().await.create_topic(TOPIC, 8, &[]).await.unwrap();
        let leaders = eventually(WAIT, "8 partitions led", || async {
            let metadata = brokers[0].connect().await.metadata(&[TOPIC]).await.ok()?;
            let topic = metadata.topic(TOPIC)?;
            let leaders: BTreeMap<i32, String> = topic
                .partitions
                .iter()
                .filter_map(|p| Some((p.partition, metadata.broker(p.leader)?.addr())))
                .collect();
            if leaders.len() != 8 {
                return None;
            }
            // Each leader has taken up its leadership: it answers for its partition.
            for (partition, addr) in &leaders {
                let conn = client::Connection::connect(addr).await.ok()?;
                conn.offsets(TOPIC, *partition, protocol::OFFSETS_LATEST, 1).await.ok()?;
            }
            Some(leaders)
        })
        .await;
        Cluster { brokers, service, leaders }
    }

    async fn registry(&self) -> Registry {
        Registry::new(self.service.session().await)
    }

    /// A consumer in its own session, as if in its own process.
    async fn consumer(&self, id: &str) -> (GroupConsumer, Vec<client::MessageStream>) {
        let mut config = GroupConsumerConfig::new(GROUP);
        config.consumer_id = Some(id.into());
        config.auto_commit_ms = 100;
        config.fetch_wait_ms = 20;
        let consumer = GroupConsumer::connect(self.registry().await, config).unwrap();
        let mut streams = consumer
            .create_message_streams(&BTreeMap::from([(TOPIC.to_owned(), 1)]))
            .await
            .unwrap();
        (consumer, streams.remove(TOPIC).unwrap())
    }

    async fn produce(&self, payloads: &[String]) {
        for (i, payload) in payloads.iter().enumerate() {
            let partition = (i % 8) as i32;
            let conn = client::Connection::connect(&self.leaders[&partition]).await.unwrap();
            conn.produce(TOPIC, partition, Acks::Flushed, message_set(&[payload])).await.unwrap();
        }
    }
}

/// Waits until every partition has exactly the owner Algorithm 1 gives it for `members`.
async fn assert_assignment(registry: &Registry, members: &[&str]) {
    let partitions = registry.partitions(TOPIC).await.unwrap();
    let streams: Vec<StreamId> =
        members.iter().map(|m| StreamId { consumer: (*m).into(), stream: 0 }).collect();
    let expected: BTreeMap<i32, String> = assign(&partitions, &streams)
        .into_iter()
        .flat_map(|(stream, share)| share.into_iter().map(move |p| (p, stream.to_string())))
        .collect();
    assert_eq!(expected.len(), 8);
    let what = format!("assignment for {members:?}");
    eventually(WAIT, &what, || async {
        let owners = registry.owners(GROUP, TOPIC).await.unwrap();
        let members_now: Vec<String> =
            registry.consumers(GROUP).await.unwrap().into_keys().collect();
        (owners == expected && members_now == members).then_some(())
    })
    .await;
}

async fn membership_changes_keep_one_owner_per_partition(zookeeper: bool) {
    let cluster = Cluster::start(zookeeper).await;
    let registry = cluster.registry().await;
    let (c1, _s1) = cluster.consumer("c1").await;
    assert_assignment(&registry, &["c1"]).await;
    assert_eq!(c1.owned_partitions().await.len(), 8);
    let (c2, _s2) = cluster.consumer("c2").await;
    let (c3, _s3) = cluster.consumer("c3").await;
    assert_assignment(&registry, &["c1", "c2", "c3"]).await;
    c2.close().await.unwrap();
    assert_assignment(&registry, &["c1", "c3"]).await;
    let shares = [c1.owned_partitions().await.len(), c3.owned_partitions().await.len()];
    assert_eq!(shares, [4, 4]);
    c1.close().await.unwrap();
    c3.close().await.unwrap();
}

/// Reads every stream into `seen` until the test ends.
fn drain(streams: Vec<client::MessageStream>, seen: Arc<Mutex<Vec<Bytes>>>) {
    for mut stream in streams {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Some(message) = stream.next_message().await {
                seen.lock().unwrap().push(message.unwrap().payload);
            }
        });
    }
}

async fn a_crashed_consumer_loses_nothing(zookeeper: bool) {
    let cluster = Cluster::start(zookeeper).await;
    let payloads: Vec<String> = (0..400).map(|i| format!("event-{i}")).collect();
    cluster.produce(&payloads[..200]).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c1, s1) = cluster.consumer("c1").await;
    drain(s1, Arc::clone(&seen));
    let (c2, s2) = cluster.consumer("c2").await;
    drain(s2, Arc::clone(&seen));
    let registry = cluster.registry().await;
    assert_assignment(&registry, &["c1", "c2"]).await;
    eventually(WAIT, "first half consumed", || async {
        (seen.lock().unwrap().len() >= 200).then_some(())
    })
    .await;
    cluster.produce(&payloads[200..300]).await;
    // c1 dies: no commit, no release; its session ends with it.
    drop(c1);
    cluster.produce(&payloads[300..]).await;
    assert_assignment(&registry, &["c2"]).await;
    let expected: BTreeSet<Bytes> = payloads.iter().map(|p| Bytes::from(p.clone())).collect();
    eventually(WAIT, "every message consumed", || async {
        let got: BTreeSet<Bytes> = seen.lock().unwrap().iter().cloned().collect();
        (got == expected).then_some(())
    })
    .await;
    let total = seen.lock().unwrap().len();
    assert!(
        total < 2 * payloads.len(),
        "duplicates are bounded: {total} deliveries of {}",
        payloads.len()
    );
    c2.close().await.unwrap();
}

/// Idle fetchers park long polls instead of polling, and new data reaches the stream at once,
/// long before `fetch_wait_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_fetchers_wait_in_long_polls_and_wake_on_new_data() {
    let cluster = Cluster::start(false).await;
    let mut config = GroupConsumerConfig::new(GROUP);
    config.consumer_id = Some("solo".into());
    config.fetch_wait_ms = 60_000;
    let consumer = GroupConsumer::connect(cluster.registry().await, config).unwrap();
    let mut streams =
        consumer.create_message_streams(&BTreeMap::from([(TOPIC.to_owned(), 1)])).await.unwrap();
    let mut stream = streams.remove(TOPIC).unwrap().remove(0);
    let parked = || cluster.brokers.iter().map(|b| b.broker.parked_fetches()).sum::<usize>();
    eventually(WAIT, "a long poll per partition", || async { (parked() == 8).then_some(()) }).await;
    let fetches = || {
        let metric = |b: &TestBroker| b.broker.metrics().fetch_requests();
        cluster.brokers.iter().map(metric).sum::<u64>()
    };
    let before = fetches();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fetches(), before, "an idle consumer sends no requests");
    let started = std::time::Instant::now();
    let payloads: Vec<String> = (0..8).map(|i| format!("fresh-{i}")).collect();
    cluster.produce(&payloads).await;
    let mut got = BTreeSet::new();
    while got.len() < payloads.len() {
        let message = tokio::time::timeout(WAIT, stream.next_message()).await.unwrap();
        got.insert(message.unwrap().unwrap().payload);
    }
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    consumer.close().await.unwrap();
}

mod zookeeper_backend {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn membership_changes_keep_one_owner_per_partition() {
        super::membership_changes_keep_one_owner_per_partition(true).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crashed_consumer_loses_nothing() {
        super::a_crashed_consumer_loses_nothing(true).await
    }
}

mod embedded_backend {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn membership_changes_keep_one_owner_per_partition() {
        super::membership_changes_keep_one_owner_per_partition(false).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crashed_consumer_loses_nothing() {
        super::a_crashed_consumer_loses_nothing(false).await
    }
}
