//! The one publisher of audit counts, used by every tier that publishes (agent, mirror,
//! loader). Each record goes to `_audit` keyed by `tier/host/topic/window_start`, so that a
//! keyed producer keeps one window's records in one partition, in order; a failed send is
//! retried a bounded number of times with backoff, and what still fails is marked changed in
//! its source, to go with the next publication.
//!
//! [`AuditPublisher::publish`] runs one publication at a time: when it returns `Ok`, every
//! count its source held when it was called is acknowledged by the cluster. The mirror relies
//! on that ordering — counts first, then the source offsets they cover — so that a crash
//! between the two re-copies (and re-counts) rather than losing counts.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use apache_avro::Schema;
use client::{Producer, ProducerError};
use schema_registry::{ClientError, RegistryClient};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::audit::{AUDIT_SUBJECT, AUDIT_TOPIC, AuditCounts, AuditError, AuditRecord};

/// Retries of one publication before its records wait for the next one.
pub const PUBLISH_RETRIES_MAX: usize = 3;
const RETRY_BACKOFF_FIRST_MS: u64 = 200;
const RETRY_BACKOFF_MAX_MS: u64 = 2_000;
/// The last publication at shutdown waits this long at most.
pub const FINAL_PUBLISH_MS: u64 = 5_000;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    #[error("cannot read the {AUDIT_SUBJECT} schema: {0}")]
    Schema(#[source] ClientError),
    #[error("cannot encode an audit record: {0}")]
    Encode(#[source] AuditError),
    #[error("cannot produce to {AUDIT_TOPIC}: {0}")]
    Produce(#[source] ProducerError),
}

/// Where a publisher takes counts from: the changed ones out, the ones that failed back in.
pub trait AuditSource: Send + Sync {
    /// Records of every count changed since the last call, marked unchanged.
    fn take_changed(&self) -> Vec<AuditRecord>;
    /// Marks the windows of `records` changed again: their publication failed.
    fn mark_changed(&self, records: &[AuditRecord]);
    /// Called after `records` were published (e.g. to forget old windows that are final).
    fn published(&self, records: &[AuditRecord]) {
        let _ = records;
    }
}

/// [`AuditCounts`] in memory, shared by the tasks that count and the one that publishes.
/// With `retain_ms`, published windows that ended longer ago are forgotten: counts are
/// cumulative, so a window must be kept as long as a late event may still fall in it.
#[derive(Debug)]
pub struct SharedCounts {
    counts: Mutex<AuditCounts>,
    retain_ms: Option<i64>,
}

impl SharedCounts {
    pub fn new(counts: AuditCounts, retain_ms: Option<i64>) -> SharedCounts {
        SharedCounts { counts: Mutex::new(counts), retain_ms }
    }

    /// The counts, locked (counting is a map update; never held across an await).
    pub fn lock(&self) -> MutexGuard<'_, AuditCounts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `events` events of `topic` with `header.time` = `time_ms`.
    pub fn add(&self, topic: &str, time_ms: i64, events: i64) {
        self.lock().add(topic, time_ms, events);
    }
}

impl AuditSource for SharedCounts {
    fn take_changed(&self) -> Vec<AuditRecord> {
        self.lock().take_changed()
    }

    fn mark_changed(&self, records: &[AuditRecord]) {
        self.lock().mark_changed(records);
    }

    fn published(&self, _records: &[AuditRecord]) {
        if let Some(retain_ms) = self.retain_ms {
            self.lock().forget_published_before(service::now_ms() - retain_ms);
        }
    }
}

/// Publishes audit records through a producer of the cluster the tier reports to.
pub struct AuditPublisher {
    registry: Arc<RegistryClient>,
    producer: Producer,
    schema: OnceCell<(i32, Arc<Schema>)>,
    /// One publication at a time, so that `Ok` means everything taken before is acknowledged.
    publishing: tokio::sync::Mutex<()>,
    retries: usize,
}

impl AuditPublisher {
    /// Publishes with `producer` (acks ≥ 1; a keyed partitioner keeps a window's records
    /// together) the records encoded with the registry's latest `_audit` schema.
    pub fn new(registry: Arc<RegistryClient>, producer: Producer) -> AuditPublisher {
        AuditPublisher {
            registry,
            producer,
            schema: OnceCell::new(),
            publishing: tokio::sync::Mutex::new(()),
            retries: PUBLISH_RETRIES_MAX,
        }
    }

    /// At most `retries` retries of a failed send before its records wait for the next
    /// publication.
    pub fn with_retries(mut self, retries: usize) -> AuditPublisher {
        self.retries = retries;
        self
    }

    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// The key of a record: one `(tier, host, topic, window)` count, whose later records
    /// supersede earlier ones.
    pub fn key(record: &AuditRecord) -> String {
        format!("{}/{}/{}/{}", record.tier, record.host, record.topic, record.window_start)
    }

    /// Publishes every changed count of `source`; returns how many records went out. On
    /// failure the records are marked changed again in `source`.
    pub async fn publish(&self, source: &dyn AuditSource) -> Result<usize, PublishError> {
        let _one_at_a_time = self.publishing.lock().await;
        let records = source.take_changed();
        if records.is_empty() {
            return Ok(0);
        }
        match self.send(&records).await {
            Ok(()) => {
                source.published(&records);
                tracing::debug!(records = records.len(), "published audit counts");
                Ok(records.len())
            }
            Err(e) => {
                source.mark_changed(&records);
                Err(e)
            }
        }
    }

    /// Publishes `source` every `interval` until `stop`, then once more (bounded by
    /// [`FINAL_PUBLISH_MS`]), so that a clean shutdown leaves its last counts in `_audit`.
    pub async fn run(&self, source: &dyn AuditSource, interval: Duration, stop: CancellationToken) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.publish(source).await {
                tracing::warn!(error = %e, "cannot publish audit counts; they go with the next publication");
            }
        }
        let last =
            tokio::time::timeout(Duration::from_millis(FINAL_PUBLISH_MS), self.publish(source));
        match last.await {
            Ok(Ok(records)) => tracing::info!(records, "published the final audit counts"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot publish the final audit counts"),
            Err(_) => tracing::warn!("the final audit publication timed out"),
        }
    }

    async fn schema(&self) -> Result<&(i32, Arc<Schema>), PublishError> {
        self.schema
            .get_or_try_init(|| async {
                let latest =
                    self.registry.latest(AUDIT_SUBJECT).await.map_err(PublishError::Schema)?;
                let schema = self.registry.schema(latest.id).await.map_err(PublishError::Schema)?;
                Ok((latest.id, schema))
            })
            .await
    }

    /// Sends `records`, retrying the whole set with backoff; a record sent twice is harmless
    /// (counts are cumulative).
    async fn send(&self, records: &[AuditRecord]) -> Result<(), PublishError> {
        let (id, schema) = self.schema().await?;
        let payloads = records
            .iter()
            .map(|r| Ok((AuditPublisher::key(r), r.encode(*id, schema)?)))
            .collect::<Result<Vec<_>, AuditError>>()
            .map_err(PublishError::Encode)?;
        let mut backoff = service::Backoff::from_ms(RETRY_BACKOFF_FIRST_MS, RETRY_BACKOFF_MAX_MS)
            .with_max_retries(self.retries);
        loop {
            match self.send_once(&payloads).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let Some(delay) = backoff.next_delay() else { return Err(e) };
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "publishing audit counts failed; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn send_once(&self, payloads: &[(String, Vec<u8>)]) -> Result<(), PublishError> {
        let mut pending = Vec::with_capacity(payloads.len());
        for (key, payload) in payloads {
            let sent = self.producer.enqueue(AUDIT_TOPIC, Some(key.as_bytes()), payload).await;
            pending.push(sent.map_err(PublishError::Produce)?);
        }
        for sent in pending {
            sent.await.map_err(PublishError::Produce)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Tier;

    #[test]
    fn records_are_keyed_by_their_count() {
        let record = AuditRecord {
            tier: Tier::Mirror,
            host: "m-1".into(),
            topic: "page-view".into(),
            window_start: 600_000,
            window_ms: 600_000,
            count: 9,
        };
        assert_eq!(AuditPublisher::key(&record), "mirror/m-1/page-view/600000");
    }

    #[test]
    fn shared_counts_hand_back_failed_records_and_forget_old_published_windows() {
        let counts =
            SharedCounts::new(AuditCounts::new(Tier::Loader, "l", 1000).unwrap(), Some(10_000));
        counts.add("t", 500, 2);
        counts.add("t", service::now_ms(), 1);
        let taken = counts.take_changed();
        assert_eq!(taken.len(), 2);
        counts.mark_changed(&taken);
        assert_eq!(counts.take_changed().len(), 2, "failed records go out again");
        counts.published(&[]);
        assert_eq!(counts.lock().count("t", 0), 0, "an old published window is forgotten");
        assert_eq!(counts.lock().all().len(), 1, "the current window is kept");
    }
}
