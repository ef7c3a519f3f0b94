//! The mirror tier of the audit (`docs/design.md`, "Tiers"): cumulative counts, per topic
//! and window of `header.time`, of the events the target acknowledged, published to the
//! target's `_audit` by the pipeline's one [`AuditPublisher`] — every few seconds, before a
//! stream marks offsets done (see `copy::mark`), and on shutdown. A restarted mirror takes
//! its counts back from `_audit` first, so they go on from there rather than from zero.

use std::sync::Arc;
use std::time::Duration;

use client::{Producer, SimpleConsumer, SimpleConsumerConfig};
use cluster::Registry;
use events::{AUDIT_TOPIC, AuditCounts, AuditPublisher, AuditRecord, PublishError, SharedCounts};
use schema_registry::RegistryClient;
use tokio_util::sync::CancellationToken;

/// Published windows are kept this long (the brokers' default retention), then forgotten.
/// Counts are cumulative, so a window forgotten sooner would restart from zero when a late
/// copy — a mirror catching up after an outage — falls in it again.
const WINDOWS_KEPT_MS: i64 = 7 * 24 * 3_600_000;

pub(crate) struct Audit {
    counts: SharedCounts,
    registry: Arc<RegistryClient>,
    publisher: AuditPublisher,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Audit {
    pub(crate) fn new(
        counts: AuditCounts,
        registry: Arc<RegistryClient>,
        producer: Producer,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Audit {
        let publisher = AuditPublisher::new(Arc::clone(&registry), producer);
        let counts = SharedCounts::new(counts, Some(WINDOWS_KEPT_MS));
        Audit { counts, registry, publisher, tls }
    }

    /// Takes back this host's counts from the target's `_audit` (what it published before a
    /// restart), so that its cumulative counts go on from there rather than from zero.
    /// Reads every partition of `_audit` from its first offset to the end it has now.
    pub(crate) async fn restore(&self, target: &Registry) -> Result<usize, String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let mut restored = 0;
        for partition in target.partitions(AUDIT_TOPIC).await.map_err(|e| text(&e))? {
            let Some((_, broker)) =
                target.leader(AUDIT_TOPIC, partition).await.map_err(|e| text(&e))?
            else {
                return Err(format!("{AUDIT_TOPIC} partition {partition} has no live leader"));
            };
            let config = SimpleConsumerConfig { tls: self.tls.clone(), ..Default::default() };
            let consumer =
                SimpleConsumer::connect(&broker.addr(), config).await.map_err(|e| text(&e))?;
            let p = partition;
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
                    let decoded = events::envelope::decode_with(&self.registry, &message.payload);
                    let Ok((_, value)) = decoded.await else {
                        continue; // not an audit record this mirror can read: not its own
                    };
                    if let Ok(record) = AuditRecord::from_value(&value)
                        && self.counts.lock().restore(&record)
                    {
                        restored += 1;
                    }
                }
            }
        }
        Ok(restored)
    }

    /// Counts events of `topic` per window: `(window_start, events)`.
    pub(crate) fn add(&self, topic: &str, counts: impl IntoIterator<Item = (i64, i64)>) {
        let mut audit = self.counts.lock();
        for (window_start, events) in counts {
            audit.add(topic, window_start, events);
        }
    }

    /// Publishes every changed count; when it returns `Ok`, every count added before is in
    /// `_audit`.
    pub(crate) async fn publish(&self) -> Result<usize, PublishError> {
        self.publisher.publish(&self.counts).await
    }

    /// Publishes every `interval` until `stop`, then once more.
    pub(crate) async fn run(&self, interval: Duration, stop: CancellationToken) {
        self.publisher.run(&self.counts, interval, stop).await
    }
}
