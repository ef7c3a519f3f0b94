//! The analytics cluster: one producer into it, found through its broker registry, and the
//! creation of each copied topic there with the configured partition count before the first
//! message goes out (a broker would otherwise create it with its own default).

use std::sync::Arc;

use client::{Connection, Partitioner, Producer, ProducerConfig, RegistryBrokers};
use cluster::{Coordinator, Registry};
use protocol::{Acks, Codec};

use crate::MirrorError;

/// Batch size of the producer into the target, in messages.
const BATCH_MESSAGES: usize = 1_000;
/// A topic's target brokers are looked up again this often (sooner after a failure).
const METADATA_REFRESH_MS: u64 = 10_000;

#[derive(Clone)]
pub(crate) struct Target {
    registry: Registry,
    pub(crate) producer: Producer,
    partitions: u32,
}

impl Target {
    pub(crate) fn new(
        coordinator: Arc<dyn Coordinator>,
        partitions: u32,
        buffer_bytes: usize,
    ) -> Result<Target, MirrorError> {
        let registry = Registry::new(coordinator);
        let config = ProducerConfig {
            // Acknowledged once appended: a source offset is committed only after this.
            acks: Acks::Written,
            batch_messages: BATCH_MESSAGES,
            batch_bytes: 1 << 20,
            // Framed messages (wrappers included) are forwarded as they are.
            compression: Codec::None,
            // The key is the source partition: its messages keep their order in one target
            // partition.
            partitioner: Partitioner::ByKey,
            buffer_bytes,
            metadata_refresh_ms: METADATA_REFRESH_MS,
            ..ProducerConfig::default()
        };
        let source = Arc::new(RegistryBrokers::new(registry.clone()));
        let producer = Producer::new(config, source).map_err(MirrorError::Producer)?;
        Ok(Target { registry, producer, partitions })
    }

    /// Creates `topic` on every target broker that does not have it yet. Fails while no
    /// target broker is registered or one cannot be reached; the caller retries.
    pub(crate) async fn ensure_topic(&self, topic: &str) -> Result<(), String> {
        let brokers = self.registry.brokers().await.map_err(|e| e.to_string())?;
        if brokers.is_empty() {
            return Err("no target broker is registered".into());
        }
        let have = self.registry.topic_brokers(topic).await.map_err(|e| e.to_string())?;
        for (id, info) in brokers.iter().filter(|(id, _)| !have.contains_key(id)) {
            let addr = info.addr();
            let conn = Connection::connect(&addr).await.map_err(|e| e.to_string())?;
            let partitions = i32::try_from(self.partitions).unwrap_or(i32::MAX);
            match conn.create_topic(topic, partitions, &[]).await {
                Ok(()) => tracing::info!(%topic, broker = id, partitions, "created on the target"),
                Err(e) if e.code().is_some() => {
                    // The broker refused (e.g. it has the topic already): copy on.
                    tracing::warn!(%topic, broker = id, error = %e, "target broker did not create the topic");
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}
