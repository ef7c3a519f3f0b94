//! The agent's row of the audit (docs/design.md, "Tiers"): cumulative counts of events
//! acknowledged by the live brokers, per topic and window of `header.time`, published to
//! `_audit` on the same live cluster (the mirror carries them to analytics) by the pipeline's
//! one [`events::AuditPublisher`]. The counts live in the spool's checkpoint, so a restart
//! resumes them instead of starting again from zero.

use std::sync::Arc;

use events::{AuditRecord, AuditSource};

use crate::metrics::Metrics;
use crate::spool::Spool;

/// Published windows are kept (and republished if a late event changes them) this long after
/// they close: a late event must add to a window's count, never start it again from zero.
const AUDIT_RETAIN_MS: i64 = 7 * 24 * 3_600_000;

/// The spool's counts as the publisher's source.
pub(crate) struct SpoolCounts {
    pub(crate) spool: Arc<Spool>,
    pub(crate) metrics: Arc<Metrics>,
}

impl AuditSource for SpoolCounts {
    fn take_changed(&self) -> Vec<AuditRecord> {
        self.spool.take_audit_changes()
    }

    fn mark_changed(&self, records: &[AuditRecord]) {
        self.spool.audit_publish_failed(records);
    }

    fn published(&self, records: &[AuditRecord]) {
        self.metrics.audit_published.inc_by(records.len() as u64);
        self.spool.forget_audit_before(service::now_ms() - AUDIT_RETAIN_MS);
    }
}
