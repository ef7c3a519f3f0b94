//! The mirror tier of the audit (`DESIGN.md`, "Audit record"): cumulative counts, per topic
//! and window of `header.time`, of the events the target acknowledged, published to the
//! target's `_audit` every few seconds and on shutdown. A failed publication is retried with
//! the next one; since counts are cumulative, a record sent twice is harmless.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use apache_avro::Schema;
use client::{Producer, SimpleConsumer, SimpleConsumerConfig};
use cluster::Registry;
use schema_registry::RegistryClient;
use schema_registry::audit::{AUDIT_SUBJECT, AUDIT_TOPIC, AuditCounts, AuditRecord};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

/// Published windows are kept this long (the brokers' default retention), then forgotten.
/// Counts are cumulative, so a window forgotten sooner would restart from zero when a late
/// copy — a mirror catching up after an outage — falls in it again.
const WINDOWS_KEPT_MS: i64 = 7 * 24 * 3_600_000;
/// The final publication on shutdown waits this long at most.
const FINAL_PUBLISH_MS: u64 = 5_000;

pub(crate) struct Audit {
    pub(crate) counts: Mutex<AuditCounts>,
    registry: RegistryClient,
    schema: OnceCell<(i32, Arc<Schema>)>,
    /// One publication at a time: when [`Audit::publish`] returns `Ok`, every count added
    /// before it was called is in `_audit` (taken by it or by the one it waited for).
    publishing: tokio::sync::Mutex<()>,
}

impl Audit {
    pub(crate) fn new(counts: AuditCounts, registry: RegistryClient) -> Audit {
        Audit {
            counts: Mutex::new(counts),
            registry,
            schema: OnceCell::new(),
            publishing: tokio::sync::Mutex::new(()),
        }
    }

    /// Takes back this host's counts from the target's `_audit` (what it published before a
    /// restart), so that its cumulative counts go on from there rather than from zero.
    /// Reads every partition of `_audit` from its first offset to the end it has now.
    pub(crate) async fn restore(&self, target: &Registry) -> Result<usize, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let brokers = target.brokers().await.map_err(|e| text(&e))?;
        let mut restored = 0;
        for partition in target.partitions(AUDIT_TOPIC).await.map_err(|e| text(&e))? {
            let Some(broker) = brokers.get(&partition.broker) else {
                return Err(format!("broker {} of {AUDIT_TOPIC} is down", partition.broker));
            };
            let consumer = SimpleConsumer::connect(&broker.addr(), SimpleConsumerConfig::default())
                .await
                .map_err(|e| text(&e))?;
            let p = partition.partition as i32;
            let mut offset =
                consumer.earliest_offset(AUDIT_TOPIC, p).await.map_err(|e| text(&e))?;
            let end = consumer.latest_offset(AUDIT_TOPIC, p).await.map_err(|e| text(&e))?;
            while offset < end {
                let fetched = consumer.fetch(AUDIT_TOPIC, p, offset).await.map_err(|e| text(&e))?;
                if fetched.is_empty() {
                    break;
                }
                for message in fetched.iter() {
                    let message = message.map_err(|e| text(&e))?;
                    offset = message.next_offset;
                    let Ok((_, value)) = self.registry.decode(&message.payload).await else {
                        continue; // not an audit record this mirror can read: not its own
                    };
                    if let Ok(record) = AuditRecord::from_value(&value)
                        && self.lock().restore(&record)
                    {
                        restored += 1;
                    }
                }
            }
        }
        Ok(restored)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AuditCounts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `events` events of `topic` in the window starting at `window_start`.
    pub(crate) fn add(&self, topic: &str, counts: impl IntoIterator<Item = (i64, i64)>) {
        let mut audit = self.lock();
        for (window_start, events) in counts {
            audit.add(topic, window_start, events);
        }
    }

    async fn schema(&self) -> Result<&(i32, Arc<Schema>), String> {
        self.schema
            .get_or_try_init(|| async {
                let latest =
                    self.registry.latest(AUDIT_SUBJECT).await.map_err(|e| e.to_string())?;
                let schema = self.registry.schema(latest.id).await.map_err(|e| e.to_string())?;
                Ok((latest.id, schema))
            })
            .await
    }

    /// Publishes every changed count; on failure they stay changed for the next attempt.
    pub(crate) async fn publish(&self, producer: &Producer) -> Result<usize, String> {
        let _one_at_a_time = self.publishing.lock().await;
        let records = self.lock().take_changed();
        if records.is_empty() {
            return Ok(0);
        }
        let result = self.send(producer, &records).await;
        let mut audit = self.lock();
        match &result {
            Ok(_) => {
                audit.forget_published_before(now_ms() - WINDOWS_KEPT_MS);
            }
            Err(_) => audit.mark_changed(&records),
        }
        result
    }

    async fn send(&self, producer: &Producer, records: &[AuditRecord]) -> Result<usize, String> {
        let (id, schema) = self.schema().await?;
        let mut pending = Vec::with_capacity(records.len());
        for record in records {
            let payload = record.encode(*id, schema).map_err(|e| e.to_string())?;
            pending.push(producer.enqueue(AUDIT_TOPIC, None, &payload).await);
        }
        for sent in pending {
            sent.map_err(|e| e.to_string())?.await.map_err(|e| e.to_string())?;
        }
        Ok(records.len())
    }
}

/// Publishes every `publish_ms` until `stop`, then once more.
pub(crate) async fn publish_loop(
    audit: Arc<Audit>,
    producer: Producer,
    publish_ms: u64,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(publish_ms)) => {}
        }
        if let Err(e) = audit.publish(&producer).await {
            tracing::warn!(error = %e, "cannot publish audit counts; retrying with the next");
        }
    }
    let last =
        tokio::time::timeout(Duration::from_millis(FINAL_PUBLISH_MS), audit.publish(&producer));
    match last.await {
        Ok(Ok(records)) => tracing::info!(records, "published the final audit counts"),
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot publish the final audit counts"),
        Err(_) => tracing::warn!("final audit publication timed out"),
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
