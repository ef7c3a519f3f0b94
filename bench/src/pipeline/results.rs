//! What a pipeline run measured, step by step: what `results.json` holds and the report is
//! written from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One step's measurements.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    /// Offered, events per second.
    pub offered: u64,
    pub seconds: f64,
    /// Events each tier carried during the step: accepted by the agents, acknowledged by
    /// the live brokers, copied into analytics, committed to Parquet.
    pub tiers: [u64; 4],
    /// Each tier's backlog when the offered load stopped: agent, mirror, loader.
    pub backlog: [u64; 3],
    /// How long the pipeline took to drain after the step; `None`: not within --drain-max.
    pub drain_seconds: Option<f64>,
    /// Agent accept → visible in analytics: p50, p99, max (ms), and how many sampled.
    pub visible_ms: Option<Vec<i64>>,
    pub visible_samples: usize,
    /// Agent accept → committed in Parquet: p50, p99, max (ms).
    pub parquet_ms: Option<Vec<i64>>,
    /// Per process: CPU-seconds over the step and its drain, and peak resident bytes.
    pub processes: BTreeMap<String, ProcessUse>,
    /// Why the step was not kept up; empty if it was.
    pub shortfalls: Vec<String>,
}

impl Step {
    pub fn kept_up(&self) -> bool {
        self.shortfalls.is_empty()
    }

    /// Events per second through tier `i` (0 agents … 3 loader).
    pub fn rate(&self, i: usize) -> f64 {
        self.tiers[i] as f64 / self.seconds
    }

    /// CPU-seconds per million accepted events (= CPU-µs per event).
    pub fn cpu_per_million(&self, cpu_seconds: f64) -> f64 {
        cpu_seconds / (self.tiers[0].max(1) as f64 / 1e6)
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ProcessUse {
    pub cpu_seconds: f64,
    pub rss_peak_bytes: u64,
}

/// The audit service's verdicts over every window of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Verdicts {
    pub complete: u64,
    pub duplication: u64,
    pub loss: u64,
    pub open: u64,
}

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub date: String,
    pub machine: String,
    pub step_seconds: f64,
    pub loader_interval_seconds: f64,
    pub replication_factor: u32,
    pub steps: Vec<Step>,
    pub verdicts: Verdicts,
}

impl Run {
    /// The highest offered rate kept up.
    pub fn sustained(&self) -> Option<&Step> {
        self.steps.iter().filter(|s| s.kept_up()).max_by_key(|s| s.offered)
    }
}
