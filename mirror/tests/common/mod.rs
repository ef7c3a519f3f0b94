//! Clusters for the mirror's tests: in-process brokers registered in a real ZooKeeper, one
//! chroot per cluster, and helpers that read a whole topic back by content.

#![allow(dead_code)] // each test binary uses its own part of these helpers

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use client::SimpleConsumer;
use cluster::{Coordinator, Registry, ZooKeeper, ZooKeeperConfig};
use events::audit::{AUDIT_TOPIC, AuditRecord, Tier};
use protocol::{Acks, Codec};
use schema_registry::RegistryClient;
use testkit::broker::{TestBroker, message_set};
use testkit::zookeeper::ZooKeeperServer;

pub const WAIT: Duration = Duration::from_secs(60);

/// Brokers registered under one chroot of the shared ZooKeeper.
pub struct Cluster {
    pub connect: String,
    pub brokers: Vec<TestBroker>,
}

impl Cluster {
    pub async fn start(brokers: i32) -> Cluster {
        let connect = ZooKeeperServer::shared().connect_string();
        let mut started = Vec::new();
        for id in 0..brokers {
            started.push(start_broker(&connect, id, None).await);
        }
        Cluster { connect, brokers: started }
    }

    pub async fn session(&self) -> Arc<dyn Coordinator> {
        let mut config = ZooKeeperConfig::new(self.connect.clone());
        config.session_timeout_ms = 4_000;
        ZooKeeper::connect(config).await.expect("zookeeper session")
    }

    pub async fn registry(&self) -> Registry {
        Registry::new(self.session().await)
    }

    /// Creates `topic` with `partitions` on every broker and waits until it is registered.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        for broker in &self.brokers {
            broker.connect().await.create_topic(topic, partitions, &[]).await.unwrap();
        }
        let registry = self.registry().await;
        let expected = self.brokers.len() * partitions as usize;
        testkit::eventually(WAIT, "topic registered", || async {
            (registry.partitions(topic).await.ok()?.len() == expected).then_some(())
        })
        .await;
    }

    /// Produces each payload as one plain message, spread over brokers and partitions.
    pub async fn produce(&self, topic: &str, partitions: i32, payloads: &[Bytes]) {
        for (i, chunk) in payloads.chunks(50).enumerate() {
            let broker = &self.brokers[i % self.brokers.len()];
            let partition = (i / self.brokers.len()) as i32 % partitions;
            broker
                .connect()
                .await
                .produce(topic, partition, Acks::Written, message_set(chunk))
                .await
                .unwrap();
        }
    }

    /// Every payload of `topic` on every broker, wrappers inflated.
    pub async fn payloads(&self, topic: &str) -> Vec<Bytes> {
        let registry = self.registry().await;
        let brokers = registry.brokers().await.unwrap();
        let mut payloads = Vec::new();
        for (id, partitions) in registry.topic_brokers(topic).await.unwrap() {
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
                        payloads.push(message.unwrap().payload);
                    }
                    offset = messages.next_offset();
                }
            }
        }
        payloads
    }
}

/// A broker of the cluster at `connect` (on `addr` with `data_dir`, for a restart).
pub async fn start_broker(
    connect: &str,
    id: i32,
    restart: Option<(tempfile::TempDir, String)>,
) -> TestBroker {
    let configure = |c: &mut broker::BrokerConfig| {
        c.broker_id = id;
        c.zookeeper = Some(connect.to_owned());
        c.zookeeper_session_timeout_ms = 4_000;
        c.num_partitions = 1;
    };
    match restart {
        Some((dir, addr)) => TestBroker::start_at(dir, &addr, configure).await,
        None => TestBroker::start_with(configure).await,
    }
}

/// An event envelope with `header.time` = `time_ms` and `body` after the header.
pub fn event(time_ms: i64, body: &str) -> Bytes {
    let mut payload = vec![0, 0, 0, 0, 1];
    let mut zigzag = ((time_ms << 1) ^ (time_ms >> 63)) as u64;
    loop {
        let byte = (zigzag & 0x7f) as u8;
        zigzag >>= 7;
        if zigzag == 0 {
            payload.push(byte);
            break;
        }
        payload.push(byte | 0x80);
    }
    payload.extend_from_slice(b"\x08host\x06web");
    payload.extend_from_slice(&[7; 16]);
    payload.extend_from_slice(body.as_bytes());
    Bytes::from(payload)
}

/// `count` events of `topic` from `cluster`, each with a unique body.
pub fn events(cluster: &str, topic: &str, from: usize, count: usize, time_ms: i64) -> Vec<Bytes> {
    (from..from + count).map(|i| event(time_ms, &format!("{cluster}/{topic}/{i}"))).collect()
}

/// One compressed wrapper holding `payloads`.
pub fn wrapper(codec: Codec, payloads: &[Bytes]) -> Bytes {
    let inner = message_set(payloads);
    let mut set = BytesMut::new();
    protocol::encode_message(&mut set, codec, &client::compress(codec, &inner).unwrap());
    set.freeze()
}

/// Waits until `cluster` holds every payload of `expected` in `topic` (duplicates allowed).
pub async fn wait_for_all(cluster: &Cluster, topic: &str, expected: &[Bytes], what: &str) {
    let expected: BTreeSet<Bytes> = expected.iter().cloned().collect();
    testkit::eventually(WAIT, what, || async {
        let got: BTreeSet<Bytes> = cluster.payloads(topic).await.into_iter().collect();
        let missing = expected.difference(&got).count();
        (missing == 0).then_some(())
    })
    .await;
}

/// The latest mirror-tier count per `(host, topic, window)` in the target's `_audit`.
pub async fn mirror_audit(
    cluster: &Cluster,
    registry: &RegistryClient,
) -> BTreeMap<(String, String, i64), AuditRecord> {
    let mut latest = BTreeMap::new();
    for payload in cluster.payloads(AUDIT_TOPIC).await {
        let Ok((_, value)) = events::envelope::decode_with(registry, &payload).await else {
            continue;
        };
        let record = AuditRecord::from_value(&value).unwrap();
        if record.tier != Tier::Mirror {
            continue;
        }
        let key = (record.host.clone(), record.topic.clone(), record.window_start);
        let newer = latest.get(&key).is_none_or(|r: &AuditRecord| r.count <= record.count);
        if newer {
            latest.insert(key, record);
        }
    }
    latest
}
