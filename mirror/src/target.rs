//! The analytics cluster: one producer into it, found through its registry, and the creation
//! of each copied topic there with the configured partition count before the first message
//! goes out (a broker would otherwise create it with its own default). Source partition `p`
//! of a topic goes to target partition `p mod n`, `n` the target topic's partition count.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use client::{
    Connection, ConnectionConfig, Partitioner, Producer, ProducerConfig, RegistryBrokers,
};
use cluster::{Coordinator, Registry};
use protocol::{Acks, Codec};

use crate::MirrorError;

/// Batch size of the producer into the target, in messages: about a batch's bytes (1 MiB) of
/// the pipeline's events of ~100 bytes, so that the byte bound is the one that ends a batch.
const BATCH_MESSAGES: usize = 10_000;
/// A topic's target brokers are looked up again this often (sooner after a failure).
const METADATA_REFRESH_MS: u64 = 10_000;

#[derive(Clone)]
pub(crate) struct Target {
    registry: Registry,
    pub(crate) producer: Producer,
    partitions: u32,
    /// Topics the target cluster has, as far as this mirror knows, with their partition
    /// counts.
    topics: Arc<Mutex<BTreeMap<String, u32>>>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Target {
    pub(crate) fn new(
        coordinator: Arc<dyn Coordinator>,
        partitions: u32,
        buffer_bytes: usize,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Target, MirrorError> {
        let registry = Registry::new(coordinator);
        let config = ProducerConfig {
            // A source offset is committed only after this: once every in-sync replica of the
            // target partition has the message, no failover there takes it back.
            acks: Acks::All,
            batch_messages: BATCH_MESSAGES,
            batch_bytes: 1 << 20,
            // Framed messages (wrappers included) are forwarded as they are, byte for byte, as
            // copies (`enqueue_copy`): not re-encoded into an idempotent producer's batches.
            compression: Codec::None,
            idempotence: false,
            // Each copy names its target partition; the partitioner is not asked.
            partitioner: Partitioner::ByKey,
            buffer_bytes,
            metadata_refresh_ms: METADATA_REFRESH_MS,
            tls: tls.clone(),
            ..ProducerConfig::default()
        };
        let source = Arc::new(RegistryBrokers::new(registry.clone()));
        let producer = Producer::new(config, source).map_err(MirrorError::Producer)?;
        Ok(Target { registry, producer, partitions, topics: Arc::default(), tls })
    }

    /// Creates `topic` in the target cluster, with `partitions` partitions, unless it has it.
    /// Fails while no target broker is registered or none can be reached; the caller retries.
    pub(crate) async fn ensure_topic(&self, topic: &str) -> Result<(), String> {
        if self.topics.lock().unwrap_or_else(|p| p.into_inner()).contains_key(topic) {
            return Ok(());
        }
        let known = self.registry.topic_assignment(topic).await.map_err(|e| e.to_string())?;
        let mut partitions = self.partitions;
        if let Some((assignment, _)) = &known {
            partitions = u32::try_from(assignment.partitions.len()).unwrap_or(u32::MAX);
        } else {
            let brokers = self.registry.brokers().await.map_err(|e| e.to_string())?;
            let Some((id, info)) = brokers.iter().next() else {
                return Err("no target broker is registered".into());
            };
            let config = ConnectionConfig::with_tls(self.tls.clone());
            let conn =
                Connection::connect_with(&info.addr(), config).await.map_err(|e| e.to_string())?;
            let partitions = i32::try_from(self.partitions).unwrap_or(i32::MAX);
            match conn.create_topic(topic, partitions, &[]).await {
                Ok(()) => tracing::info!(%topic, broker = id, partitions, "created on the target"),
                Err(e) if e.code().is_some() => {
                    // Refused (another mirror created it a moment ago, say): copy on.
                    tracing::warn!(%topic, broker = id, error = %e, "target did not create the topic");
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        let mut topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        topics.insert(topic.to_owned(), partitions.max(1));
        Ok(())
    }

    /// The target partition of `topic`'s source partition `partition`: one per source
    /// partition, so that its messages keep their order and its writer's position is in one
    /// place.
    pub(crate) fn partition_for(&self, topic: &str, partition: i32) -> i32 {
        let topics = self.topics.lock().unwrap_or_else(|p| p.into_inner());
        let count = topics.get(topic).copied().unwrap_or(self.partitions).max(1);
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        partition.rem_euclid(count)
    }
}
