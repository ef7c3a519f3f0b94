//! What `/metrics` shows (Prometheus text format): per source partition the lag (log end −
//! committed offset), messages/s and bytes/s, and record age (ack time − `header.time` of
//! the last copied event); and totals for the whole mirror.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::routing::get;
use cluster::PartitionId;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A gauge not known yet.
pub(crate) const UNKNOWN: i64 = -1;

/// Counters and gauges of one source partition.
pub(crate) struct PartitionStats {
    /// Framed messages the target acknowledged (a compressed wrapper counts once).
    pub(crate) messages: AtomicU64,
    /// Events in them (a wrapper counts each event inside).
    pub(crate) events: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) record_age_ms: AtomicI64,
    /// Log end − committed offset while this mirror owns the partition, else [`UNKNOWN`].
    pub(crate) lag_bytes: AtomicI64,
    rates: Mutex<Rates>,
}

#[derive(Clone, Copy)]
struct Rates {
    at: Instant,
    messages: u64,
    bytes: u64,
    messages_per_s: f64,
    bytes_per_s: f64,
}

impl PartitionStats {
    fn new() -> PartitionStats {
        PartitionStats {
            messages: AtomicU64::new(0),
            events: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            record_age_ms: AtomicI64::new(UNKNOWN),
            lag_bytes: AtomicI64::new(UNKNOWN),
            rates: Mutex::new(Rates {
                at: Instant::now(),
                messages: 0,
                bytes: 0,
                messages_per_s: 0.0,
                bytes_per_s: 0.0,
            }),
        }
    }
}

/// Totals of the whole mirror, for the launcher's summary; clones share them.
#[derive(Clone, Default)]
pub struct Totals(Arc<TotalCounters>);

#[derive(Default)]
struct TotalCounters {
    messages: AtomicU64,
    events: AtomicU64,
    bytes: AtomicU64,
}

impl Totals {
    /// Messages copied and acknowledged by the target (a compressed wrapper counts once).
    pub fn messages(&self) -> u64 {
        self.0.messages.load(Ordering::Relaxed)
    }

    /// Events copied and acknowledged by the target (each event inside a wrapper counts).
    pub fn events(&self) -> u64 {
        self.0.events.load(Ordering::Relaxed)
    }

    /// Bytes of the messages copied, as stored.
    pub fn bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, messages: u64, events: u64, bytes: u64) {
        self.0.messages.fetch_add(messages, Ordering::Relaxed);
        self.0.events.fetch_add(events, Ordering::Relaxed);
        self.0.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// `(source, topic, partition)`.
type Key = (String, String, PartitionId);

/// Every partition's stats, and the totals.
#[derive(Default)]
pub(crate) struct Metrics {
    partitions: Mutex<BTreeMap<Key, Arc<PartitionStats>>>,
    pub(crate) totals: Totals,
}

impl Metrics {
    pub(crate) fn partition(
        &self,
        source: &str,
        topic: &str,
        partition: PartitionId,
    ) -> Arc<PartitionStats> {
        let mut partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        let key = (source.to_owned(), topic.to_owned(), partition);
        Arc::clone(partitions.entry(key).or_insert_with(|| Arc::new(PartitionStats::new())))
    }

    /// Sets the lag of `source`'s partitions: those in `owned` to their value, the others to
    /// unknown (another mirror owns them now).
    pub(crate) fn set_lags(&self, source: &str, owned: &BTreeMap<(String, PartitionId), i64>) {
        let partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        for ((s, topic, partition), stats) in partitions.iter() {
            if s == source {
                let lag = owned.get(&(topic.clone(), *partition)).copied().unwrap_or(UNKNOWN);
                stats.lag_bytes.store(lag, Ordering::Relaxed);
            }
        }
        drop(partitions);
        for ((topic, partition), lag) in owned {
            self.partition(source, topic, *partition).lag_bytes.store(*lag, Ordering::Relaxed);
        }
    }

    /// Recomputes every partition's rates over the time since the last call.
    pub(crate) fn refresh_rates(&self) {
        let partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        for stats in partitions.values() {
            let mut rates = stats.rates.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let seconds = now.duration_since(rates.at).as_secs_f64().max(1e-3);
            let messages = stats.messages.load(Ordering::Relaxed);
            let bytes = stats.bytes.load(Ordering::Relaxed);
            rates.messages_per_s = (messages - rates.messages) as f64 / seconds;
            rates.bytes_per_s = (bytes - rates.bytes) as f64 / seconds;
            (rates.at, rates.messages, rates.bytes) = (now, messages, bytes);
        }
    }

    pub(crate) fn render(&self) -> String {
        let partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        let mut family =
            |name: &str,
             kind: &str,
             help: &str,
             value: &dyn Fn(&PartitionStats) -> Option<String>| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for ((source, topic, partition), stats) in partitions.iter() {
                    if let Some(v) = value(stats) {
                        let (source, topic) = (escape(source), escape(topic));
                        let _ = writeln!(
                            out,
                            "{name}{{source=\"{source}\",topic=\"{topic}\",partition=\"{partition}\"}} {v}"
                        );
                    }
                }
            };
        let known = |v: i64| (v != UNKNOWN).then(|| v.to_string());
        family(
            "mirror_lag_bytes",
            "gauge",
            "Log end minus committed offset of a source partition this mirror owns.",
            &|s| known(s.lag_bytes.load(Ordering::Relaxed)),
        );
        family(
            "mirror_messages_per_second",
            "gauge",
            "Messages acknowledged by the target per second, over the last refresh.",
            &|s| {
                Some(format!(
                    "{:.1}",
                    s.rates.lock().unwrap_or_else(|p| p.into_inner()).messages_per_s
                ))
            },
        );
        family(
            "mirror_bytes_per_second",
            "gauge",
            "Bytes acknowledged by the target per second, over the last refresh.",
            &|s| {
                Some(format!(
                    "{:.1}",
                    s.rates.lock().unwrap_or_else(|p| p.into_inner()).bytes_per_s
                ))
            },
        );
        family(
            "mirror_record_age_ms",
            "gauge",
            "Acknowledgement time minus header.time of the last copied event.",
            &|s| known(s.record_age_ms.load(Ordering::Relaxed)),
        );
        family(
            "mirror_messages_total",
            "counter",
            "Messages acknowledged by the target (a compressed wrapper counts once).",
            &|s| Some(s.messages.load(Ordering::Relaxed).to_string()),
        );
        family(
            "mirror_events_total",
            "counter",
            "Events acknowledged by the target (each event in a wrapper counts).",
            &|s| Some(s.events.load(Ordering::Relaxed).to_string()),
        );
        family(
            "mirror_bytes_total",
            "counter",
            "Bytes of the messages acknowledged by the target.",
            &|s| Some(s.bytes.load(Ordering::Relaxed).to_string()),
        );
        out
    }
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Serves `GET /metrics` on `listener` until `stop`.
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new().route("/metrics", get(move || async move { metrics.render() }));
    axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_line_per_partition_and_family() {
        let metrics = Metrics::default();
        let p = PartitionId { broker: 1, partition: 3 };
        let stats = metrics.partition("live-a", "page-view", p);
        stats.messages.fetch_add(5, Ordering::Relaxed);
        stats.bytes.fetch_add(1000, Ordering::Relaxed);
        metrics.set_lags("live-a", &BTreeMap::from([(("page-view".to_owned(), p), 42)]));
        metrics.refresh_rates();
        let text = metrics.render();
        let labels = "{source=\"live-a\",topic=\"page-view\",partition=\"1-3\"}";
        assert!(text.contains(&format!("mirror_lag_bytes{labels} 42")), "{text}");
        assert!(text.contains(&format!("mirror_messages_total{labels} 5")), "{text}");
        assert!(text.contains(&format!("mirror_bytes_total{labels} 1000")), "{text}");
        assert!(!text.contains("mirror_record_age_ms{"), "unknown gauges are left out: {text}");
        metrics.set_lags("live-a", &BTreeMap::new());
        assert!(!metrics.render().contains("mirror_lag_bytes{"), "lag of a partition given up");
    }
}
