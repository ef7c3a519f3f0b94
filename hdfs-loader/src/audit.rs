//! The loader's audit counts (tier `loader`): per topic and window, the rows this host has
//! committed. They are derived from the commit records — every record carries its rows per
//! window and the host that wrote it — so a restarted loader starts from exactly what is
//! committed and a re-run never counts a range twice. Published to `_audit` on the same
//! cluster after each round of commits.

use std::sync::Arc;
use std::time::Duration;

use apache_avro::Schema;
use client::{Producer, ProducerConfig, RegistryBrokers};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use schema_registry::RegistryClient;
use schema_registry::audit::{
    AUDIT_SUBJECT, AUDIT_TOPIC, AuditCounts, AuditRecord, Tier, window_start,
};

use crate::LoadError;
use crate::commit::CommitRecord;
use crate::layout;

/// Attempts to publish one round before the records wait for the next round.
const PUBLISH_ATTEMPTS_MAX: u32 = 3;
const PUBLISH_BACKOFF_MS: u64 = 200;

pub struct LoaderAudit {
    counts: AuditCounts,
    host: String,
    producer: Producer,
}

impl LoaderAudit {
    pub fn new(
        host: &str,
        window_ms: i64,
        cluster: cluster::Registry,
    ) -> Result<LoaderAudit, LoadError> {
        let counts = AuditCounts::new(Tier::Loader, host, window_ms)
            .map_err(|e| LoadError::Audit(e.to_string()))?;
        let config = ProducerConfig {
            acks: protocol::Acks::Written,
            // One window's records stay in one partition, in order: a later count supersedes.
            partitioner: client::Partitioner::ByKey,
            request_timeout_ms: 10_000,
            retries_max: 2,
            ..ProducerConfig::default()
        };
        let producer = Producer::new(config, Arc::new(RegistryBrokers::new(cluster)))
            .map_err(|e| LoadError::Audit(e.to_string()))?;
        Ok(LoaderAudit { counts, host: host.to_owned(), producer })
    }

    /// Counts every record of `topic` this host committed (all published again: a later
    /// record supersedes an earlier one, so that is harmless).
    pub async fn load_topic(
        &mut self,
        store: &dyn ObjectStore,
        topic: &str,
    ) -> Result<(), LoadError> {
        let prefix = Path::from(format!("{}/{topic}", layout::COMMITS));
        let metas: Vec<_> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|source| LoadError::Store { path: prefix.to_string(), source })?;
        let records: Vec<CommitRecord> =
            futures::stream::iter(metas.into_iter().map(|meta| async move {
                let path = meta.location;
                let bytes = store
                    .get(&path)
                    .await
                    .map_err(|source| LoadError::Store { path: path.to_string(), source })?
                    .bytes()
                    .await
                    .map_err(|source| LoadError::Store { path: path.to_string(), source })?;
                serde_json::from_slice::<CommitRecord>(&bytes)
                    .map_err(|e| LoadError::Audit(format!("commit record {path}: {e}")))
            }))
            .buffer_unordered(16)
            .try_collect()
            .await?;
        for record in &records {
            if record.host == self.host {
                self.count(record);
            }
        }
        Ok(())
    }

    /// Adds a record just committed.
    pub fn count(&mut self, record: &CommitRecord) {
        for (&window, &rows) in &record.windows {
            // A record written with another window size is counted in the window holding its
            // window's start (exact whenever the sizes divide each other).
            let start = window_start(window, self.counts.window_ms());
            self.counts.add(&record.topic, start, rows);
        }
    }

    pub fn count_of(&self, topic: &str, window_start: i64) -> i64 {
        self.counts.count(topic, window_start)
    }

    /// Publishes the changed counts; those that fail are kept for the next round.
    pub async fn publish(&mut self, registry: &RegistryClient) -> Result<usize, LoadError> {
        let records = self.counts.take_changed();
        if records.is_empty() {
            return Ok(0);
        }
        let result = self.send(registry, &records).await;
        if result.is_err() {
            self.counts.mark_changed(&records);
        }
        result.map(|()| records.len())
    }

    async fn send(
        &self,
        registry: &RegistryClient,
        records: &[AuditRecord],
    ) -> Result<(), LoadError> {
        let audit_error = |e: &dyn std::fmt::Display| LoadError::Audit(e.to_string());
        let latest = registry.latest(AUDIT_SUBJECT).await.map_err(|e| audit_error(&e))?;
        let schema: Arc<Schema> = registry.schema(latest.id).await.map_err(|e| audit_error(&e))?;
        let payloads = records
            .iter()
            .map(|r| r.encode(latest.id, &schema))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| audit_error(&e))?;
        let mut attempt = 0;
        loop {
            match self.send_once(records, &payloads).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt + 1 >= PUBLISH_ATTEMPTS_MAX => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "publishing audit counts failed; retrying");
                    tokio::time::sleep(Duration::from_millis(PUBLISH_BACKOFF_MS << attempt)).await;
                    attempt += 1;
                }
            }
        }
    }

    async fn send_once(
        &self,
        records: &[AuditRecord],
        payloads: &[Vec<u8>],
    ) -> Result<(), LoadError> {
        let mut pending = Vec::with_capacity(payloads.len());
        for (record, payload) in records.iter().zip(payloads) {
            let key =
                format!("{}/{}/{}/{}", record.tier, record.host, record.topic, record.window_start);
            let sent = self.producer.enqueue(AUDIT_TOPIC, Some(key.as_bytes()), payload).await;
            pending.push(sent.map_err(|e| LoadError::Audit(e.to_string()))?);
        }
        for sent in pending {
            sent.await.map_err(|e| LoadError::Audit(e.to_string()))?;
        }
        Ok(())
    }

    pub async fn close(&self) {
        self.producer.close().await;
    }
}
