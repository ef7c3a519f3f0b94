//! What `hdfs-loader serve --metrics HOST:PORT` shows: rounds by outcome and how long they
//! took, rows and commits, partitions that failed, and when the last round ran and the last
//! commit landed (an operator alerts when that stops moving).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use service::metrics::Registry;

use crate::RunSummary;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum Outcome {
    ok,
    failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: Outcome,
}

#[derive(Debug)]
pub(crate) struct Metrics {
    rounds: Family<OutcomeLabels, Counter>,
    round_seconds: Histogram,
    rows: Counter,
    commits: Counter,
    partition_errors: Counter,
    last_round: Gauge,
    last_commit: Gauge,
    interval: Gauge,
    registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::with_prefix("tributary_loader");
        let rounds = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "rounds",
            "Load rounds, by whether every partition loaded",
            rounds.clone(),
        );
        // 10 ms to about 45 minutes.
        let round_seconds = Histogram::new(exponential_buckets(0.01, 2.0, 18));
        registry.register("round_duration_seconds", "How long a round took", round_seconds.clone());
        let rows = Counter::default();
        registry.register("rows_committed", "Rows committed to Parquet", rows.clone());
        let commits = Counter::default();
        registry.register("commits", "Commit records written", commits.clone());
        let partition_errors = Counter::default();
        registry.register(
            "partition_errors",
            "Partition loads that failed",
            partition_errors.clone(),
        );
        let last_round = Gauge::default();
        registry.register(
            "last_round_timestamp_seconds",
            "When the last round ended (Unix time)",
            last_round.clone(),
        );
        let last_commit = Gauge::default();
        registry.register(
            "last_commit_timestamp_seconds",
            "When the last round that committed something ended (Unix time)",
            last_commit.clone(),
        );
        let interval = Gauge::default();
        registry.register(
            "interval_seconds",
            "The pause between two rounds (`interval`), for alerts on rounds that stop",
            interval.clone(),
        );
        Metrics {
            rounds,
            round_seconds,
            rows,
            commits,
            partition_errors,
            last_round,
            last_commit,
            interval,
            registry: Arc::new(registry),
        }
    }
}

impl Metrics {
    pub(crate) fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// Counts a round that took `elapsed`; `summary` is `None` for a round that failed whole.
    pub(crate) fn set_interval(&self, interval: Duration) {
        self.interval.set(i64::try_from(interval.as_secs()).unwrap_or(i64::MAX));
    }

    pub(crate) fn round(&self, summary: Option<&RunSummary>, elapsed: Duration) {
        let now_s = service::now_ms() / 1000;
        self.round_seconds.observe(elapsed.as_secs_f64());
        self.last_round.set(now_s);
        let ok = summary.is_some_and(|s| s.errors.is_empty());
        let outcome = if ok { Outcome::ok } else { Outcome::failed };
        self.rounds.get_or_create(&OutcomeLabels { outcome }).inc();
        let Some(summary) = summary else { return };
        let commits: u64 = summary.partitions.iter().map(|p| p.commits).sum();
        self.rows.inc_by(summary.rows);
        self.commits.inc_by(commits);
        self.partition_errors.inc_by(summary.errors.len() as u64);
        if commits > 0 {
            self.last_commit.set(now_s);
        }
    }
}
