//! The agent's row of the audit (DESIGN.md, "Audit record"): cumulative counts of events
//! acknowledged by the live brokers, per topic and window of `header.time`, published to
//! `_audit` on the same live cluster (the mirror carries them to analytics). The counts live
//! in the spool's checkpoint, so a restart resumes them instead of starting again from zero.

use std::sync::Arc;
use std::time::Duration;

use client::Producer;
use schema_registry::RegistryClient;
use schema_registry::audit::{AUDIT_SUBJECT, AUDIT_TOPIC};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::spool::Spool;

/// Published windows are kept (and republished if a late event changes them) this long after
/// they close: a late event must add to a window's count, never start it again from zero.
const AUDIT_RETAIN_MS: i64 = 7 * 24 * 3_600_000;

/// Publishes changed counts every `publish_ms` until `stop`.
pub(crate) async fn run(
    spool: Arc<Spool>,
    producer: Producer,
    registry: Arc<RegistryClient>,
    metrics: Arc<Metrics>,
    publish_ms: u64,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(publish_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = publish(&spool, &producer, &registry, &metrics).await {
            tracing::warn!(error = %e, "cannot publish audit counts; will retry");
        }
    }
}

/// Publishes every count that changed since the last successful publication, with acks ≥ 1.
/// On failure the counts are marked changed again.
pub(crate) async fn publish(
    spool: &Spool,
    producer: &Producer,
    registry: &RegistryClient,
    metrics: &Metrics,
) -> Result<(), String> {
    let records = spool.take_audit_changes();
    if records.is_empty() {
        return Ok(());
    }
    let result = async {
        let latest = registry.latest(AUDIT_SUBJECT).await.map_err(|e| e.to_string())?;
        let schema = registry.schema(latest.id).await.map_err(|e| e.to_string())?;
        let mut pending = Vec::with_capacity(records.len());
        for record in &records {
            let payload = record.encode(latest.id, &schema).map_err(|e| e.to_string())?;
            pending.push(
                producer.enqueue(AUDIT_TOPIC, None, &payload).await.map_err(|e| e.to_string())?,
            );
        }
        for p in pending {
            p.await.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    }
    .await;
    match result {
        Ok(()) => {
            Metrics::add(&metrics.audit_published, records.len() as u64);
            tracing::debug!(records = records.len(), "published audit counts");
            spool.forget_audit_before(crate::now_ms() - AUDIT_RETAIN_MS);
            Ok(())
        }
        Err(e) => {
            spool.audit_publish_failed(&records);
            Err(e)
        }
    }
}
