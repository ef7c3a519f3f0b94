//! A cluster for tests: brokers served in this process, registered in a chroot of their own of
//! the shared real ZooKeeper, as a deployment's brokers are; and the helpers the tests of every
//! tier use on it — create a topic spread over the brokers, produce plain messages to its
//! partitions' leaders, read a topic's payloads back or wait until they are all there.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use broker::BrokerConfig;
use bytes::Bytes;
use client::SimpleConsumer;
use cluster::{Coordinator, Registry, ZooKeeper, ZooKeeperConfig};
use protocol::Acks;

use crate::broker::{TestBroker, message_set, read_partition};
use crate::zookeeper::ZooKeeperServer;

/// How long the helpers wait for the registry to show a change, or for payloads to arrive.
const WAIT: Duration = Duration::from_secs(60);
/// The brokers' ZooKeeper session timeout: short, so a killed broker leaves soon.
const SESSION_TIMEOUT_MS: u64 = 4_000;

/// Brokers registered under one chroot of the shared ZooKeeper.
pub struct TestCluster {
    /// `host:port/chroot` of the cluster.
    pub connect: String,
    pub brokers: Vec<TestBroker>,
    /// A session of this process in the cluster's chroot.
    pub coordinator: Arc<dyn Coordinator>,
    configure: Arc<dyn Fn(&mut BrokerConfig) + Send + Sync>,
    /// What the helpers connect with to brokers that speak TLS.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl TestCluster {
    /// `brokers` brokers with ids `0..brokers`, one partition per topic by default.
    pub async fn start(brokers: i32) -> TestCluster {
        TestCluster::start_with(brokers, |_| {}).await
    }

    /// Like [`TestCluster::start`], each broker's config changed by `configure` too.
    pub async fn start_with(
        brokers: i32,
        configure: impl Fn(&mut BrokerConfig) + Send + Sync + 'static,
    ) -> TestCluster {
        let connect = ZooKeeperServer::shared().connect_string();
        let coordinator = session(&connect).await;
        let mut cluster = TestCluster {
            connect,
            brokers: Vec::new(),
            coordinator,
            configure: Arc::new(configure),
            tls: None,
        };
        for id in 0..brokers {
            cluster.add_broker(id).await;
        }
        cluster
    }

    /// Brokers that speak mutual TLS only, each with a certificate `broker-{id}` of `pki`, and
    /// `acl` as their ACL file if given; the helpers connect as principal `test`.
    pub async fn start_tls(
        brokers: i32,
        pki: &crate::tls::Pki,
        acl: Option<std::path::PathBuf>,
    ) -> TestCluster {
        let identities: Vec<crate::tls::Identity> =
            (0..brokers).map(|id| pki.identity(&format!("broker-{id}"))).collect();
        let ca = pki.ca().to_owned();
        let mut cluster = TestCluster::start_with(0, move |c| {
            let identity = &identities[c.broker_id as usize];
            c.tls.tls_cert = Some(identity.cert.clone());
            c.tls.tls_key = Some(identity.key.clone());
            c.tls.tls_client_ca = Some(ca.clone());
            c.acl_file = acl.clone();
        })
        .await;
        let test = pki.identity("test");
        cluster.tls =
            service::tls::client_from_settings(Some(pki.ca()), Some(&test.cert), Some(&test.key))
                .expect("the test's client TLS");
        for id in 0..brokers {
            cluster.add_broker(id).await;
        }
        cluster
    }

    fn consumer_config(&self) -> client::SimpleConsumerConfig {
        client::SimpleConsumerConfig { tls: self.tls.clone(), ..Default::default() }
    }

    async fn connection(&self, addr: &str) -> client::Connection {
        let config = client::ConnectionConfig::with_tls(self.tls.clone());
        client::Connection::connect_with(addr, config).await.expect("connect to a broker")
    }

    /// Starts broker `id` in this cluster; returns it.
    pub async fn add_broker(&mut self, id: i32) -> &TestBroker {
        let broker = TestBroker::start_with(self.broker_config(id)).await;
        self.brokers.push(broker);
        self.brokers.last().expect("just added")
    }

    /// Stops broker `index` cleanly (as on SIGTERM); [`TestCluster::start_again`] brings it
    /// back on the same address and data.
    pub async fn stop_broker(&mut self, index: usize) -> StoppedBroker {
        let broker = self.brokers.remove(index);
        let (id, addr) = (broker.broker.config().broker_id, broker.addr.clone());
        StoppedBroker { id, addr, data_dir: broker.stop().await }
    }

    /// Starts a stopped broker again, on its address and data directory.
    pub async fn start_again(&mut self, stopped: StoppedBroker) -> &TestBroker {
        let configure = self.broker_config(stopped.id);
        let broker = TestBroker::start_at(stopped.data_dir, &stopped.addr, configure).await;
        self.brokers.push(broker);
        self.brokers.last().expect("just added")
    }

    fn broker_config(&self, id: i32) -> impl FnOnce(&mut BrokerConfig) + use<> {
        let (connect, configure) = (self.connect.clone(), Arc::clone(&self.configure));
        move |c: &mut BrokerConfig| {
            c.broker_id = id;
            c.zookeeper = Some(connect);
            c.zookeeper_session.zookeeper_session_timeout_ms = Some(SESSION_TIMEOUT_MS);
            c.num_partitions = 1;
            configure(c);
        }
    }

    /// A new ZooKeeper session in the cluster's chroot.
    pub async fn session(&self) -> Arc<dyn Coordinator> {
        session(&self.connect).await
    }

    pub fn registry(&self) -> Registry {
        Registry::new(Arc::clone(&self.coordinator))
    }

    /// The first broker's address.
    pub fn addr(&self) -> &str {
        &self.brokers[0].addr
    }

    /// Creates `topic` with `partitions` partitions per broker (spread over the brokers by the
    /// cluster) and waits until every partition's leader serves it.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let total = partitions * self.brokers.len() as i32;
        let conn = self.connection(&self.brokers[0].addr).await;
        conn.create_topic(topic, total, &[]).await.expect("create");
        for partition in 0..total {
            self.leader_of(topic, partition).await;
        }
    }

    /// The address of `topic`'s `partition`'s leader, once it serves the partition.
    pub async fn leader_of(&self, topic: &str, partition: i32) -> String {
        let registry = self.registry();
        crate::eventually(WAIT, &format!("a leader serving {topic}-{partition}"), || async {
            let (_, leader) = registry.leader(topic, partition).await.ok()??;
            let consumer =
                SimpleConsumer::connect(&leader.addr(), self.consumer_config()).await.ok()?;
            consumer.latest_offset(topic, partition).await.ok()?;
            Some(leader.addr())
        })
        .await
    }

    /// Produces each payload as one plain message, in sets of 50 spread over the topic's
    /// partitions (`partitions` per broker), each to its leader.
    pub async fn produce(&self, topic: &str, partitions: i32, payloads: &[Bytes]) {
        let total = partitions * self.brokers.len() as i32;
        for (i, chunk) in payloads.chunks(50).enumerate() {
            let partition = i as i32 % total;
            let leader = self.leader_of(topic, partition).await;
            self.connection(&leader)
                .await
                .produce(topic, partition, Acks::Written, message_set(chunk))
                .await
                .expect("produce");
        }
    }

    /// Every payload of `topic`, from each partition's leader, wrappers inflated.
    pub async fn payloads(&self, topic: &str) -> Vec<Bytes> {
        let registry = self.registry();
        let mut payloads = Vec::new();
        for partition in registry.partitions(topic).await.expect("partitions") {
            let Ok(Some((_, leader))) = registry.leader(topic, partition).await else { continue };
            let Ok(consumer) =
                SimpleConsumer::connect(&leader.addr(), self.consumer_config()).await
            else {
                continue;
            };
            let messages = read_partition(&consumer, topic, partition).await;
            payloads.extend(messages.into_iter().map(|message| message.payload));
        }
        payloads
    }

    /// Waits until the cluster holds every payload of `expected` in `topic` (duplicates
    /// allowed).
    pub async fn wait_for_all(&self, topic: &str, expected: &[Bytes], what: &str) {
        let expected: BTreeSet<Bytes> = expected.iter().cloned().collect();
        crate::eventually(WAIT, what, || async {
            let got: BTreeSet<Bytes> = self.payloads(topic).await.into_iter().collect();
            let missing = expected.difference(&got).count();
            (missing == 0).then_some(())
        })
        .await;
    }
}

/// A broker of a [`TestCluster`] that was stopped, to start again.
pub struct StoppedBroker {
    pub id: i32,
    pub addr: String,
    pub data_dir: tempfile::TempDir,
}

async fn session(connect: &str) -> Arc<dyn Coordinator> {
    let config =
        ZooKeeperConfig { session_timeout_ms: SESSION_TIMEOUT_MS, ..ZooKeeperConfig::new(connect) };
    ZooKeeper::connect(config).await.expect("a ZooKeeper session")
}
