//! A cluster for tests: brokers served in this process, registered in a chroot of their own of
//! the shared real ZooKeeper, as a deployment's brokers are; and the helpers the tests of every
//! tier use on it — create a topic on every broker, produce plain messages spread over them,
//! read a topic's payloads back.

use std::sync::Arc;
use std::time::Duration;

use broker::BrokerConfig;
use bytes::Bytes;
use client::SimpleConsumer;
use cluster::{Coordinator, Registry, ZooKeeper, ZooKeeperConfig};
use protocol::Acks;

use crate::broker::{TestBroker, message_set};
use crate::zookeeper::ZooKeeperServer;

/// How long the helpers wait for the registry to show a change.
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
        };
        for id in 0..brokers {
            cluster.add_broker(id).await;
        }
        cluster
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
            c.zookeeper_session_timeout_ms = SESSION_TIMEOUT_MS;
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

    /// Creates `topic` with `partitions` on every broker and waits until it is registered.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        for broker in &self.brokers {
            broker.connect().await.create_topic(topic, partitions, &[]).await.expect("create");
        }
        let registry = self.registry();
        let expected = self.brokers.len() * partitions as usize;
        crate::eventually(WAIT, "the topic registered", || async {
            (registry.partitions(topic).await.ok()?.len() == expected).then_some(())
        })
        .await;
    }

    /// Produces each payload as one plain message, in sets of 50 spread over the brokers and
    /// their `partitions` partitions.
    pub async fn produce(&self, topic: &str, partitions: i32, payloads: &[Bytes]) {
        for (i, chunk) in payloads.chunks(50).enumerate() {
            let broker = &self.brokers[i % self.brokers.len()];
            let partition = (i / self.brokers.len()) as i32 % partitions;
            broker
                .connect()
                .await
                .produce(topic, partition, Acks::Written, message_set(chunk))
                .await
                .expect("produce");
        }
    }

    /// Every payload of `topic` on every registered broker, wrappers inflated.
    pub async fn payloads(&self, topic: &str) -> Vec<Bytes> {
        let registry = self.registry();
        let brokers = registry.brokers().await.expect("brokers");
        let mut payloads = Vec::new();
        for (id, partitions) in registry.topic_brokers(topic).await.expect("topic brokers") {
            let Some(info) = brokers.get(&id) else { continue };
            let Ok(consumer) = SimpleConsumer::connect(&info.addr(), Default::default()).await
            else {
                continue;
            };
            for partition in 0..partitions as i32 {
                let mut offset = 0;
                loop {
                    let Ok(fetched) = consumer.fetch(topic, partition, offset).await else { break };
                    if fetched.is_empty() {
                        break;
                    }
                    let mut messages = fetched.iter();
                    for message in messages.by_ref() {
                        payloads.push(message.expect("a valid message").payload);
                    }
                    offset = messages.next_offset();
                }
            }
        }
        payloads
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
