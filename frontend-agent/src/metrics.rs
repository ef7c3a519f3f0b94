//! The agent's counters, rendered as Prometheus text at `GET /metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the size histograms' buckets (events).
const SIZE_BUCKETS: [u64; 8] = [1, 10, 50, 100, 500, 1_000, 5_000, 10_000];

/// A histogram of sizes with fixed buckets.
#[derive(Debug, Default)]
pub struct Sizes {
    buckets: [AtomicU64; SIZE_BUCKETS.len()],
    count: AtomicU64,
    sum: AtomicU64,
}

impl Sizes {
    pub fn observe(&self, size: u64) {
        if let Some(i) = SIZE_BUCKETS.iter().position(|&b| size <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(size, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in SIZE_BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// Every counter the agent keeps. Shared by the input paths, the spool and the shipper.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Events durably spooled and answered as accepted.
    pub accepted: AtomicU64,
    /// Events refused (invalid, or in a request with an invalid one).
    pub rejected: AtomicU64,
    /// Requests refused as invalid.
    pub rejected_requests: AtomicU64,
    /// Requests refused because the spool was full (`block`).
    pub refused_full: AtomicU64,
    /// Events written to the spool (replayed ones are not written again).
    pub spooled: AtomicU64,
    /// Events acknowledged by a broker (each at most once).
    pub acknowledged: AtomicU64,
    /// Events deleted unacknowledged by `drop-oldest`.
    pub dropped: AtomicU64,
    /// Events sent again after a failed batch: each may reach the brokers twice.
    pub resent: AtomicU64,
    /// Failed shipping attempts (a broker outage shows as a run of these).
    pub ship_failures: AtomicU64,
    /// Audit records published to `_audit`.
    pub audit_published: AtomicU64,
    /// Bytes of the spool's segment files.
    pub spool_bytes: AtomicU64,
    /// Events per accepted request or library batch.
    pub request_events: Sizes,
    /// Events per batch read from the spool for shipping.
    pub ship_batch_events: Sizes,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Prometheus text exposition format, version 0.0.4.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let counters: [(&str, &AtomicU64, &str); 10] = [
            ("accepted", &self.accepted, "Events durably spooled and accepted."),
            ("rejected", &self.rejected, "Events rejected as invalid."),
            ("rejected_requests", &self.rejected_requests, "Requests rejected as invalid."),
            ("refused_full", &self.refused_full, "Requests refused because the spool was full."),
            ("spooled", &self.spooled, "Events written to the spool."),
            ("acknowledged", &self.acknowledged, "Events acknowledged by a broker."),
            ("dropped", &self.dropped, "Events dropped unacknowledged by spool_full=drop-oldest."),
            (
                "resent",
                &self.resent,
                "Events sent again after a failed batch (possible duplicates).",
            ),
            ("ship_failures", &self.ship_failures, "Failed attempts to ship from the spool."),
            ("audit_published", &self.audit_published, "Audit records published to _audit."),
        ];
        for (name, counter, help) in counters {
            let _ = writeln!(
                out,
                "# HELP frontend_agent_{name}_total {help}\n# TYPE frontend_agent_{name}_total counter\nfrontend_agent_{name}_total {}",
                Metrics::get(counter)
            );
        }
        let _ = writeln!(
            out,
            "# HELP frontend_agent_spool_bytes Bytes of the spool's segment files.\n# TYPE frontend_agent_spool_bytes gauge\nfrontend_agent_spool_bytes {}",
            Metrics::get(&self.spool_bytes)
        );
        self.request_events.render(
            &mut out,
            "frontend_agent_request_events",
            "Events per accepted request or library batch.",
        );
        self.ship_batch_events.render(
            &mut out,
            "frontend_agent_ship_batch_events",
            "Events per batch read from the spool for shipping.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let metrics = Metrics::default();
        Metrics::add(&metrics.accepted, 3);
        metrics.request_events.observe(3);
        metrics.request_events.observe(700);
        let text = metrics.render();
        assert!(text.contains("frontend_agent_accepted_total 3\n"), "{text}");
        assert!(text.contains("frontend_agent_request_events_bucket{le=\"10\"} 1\n"), "{text}");
        assert!(text.contains("frontend_agent_request_events_bucket{le=\"1000\"} 2\n"), "{text}");
        assert!(text.contains("frontend_agent_request_events_sum 703\n"), "{text}");
    }
}
