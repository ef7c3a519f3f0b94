//! What `/metrics` shows (OpenMetrics text, through `prometheus-client`): per source partition
//! the lag (log end − committed offset, `client::group::lag`), the messages, events and bytes
//! the target acknowledged, and the record age (ack time − `header.time` of the last copied
//! event); rates are Prometheus's `rate()` of the counters. The copy path only adds to atomics;
//! the page is built from them at scrape time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use service::metrics::Registry;

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
}

impl PartitionStats {
    fn new() -> PartitionStats {
        PartitionStats {
            messages: AtomicU64::new(0),
            events: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            record_age_ms: AtomicI64::new(UNKNOWN),
            lag_bytes: AtomicI64::new(UNKNOWN),
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
type Key = (String, String, i32);

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
        partition: i32,
    ) -> Arc<PartitionStats> {
        let mut partitions = self.partitions.lock().unwrap_or_else(|p| p.into_inner());
        let key = (source.to_owned(), topic.to_owned(), partition);
        Arc::clone(partitions.entry(key).or_insert_with(|| Arc::new(PartitionStats::new())))
    }

    /// Sets the lag of `source`'s partitions: those in `owned` to their value, the others to
    /// unknown (another mirror owns them now).
    pub(crate) fn set_lags(&self, source: &str, owned: &BTreeMap<(String, i32), i64>) {
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

    /// The registry `/metrics` serves: these stats, read at scrape time.
    pub(crate) fn registry(self: &Arc<Metrics>) -> Arc<Registry> {
        let mut registry = Registry::with_prefix("tributary_mirror");
        registry.register_collector(Box::new(Scrape(Arc::clone(self))));
        Arc::new(registry)
    }
}

struct Scrape(Arc<Metrics>);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mirror metrics")
    }
}

type Labels = [(&'static str, String); 3];
type StatsCounter = fn(&PartitionStats) -> &AtomicU64;

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let partitions: Vec<(Labels, Arc<PartitionStats>)> = {
            let partitions = self.0.partitions.lock().unwrap_or_else(|p| p.into_inner());
            partitions
                .iter()
                .map(|((source, topic, partition), stats)| {
                    let labels = [
                        ("source", source.clone()),
                        ("topic", topic.clone()),
                        ("partition", partition.to_string()),
                    ];
                    (labels, Arc::clone(stats))
                })
                .collect()
        };
        let known = |v: i64| (v != UNKNOWN).then_some(v);
        let mut family = encoder.encode_descriptor(
            "lag_bytes",
            "Log end minus committed offset of a source partition this mirror owns.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, stats) in &partitions {
            if let Some(lag) = known(stats.lag_bytes.load(Ordering::Relaxed)) {
                ConstGauge::new(lag).encode(family.encode_family(labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "record_age_seconds",
            "Acknowledgement time minus header.time of the last copied event.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, stats) in &partitions {
            if let Some(age) = known(stats.record_age_ms.load(Ordering::Relaxed)) {
                ConstGauge::new(age as f64 / 1000.0).encode(family.encode_family(labels)?)?;
            }
        }
        let counters: [(&str, &str, StatsCounter); 3] = [
            ("messages", "Messages acknowledged by the target (a wrapper counts once).", |s| {
                &s.messages
            }),
            (
                "events",
                "Events acknowledged by the target (each event in a wrapper counts).",
                |s| &s.events,
            ),
            ("bytes", "Bytes of the messages acknowledged by the target.", |s| &s.bytes),
        ];
        for (name, help, counter) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (labels, stats) in &partitions {
                let value = counter(stats).load(Ordering::Relaxed);
                ConstCounter::new(value).encode(family.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_line_per_partition_and_family() {
        let metrics = Arc::new(Metrics::default());
        let p = 3;
        let stats = metrics.partition("live-a", "page-view", p);
        stats.messages.fetch_add(5, Ordering::Relaxed);
        stats.bytes.fetch_add(1000, Ordering::Relaxed);
        metrics.set_lags("live-a", &BTreeMap::from([(("page-view".to_owned(), p), 42)]));
        let registry = metrics.registry();
        let text = service::metrics::encode(&registry);
        let labels = "{source=\"live-a\",topic=\"page-view\",partition=\"3\"}";
        assert!(text.contains(&format!("tributary_mirror_lag_bytes{labels} 42")), "{text}");
        assert!(text.contains(&format!("tributary_mirror_messages_total{labels} 5")), "{text}");
        assert!(text.contains(&format!("tributary_mirror_bytes_total{labels} 1000")), "{text}");
        assert!(!text.contains("record_age_seconds{"), "unknown gauges are left out: {text}");
        metrics.set_lags("live-a", &BTreeMap::new());
        let text = service::metrics::encode(&registry);
        assert!(!text.contains("lag_bytes{"), "lag of a partition given up");
    }
}
