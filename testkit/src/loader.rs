//! What the loader's tests share (feature `loader`): a cluster of one broker registered in a
//! real ZooKeeper (a chroot of its own), the registry with the shipped schemas, page-view
//! events, and a loader run against them; and the rows a load left in a store.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use client::{Producer, ProducerConfig, SimpleConsumer, SimpleConsumerConfig, StaticBrokers};
use cluster::Coordinator;
use events::audit::{AUDIT_SUBJECT, AUDIT_TOPIC, AuditRecord};
use object_store::ObjectStore;
use schema_registry::RegistryClient;

use crate::broker::{TestBroker, read_partition};
use crate::cluster::TestCluster;
use crate::events::{event_id, page_view};
use crate::registry::TestRegistry;

pub const TOPIC: &str = "page-view";
/// 2025-12-01T00:00:00Z: events are spread over the hours after it.
pub const BASE_TIME_MS: i64 = 1_764_547_200_000;

pub struct Cluster {
    pub zookeeper: String,
    pub coordinator: Arc<dyn Coordinator>,
    /// The analytics cluster: one broker.
    pub brokers: TestCluster,
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
        let brokers = TestCluster::start_with(1, move |c| c.num_partitions = partitions).await;
        Cluster::around(brokers, partitions, None).await
    }

    /// Like [`Cluster::start`], its broker speaking mutual TLS only (certificates of `pki`).
    pub async fn start_tls(partitions: u32, pki: &crate::tls::Pki) -> Cluster {
        let brokers = TestCluster::start_tls(1, pki, None).await;
        let me = pki.identity("producer");
        let tls = service::tls::client_from_settings(Some(pki.ca()), Some(&me.cert), Some(&me.key))
            .expect("client TLS");
        Cluster::around(brokers, partitions, tls).await
    }

    /// The rest of a cluster of `brokers`: the topic of `partitions` partitions, a session, the
    /// registry, and a producer that connects with `tls` if given.
    async fn around(
        brokers: TestCluster,
        partitions: u32,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Cluster {
        brokers.create_topic(TOPIC, partitions as i32).await;
        let (zookeeper, coordinator) = (brokers.connect.clone(), brokers.session().await);
        let registry_server = TestRegistry::start().await;
        let registry = Arc::new(RegistryClient::new(registry_server.url()).expect("registry"));
        // Plain messages, one per event: the loader's tests name each row by its message's
        // offset (an idempotent producer's batch is one message; see `idempotent_producer`).
        let producer = Producer::new(
            ProducerConfig {
                linger_ms: 1,
                tls: tls.clone(),
                idempotence: false,
                ..ProducerConfig::default()
            },
            Arc::new(StaticBrokers::new([brokers.addr().to_owned()]).with_tls(tls)),
        )
        .expect("producer");
        Cluster { zookeeper, coordinator, brokers, registry_server, registry, producer }
    }

    /// The cluster's one broker.
    pub fn broker(&self) -> &TestBroker {
        &self.brokers.brokers[0]
    }

    pub async fn page_view_schema_id(&self) -> i32 {
        self.registry.latest("page-view-value").await.expect("page-view schema").id
    }

    /// A producer of the cluster's broker that sends idempotent batches (the default's): each
    /// batch one magic-2 message, its records at one offset.
    pub fn idempotent_producer(&self) -> Producer {
        let config = ProducerConfig { linger_ms: 5, ..ProducerConfig::default() };
        let brokers = Arc::new(StaticBrokers::new([self.brokers.addr().to_owned()]));
        Producer::new(config, brokers).expect("producer")
    }

    /// Produces `count` page views with times `BASE_TIME_MS + i * spacing_ms`; returns their ids.
    pub async fn produce_page_views(&self, count: usize, spacing_ms: i64) -> Vec<[u8; 16]> {
        self.produce_page_views_with(&self.producer, count, spacing_ms).await
    }

    /// [`Cluster::produce_page_views`] through `producer`.
    pub async fn produce_page_views_with(
        &self,
        producer: &Producer,
        count: usize,
        spacing_ms: i64,
    ) -> Vec<[u8; 16]> {
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
            pending.push(producer.enqueue(TOPIC, None, &payload).await.expect("enqueue"));
            ids.push(id);
        }
        for sent in pending {
            sent.await.expect("acknowledged");
        }
        ids
    }

    /// Waits until the `_audit` counts of loader `host` are, per 10-minute window, the page
    /// views `ids` (produced `spacing_ms` apart by [`Cluster::produce_page_views`]): each
    /// window counted once.
    pub async fn await_loader_counts(&self, host: &str, ids: &[[u8; 16]], spacing_ms: i64) {
        let mut expected = BTreeMap::<i64, i64>::new();
        // Sequence numbers are shared by the tests running at once: each event's own says
        // its time.
        for id in ids {
            let time_ms = BASE_TIME_MS + crate::events::sequence_of(id) * spacing_ms;
            *expected.entry(events::audit::window_start(time_ms, 600_000)).or_default() += 1;
        }
        crate::eventually(
            std::time::Duration::from_secs(10),
            "the loader's counts per window",
            || async {
                let counts = self.audit_counts().await;
                expected
                    .iter()
                    .all(|(window, count)| {
                        let key = ("loader".to_owned(), host.to_owned(), TOPIC.to_owned(), *window);
                        counts.get(&key) == Some(count)
                    })
                    .then_some(())
            },
        )
        .await;
    }

    /// The latest `_audit` count of every `(tier, host, topic, window)`.
    pub async fn audit_counts(&self) -> BTreeMap<(String, String, String, i64), i64> {
        let latest = self.registry.latest(AUDIT_SUBJECT).await.expect("audit schema");
        let schema = self.registry.schema(latest.id).await.expect("audit schema");
        let consumer =
            SimpleConsumer::connect(self.brokers.addr(), SimpleConsumerConfig::default())
                .await
                .expect("consumer");
        let mut counts = BTreeMap::new();
        for partition in 0..8 {
            for message in read_partition(&consumer, AUDIT_TOPIC, partition).await {
                let record = AuditRecord::decode(&message.payload, &schema).expect("audit record");
                // Counts are cumulative: the largest seen is the latest.
                let key = (record.tier.to_string(), record.host, record.topic, record.window_start);
                let count = counts.entry(key).or_insert(0);
                *count = record.count.max(*count);
            }
        }
        counts
    }
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Positions of the rows under the topic's prefix (the Hive layout); panics on a duplicate.
pub async fn unique_positions(store: &Arc<dyn ObjectStore>, topic: &str) -> HashSet<(i32, i64)> {
    let output = hdfs_loader::Output::Hive(Arc::clone(store));
    let rows = hdfs_loader::readback::read_topic(&output, topic).await.expect("read back");
    let mut seen = HashSet::with_capacity(rows.positions.len());
    for position in rows.positions {
        assert!(seen.insert(position), "row {position:?} is visible twice");
    }
    seen
}
