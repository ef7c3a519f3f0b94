//! What the loader's tests share: a cluster of one broker registered in a real ZooKeeper
//! (a chroot of its own), the registry with the shipped schemas, and page-view events.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use apache_avro::types::Value;
use client::{Producer, ProducerConfig, SimpleConsumer, SimpleConsumerConfig, StaticBrokers};
use cluster::{Coordinator, ZooKeeper, ZooKeeperConfig};
use events::audit::{AUDIT_SUBJECT, AUDIT_TOPIC, AuditRecord};
use object_store::ObjectStore;
use schema_registry::RegistryClient;
use testkit::broker::TestBroker;
use testkit::registry::TestRegistry;
use testkit::zookeeper::ZooKeeperServer;

pub const TOPIC: &str = "page-view";
/// 2025-12-01T00:00:00Z: events are spread over the hours after it.
pub const BASE_TIME_MS: i64 = 1_764_547_200_000;

pub struct Cluster {
    pub zookeeper: String,
    pub coordinator: Arc<dyn Coordinator>,
    pub broker: TestBroker,
    pub registry_server: TestRegistry,
    pub registry: Arc<RegistryClient>,
    pub producer: Producer,
}

impl Cluster {
    /// One run of a loader with `config` against this cluster, into `store`.
    pub async fn run(
        &self,
        config: &hdfs_loader::Config,
        store: &Arc<dyn ObjectStore>,
    ) -> Result<hdfs_loader::RunSummary, hdfs_loader::LoadError> {
        hdfs_loader::run_once(
            config,
            Arc::clone(&self.coordinator),
            Arc::clone(store),
            Arc::clone(&self.registry),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
    }

    pub async fn start(partitions: u32) -> Cluster {
        let zookeeper = ZooKeeperServer::shared().connect_string();
        let connect = zookeeper.clone();
        let broker = TestBroker::start_with(move |config| {
            config.zookeeper = Some(connect);
            config.num_partitions = partitions;
        })
        .await;
        broker
            .connect()
            .await
            .create_topic(TOPIC, partitions as i32, &[])
            .await
            .expect("create topic");
        let coordinator: Arc<dyn Coordinator> =
            ZooKeeper::connect(ZooKeeperConfig::new(zookeeper.clone())).await.expect("zookeeper");
        let registry_server = TestRegistry::start().await;
        let registry = Arc::new(RegistryClient::new(registry_server.url()).expect("registry"));
        let producer = Producer::new(
            ProducerConfig { linger_ms: 1, ..ProducerConfig::default() },
            Arc::new(StaticBrokers::new([broker.addr.clone()])),
        )
        .expect("producer");
        Cluster { zookeeper, coordinator, broker, registry_server, registry, producer }
    }

    pub async fn page_view_schema_id(&self) -> i32 {
        self.registry.latest("page-view-value").await.expect("page-view schema").id
    }

    /// Produces `count` page views with times `BASE_TIME_MS + i * spacing_ms`; returns their ids.
    pub async fn produce_page_views(&self, count: usize, spacing_ms: i64) -> Vec<[u8; 16]> {
        let schema_id = self.page_view_schema_id().await;
        let mut ids = Vec::with_capacity(count);
        let mut pending = Vec::with_capacity(count);
        for _ in 0..count {
            let n = SEQUENCE.fetch_add(1, Ordering::Relaxed) as i64;
            let id = event_id(n);
            let value = page_view(BASE_TIME_MS + n * spacing_ms, id, n);
            let payload = events::envelope::encode_with(&self.registry, schema_id, value)
                .await
                .expect("encode");
            pending.push(self.producer.enqueue(TOPIC, None, &payload).await.expect("enqueue"));
            ids.push(id);
        }
        for sent in pending {
            sent.await.expect("acknowledged");
        }
        ids
    }

    /// The latest `_audit` count of every `(tier, host, topic, window)`.
    pub async fn audit_counts(&self) -> BTreeMap<(String, String, String, i64), i64> {
        let latest = self.registry.latest(AUDIT_SUBJECT).await.expect("audit schema");
        let schema = self.registry.schema(latest.id).await.expect("audit schema");
        let consumer = SimpleConsumer::connect(&self.broker.addr, SimpleConsumerConfig::default())
            .await
            .expect("consumer");
        let mut counts = BTreeMap::new();
        for partition in 0..8 {
            let Ok(end) = consumer.latest_offset(AUDIT_TOPIC, partition).await else { continue };
            let mut offset = 0;
            while offset < end {
                let fetched = consumer.fetch(AUDIT_TOPIC, partition, offset).await.expect("fetch");
                for message in fetched.iter() {
                    let message = message.expect("message");
                    let record =
                        AuditRecord::decode(&message.payload, &schema).expect("audit record");
                    // Counts are cumulative: the largest seen is the latest.
                    let key =
                        (record.tier.to_string(), record.host, record.topic, record.window_start);
                    let count = counts.entry(key).or_insert(0);
                    *count = record.count.max(*count);
                    offset = message.next_offset;
                }
            }
        }
        counts
    }
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

pub fn event_id(n: i64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&n.to_be_bytes());
    id[8..].copy_from_slice(&(std::process::id() as u64).to_be_bytes());
    id
}

/// A page view of the shipped schema (`events/schemas/page-view.avsc`).
pub fn page_view(time_ms: i64, id: [u8; 16], n: i64) -> Value {
    Value::Record(vec![
        (
            "header".into(),
            Value::Record(vec![
                ("time".into(), Value::Long(time_ms)),
                ("server".into(), Value::String("web-1".into())),
                ("service".into(), Value::String("frontend".into())),
                ("id".into(), Value::Fixed(16, id.to_vec())),
            ]),
        ),
        (
            "member_id".into(),
            if n % 3 == 0 {
                Value::Union(0, Box::new(Value::Null))
            } else {
                Value::Union(1, Box::new(Value::Long(n)))
            },
        ),
        ("page_key".into(), Value::String(format!("page-{}", n % 10))),
        ("url".into(), Value::String(format!("https://example.com/p/{n}"))),
        ("referrer".into(), Value::Union(0, Box::new(Value::Null))),
        ("duration_ms".into(), Value::Int((n % 500) as i32)),
    ])
}

/// Positions of the rows under the topic's prefix; panics on a duplicate.
pub async fn unique_positions(store: &Arc<dyn ObjectStore>, topic: &str) -> HashSet<(String, i64)> {
    let rows = hdfs_loader::readback::read_topic(store, topic).await.expect("read back");
    let mut seen = HashSet::with_capacity(rows.positions.len());
    for position in rows.positions {
        assert!(seen.insert(position.clone()), "row {position:?} is visible twice");
    }
    seen
}

/// Every message offset of every partition of `topic` in the broker, as `(label, offset)`.
pub async fn log_positions(
    broker: &TestBroker,
    topic: &str,
    partitions: i32,
) -> HashSet<(String, i64)> {
    let consumer = SimpleConsumer::connect(&broker.addr, SimpleConsumerConfig::default())
        .await
        .expect("consumer");
    let broker_id = broker.broker.config().broker_id;
    let mut positions = HashSet::new();
    for partition in 0..partitions {
        let end = consumer.latest_offset(topic, partition).await.expect("log end");
        let mut offset = 0;
        while offset < end {
            let fetched = consumer.fetch(topic, partition, offset).await.expect("fetch");
            for message in fetched.iter() {
                let message = message.expect("message");
                positions.insert((format!("{broker_id}-{partition}"), message.offset));
                offset = message.next_offset;
            }
        }
    }
    positions
}

/// The sequence number `produce_page_views` put in an event id.
pub fn event_sequence_of(id: &[u8; 16]) -> i64 {
    i64::from_be_bytes(id[..8].try_into().expect("8 bytes"))
}
