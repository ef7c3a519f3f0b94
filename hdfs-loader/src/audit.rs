//! The loader's audit counts (tier `loader`): per topic and window, the rows this host has
//! committed. They are derived from the commit records — every record carries its rows per
//! window and the host that wrote it — so a restarted loader starts from exactly what is
//! committed and a re-run never counts a range twice. Published to `_audit` on the same
//! cluster after each round of commits.

use std::sync::Arc;

use client::{Producer, ProducerConfig, RegistryBrokers};
use events::audit::{AuditCounts, Tier, window_start};
use events::{AuditPublisher, SharedCounts};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use schema_registry::RegistryClient;

use crate::LoadError;
use crate::commit::CommitRecord;
use crate::layout;

pub struct LoaderAudit {
    counts: SharedCounts,
    host: String,
    publisher: AuditPublisher,
}

impl LoaderAudit {
    pub fn new(
        host: &str,
        window_ms: i64,
        cluster: cluster::Registry,
        registry: Arc<RegistryClient>,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<LoaderAudit, LoadError> {
        let counts = AuditCounts::new(Tier::Loader, host, window_ms)
            .map_err(|e| LoadError::Audit(e.to_string()))?;
        let config = ProducerConfig {
            // Every in-sync replica: a count acknowledged by the leader alone is lost when the
            // leader fails before its followers copy it, and the loader never sends it again
            // (it is no longer "changed") — `tributary chaos` found whole minutes of loader
            // windows in loss that way.
            acks: protocol::Acks::All,
            // One window's records stay in one partition, in order: a later count supersedes.
            partitioner: client::Partitioner::ByKey,
            request_timeout_ms: 10_000,
            retries_max: 2,
            tls,
            ..ProducerConfig::default()
        };
        let producer = Producer::new(config, Arc::new(RegistryBrokers::new(cluster)))
            .map_err(|e| LoadError::Audit(e.to_string()))?;
        Ok(LoaderAudit {
            // Every window is kept: a restart derives them again from the commit records anyway.
            counts: SharedCounts::new(counts, None),
            host: host.to_owned(),
            publisher: AuditPublisher::new(registry, producer),
        })
    }

    /// Counts every record of `topic` this host committed (all published again: a later
    /// record supersedes an earlier one, so that is harmless).
    pub async fn load_topic(&self, store: &dyn ObjectStore, topic: &str) -> Result<(), LoadError> {
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
                CommitRecord::parse(path.as_ref(), topic, layout::commit_start(&path), &bytes)
                    .map_err(|e| LoadError::Audit(e.to_string()))
            }))
            .buffer_unordered(16)
            .try_collect()
            .await?;
        self.count_own(&records);
        Ok(())
    }

    /// Counts the records of `records` this host committed.
    pub fn count_own(&self, records: &[CommitRecord]) {
        for record in records {
            if record.host == self.host {
                self.count(record);
            }
        }
    }

    /// Adds a record just committed.
    pub fn count(&self, record: &CommitRecord) {
        let mut counts = self.counts.lock();
        for (&window, &rows) in &record.windows {
            // A record written with another window size is counted in the window holding its
            // window's start (exact whenever the sizes divide each other).
            let start = window_start(window, counts.window_ms());
            counts.add(&record.topic, start, rows);
        }
    }

    pub fn count_of(&self, topic: &str, window_start: i64) -> i64 {
        self.counts.lock().count(topic, window_start)
    }

    /// Publishes the changed counts; those that fail are kept for the next round.
    pub async fn publish(&self) -> Result<usize, LoadError> {
        self.publisher.publish(&self.counts).await.map_err(|e| LoadError::Audit(e.to_string()))
    }

    pub async fn close(&self) {
        self.publisher.producer().close().await;
    }
}
