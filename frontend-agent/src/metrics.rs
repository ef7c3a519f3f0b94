//! The agent's counters, kept with `prometheus-client` and served at `GET /metrics` beside
//! the HTTP requests by route and status.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use service::metrics::{HttpMetrics, Registry, size_buckets};

/// Every counter the agent keeps. Shared by the input paths, the spool and the shipper.
#[derive(Debug)]
pub struct Metrics {
    /// Events durably spooled and answered as accepted.
    pub accepted: Counter,
    /// Events refused (invalid, or in a request with an invalid one).
    pub rejected: Counter,
    /// Requests refused as invalid.
    pub rejected_requests: Counter,
    /// Requests refused because the spool was full (`block`).
    pub refused_full: Counter,
    /// Requests refused because the spool's filesystem had no room (503; nothing kept).
    pub refused_disk_full: Counter,
    /// HTTP requests refused because `max_concurrent_requests` were in progress.
    pub refused_busy: Counter,
    /// Events written to the spool (replayed ones are not written again).
    pub spooled: Counter,
    /// Events acknowledged by a broker (each at most once).
    pub acknowledged: Counter,
    /// Events deleted unacknowledged by `drop-oldest`.
    pub dropped: Counter,
    /// Events sent again after a failed batch: each may reach the brokers twice.
    pub resent: Counter,
    /// Failed shipping attempts (a broker outage shows as a run of these).
    pub ship_failures: Counter,
    /// Audit records published to `_audit`.
    pub audit_published: Counter,
    /// Bytes of the spool's segment files.
    pub spool_bytes: Gauge,
    /// The spool's bound, `spool_max_bytes`.
    pub spool_max_bytes: Gauge,
    /// Events accepted and not yet acknowledged (nor dropped).
    pub unacknowledged: Gauge,
    /// When the oldest of them was accepted, seconds since the epoch; 0 when there is none. A
    /// stuck agent shows as this standing still while time goes on.
    pub oldest_unacknowledged_timestamp: Gauge,
    /// Events per accepted request or library batch.
    pub request_events: Histogram,
    /// Events per batch read from the spool for shipping.
    pub ship_batch_events: Histogram,
    pub(crate) http: HttpMetrics,
    registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("tributary_agent");
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let counter = Counter::default();
            registry.register(name, help, counter.clone());
            counter
        };
        let r = &mut registry;
        let accepted = counter(r, "accepted", "Events durably spooled and accepted");
        let rejected = counter(r, "rejected", "Events rejected as invalid");
        let rejected_requests = counter(r, "rejected_requests", "Requests rejected as invalid");
        let refused_full =
            counter(r, "refused_full", "Requests refused because the spool was full");
        let refused_disk_full = counter(
            r,
            "refused_disk_full",
            "Requests refused because the spool's filesystem had no room",
        );
        let refused_busy = counter(
            r,
            "refused_busy",
            "HTTP requests refused because max_concurrent_requests were in progress",
        );
        let spooled = counter(r, "spooled", "Events written to the spool");
        let acknowledged = counter(r, "acknowledged", "Events acknowledged by a broker");
        let dropped =
            counter(r, "dropped", "Events dropped unacknowledged by spool_full=drop-oldest");
        let resent =
            counter(r, "resent", "Events sent again after a failed batch (possible duplicates)");
        let ship_failures = counter(r, "ship_failures", "Failed attempts to ship from the spool");
        let audit_published = counter(r, "audit_published", "Audit records published to _audit");
        let spool_bytes = Gauge::default();
        registry.register("spool_bytes", "Bytes of the spool's segment files", spool_bytes.clone());
        let spool_max_bytes = Gauge::default();
        registry.register("spool_max_bytes", "The spool's bound", spool_max_bytes.clone());
        let unacknowledged = Gauge::default();
        registry.register(
            "unacknowledged_events",
            "Events accepted and not yet acknowledged by a broker",
            unacknowledged.clone(),
        );
        let oldest_unacknowledged_timestamp = Gauge::default();
        registry.register(
            "oldest_unacknowledged_timestamp_seconds",
            "When the oldest unacknowledged event was accepted (0: none)",
            oldest_unacknowledged_timestamp.clone(),
        );
        let request_events = Histogram::new(size_buckets());
        registry.register(
            "request_events",
            "Events per accepted request or library batch",
            request_events.clone(),
        );
        let ship_batch_events = Histogram::new(size_buckets());
        registry.register(
            "ship_batch_events",
            "Events per batch read from the spool for shipping",
            ship_batch_events.clone(),
        );
        let http = HttpMetrics::register(&mut registry);
        Metrics {
            accepted,
            rejected,
            rejected_requests,
            refused_full,
            refused_disk_full,
            refused_busy,
            spooled,
            acknowledged,
            dropped,
            resent,
            ship_failures,
            audit_published,
            spool_bytes,
            spool_max_bytes,
            unacknowledged,
            oldest_unacknowledged_timestamp,
            request_events,
            ship_batch_events,
            http,
            registry: Arc::new(registry),
        }
    }
}

impl Metrics {
    /// The registry `/metrics` serves.
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// The page `/metrics` serves, in the OpenMetrics text format.
    pub fn render(&self) -> String {
        service::metrics::encode(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.accepted.inc_by(3);
        metrics.request_events.observe(3.0);
        metrics.request_events.observe(700.0);
        let text = metrics.render();
        assert!(text.contains("tributary_agent_accepted_total 3\n"), "{text}");
        assert!(text.contains("tributary_agent_request_events_bucket{le=\"4.0\"} 1\n"), "{text}");
        assert!(
            text.contains("tributary_agent_request_events_bucket{le=\"1024.0\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("tributary_agent_request_events_sum 703.0\n"), "{text}");
    }
}
