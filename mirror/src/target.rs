//! The analytics cluster: one producer into it, found through its broker registry, and the
//! creation of each copied topic there with the configured partition count before the first
//! message goes out (a broker would otherwise create it with its own default) — also on a
//! target broker that joins later, so that copied topics spread over it too.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use client::{Connection, Partitioner, Producer, ProducerConfig, RegistryBrokers};
use cluster::{BrokerInfo, Coordinator, Registry};
use protocol::{Acks, Codec};
use tokio_util::sync::CancellationToken;

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
    /// Topics created on every target broker so far.
    topics: Arc<Mutex<BTreeSet<String>>>,
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
        Ok(Target { registry, producer, partitions, topics: Arc::default() })
    }

    /// Creates `topic` on every target broker that does not have it yet. Fails while no
    /// target broker is registered or one cannot be reached; the caller retries.
    pub(crate) async fn ensure_topic(&self, topic: &str) -> Result<(), String> {
        let brokers = self.registry.brokers().await.map_err(|e| e.to_string())?;
        if brokers.is_empty() {
            return Err("no target broker is registered".into());
        }
        self.create_on(topic, &brokers).await?;
        self.topics.lock().unwrap_or_else(|p| p.into_inner()).insert(topic.to_owned());
        Ok(())
    }

    /// Creates `topic` on those of `brokers` that do not have it yet.
    async fn create_on(
        &self,
        topic: &str,
        brokers: &BTreeMap<i32, BrokerInfo>,
    ) -> Result<(), String> {
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

/// Pause after a failure to read the target's broker registry or create a topic; doubles.
const FOLLOW_BACKOFF_MS: u64 = 200;
const FOLLOW_BACKOFF_MAX_MS: u64 = 5_000;

/// Whenever the target's broker set changes, creates every topic copied so far on the brokers
/// that lack it, until `stop`.
pub(crate) async fn follow_brokers(target: Target, stop: CancellationToken) {
    let mut backoff = service::Backoff::from_ms(FOLLOW_BACKOFF_MS, FOLLOW_BACKOFF_MAX_MS);
    loop {
        let step = async {
            let (brokers, watch) =
                target.registry.brokers_and_watch().await.map_err(|e| e.to_string())?;
            let topics = target.topics.lock().unwrap_or_else(|p| p.into_inner()).clone();
            for topic in &topics {
                target.create_on(topic, &brokers).await.map_err(|e| format!("{topic}: {e}"))?;
            }
            Ok::<_, String>(watch)
        };
        match step.await {
            Ok(watch) => {
                backoff.reset();
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = watch => continue,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot create copied topics on the target brokers; retrying");
                if !backoff.wait(&stop).await {
                    return;
                }
            }
        }
    }
}
