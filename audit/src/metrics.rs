//! `GET /metrics` (OpenMetrics, through `prometheus-client`): per topic and tier the events
//! missing and duplicated over decided windows, the events held back in windows without a
//! verdict and for how long, windows per verdict, and the service's own
//! counters, all read from the ledger and the readers' stats at scrape time; and the HTTP
//! requests by route and status.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use service::metrics::{HttpMetrics, Registry};

use crate::ledger::Verdict;
use crate::state::{Shared, lock};

/// The service's registry, and the layer that counts its HTTP requests.
pub(crate) fn register(shared: Arc<Shared>) -> (Arc<Registry>, HttpMetrics) {
    let mut registry = Registry::with_prefix("tributary_audit");
    let http = HttpMetrics::register(&mut registry);
    registry.register_collector(Box::new(Books(shared)));
    (Arc::new(registry), http)
}

struct Books(Arc<Shared>);

impl std::fmt::Debug for Books {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("audit books")
    }
}

type Row = (Vec<(&'static str, String)>, i64);

impl Collector for Books {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let shared = &self.0;
        let clock = shared.clock();
        let (mut missing, mut duplicate, mut windows): (Vec<Row>, Vec<Row>, Vec<Row>) =
            Default::default();
        let (mut held_events, mut held_seconds): (Vec<Row>, Vec<Row>) = Default::default();
        let mut unheard: Vec<Row> = Vec::new();
        {
            let ledger = lock(&shared.ledger);
            for (host, unheard_ms) in ledger.agents_heard(clock) {
                unheard.push((vec![("host", host)], unheard_ms / 1_000));
            }
            let tiers = ledger.active_tiers();
            let downstream = tiers.get(1..).unwrap_or_default();
            for topic in ledger.topics() {
                let reports = ledger.windows(topic, i64::MIN, i64::MAX, clock);
                for tier in downstream {
                    let tier = tier.as_str();
                    let lost: i64 = reports.iter().filter_map(|r| r.missing.get(tier)).sum();
                    let extra: i64 = reports.iter().filter_map(|r| r.duplicate.get(tier)).sum();
                    let held = reports.iter().filter_map(|r| r.held.get(tier));
                    let (events, longest_ms) = held.fold((0, 0), |(events, longest), h| {
                        (events + h.events, longest.max(h.held_ms))
                    });
                    let labels = vec![("topic", topic.to_owned()), ("tier", tier.to_owned())];
                    missing.push((labels.clone(), lost));
                    duplicate.push((labels.clone(), extra));
                    held_events.push((labels.clone(), events));
                    held_seconds.push((labels, longest_ms / 1_000));
                }
                for verdict in Verdict::ALL {
                    let n = reports.iter().filter(|r| r.verdict == verdict).count();
                    let labels =
                        vec![("topic", topic.to_owned()), ("verdict", verdict.as_str().to_owned())];
                    windows.push((labels, n as i64));
                }
            }
        }
        let gauges = [
            (
                "missing_events",
                "Events a tier lacks against the reference tier (accepted), summed over decided windows.",
                missing,
            ),
            (
                "duplicate_events",
                "Events a tier has beyond the reference tier (accepted), summed over decided windows.",
                duplicate,
            ),
            (
                "held_events",
                "Events a tier has not counted yet that the tier before it has, over windows without a verdict.",
                held_events,
            ),
            (
                "held_seconds",
                "How long a tier has held back the oldest of those events (0: none).",
                held_seconds,
            ),
            (
                "agent_unheard_seconds",
                "Since each agent's last audit record (agents publish every few seconds, counts or not).",
                unheard,
            ),
            ("windows", "Windows per topic and verdict.", windows),
        ];
        for (name, help, rows) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (labels, value) in &rows {
                ConstGauge::new(*value).encode(family.encode_family(labels)?)?;
            }
        }
        ConstGauge::new(i64::from(clock.caught_up)).encode(encoder.encode_descriptor(
            "caught_up",
            "1 once _audit and the live clusters were read to the end they had on start.",
            None,
            MetricType::Gauge,
        )?)?;
        let stats = &shared.stats;
        ConstCounter::new(stats.records_applied.load(Ordering::Relaxed)).encode(
            encoder.encode_descriptor(
                "records_applied",
                "_audit records taken into the ledger.",
                None,
                MetricType::Counter,
            )?,
        )?;
        ConstCounter::new(stats.read_errors.load(Ordering::Relaxed)).encode(
            encoder.encode_descriptor(
                "read_errors",
                "Failed fetches, registry reads and cluster scans (each retried).",
                None,
                MetricType::Counter,
            )?,
        )?;
        let rejected: Vec<(&'static str, u64)> =
            lock(&stats.records_rejected).iter().map(|(k, v)| (*k, *v)).collect();
        let mut family = encoder.encode_descriptor(
            "records_rejected",
            "_audit records not taken, by reason.",
            None,
            MetricType::Counter,
        )?;
        for (reason, n) in rejected {
            ConstCounter::new(n).encode(family.encode_family(&[("reason", reason)])?)?;
        }
        for (name, help, map) in [
            ("live_events", "Events counted in each live cluster since start.", &stats.live_events),
            (
                "live_unreadable",
                "Live messages without a readable event header.",
                &stats.live_unreadable,
            ),
        ] {
            let counts: Vec<(String, u64)> =
                lock(map).iter().map(|(k, v)| (k.clone(), *v)).collect();
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (cluster, n) in counts {
                ConstCounter::new(n).encode(family.encode_family(&[("cluster", cluster)])?)?;
            }
        }
        Ok(())
    }
}
