//! What the demo prints at the end, and writes with `--summary-json`.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Audit verdicts of the closed windows, summed over topics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WindowVerdicts {
    pub complete: u64,
    pub loss: u64,
    pub duplication: u64,
    /// Windows still open (not closed + grace) when the summary was taken.
    pub open: u64,
}

/// The demo's outcome (issue 14's `--summary-json` shape, plus detail).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Events the agents accepted (durably spooled).
    pub accepted: u64,
    /// Events the live brokers acknowledged to the agents.
    pub acknowledged: u64,
    /// Messages the analytics brokers acknowledged to the mirror (`_audit` included; a
    /// compressed batch counts once).
    pub mirrored: u64,
    /// Events inside them: each event of a compressed batch counts (`_audit` records too).
    pub mirrored_events: u64,
    /// Rows committed to Parquet.
    pub loaded_rows: u64,
    /// Distinct `header.id`s among the loaded rows.
    pub distinct_ids_loaded: u64,
    pub windows: WindowVerdicts,
    /// Root of the Hive-layout Parquet output.
    pub parquet_root: PathBuf,
    pub dashboard_url: String,
    pub duration_s: f64,
}

impl Summary {
    /// A DuckDB query over the Parquet output that counts rows per topic, day and hour.
    pub fn duckdb_query(&self) -> String {
        duckdb_query(&self.parquet_root)
    }
}

/// Rows per `dt`/`hr` of one topic's Parquet under `root`, as an analyst would ask DuckDB.
pub fn duckdb_query(root: &std::path::Path) -> String {
    format!(
        "python3 -c \"import duckdb; print(duckdb.sql(\\\"SELECT dt, hr, count(*) AS events, count(DISTINCT header.id) AS ids FROM read_parquet('{}/page-view/*/*/*.parquet', hive_partitioning = true) GROUP BY ALL ORDER BY ALL\\\"))\"",
        root.display()
    )
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "── summary after {:.0} s ──", self.duration_s)?;
        writeln!(f, "  accepted by the agents        {:>10}", self.accepted)?;
        writeln!(f, "  acknowledged by live brokers  {:>10}", self.acknowledged)?;
        writeln!(
            f,
            "  mirrored into analytics       {:>10}  (with the audit's own records; {} messages as stored)",
            self.mirrored_events, self.mirrored
        )?;
        writeln!(f, "  rows loaded into Parquet      {:>10}", self.loaded_rows)?;
        writeln!(f, "  distinct event ids loaded     {:>10}", self.distinct_ids_loaded)?;
        let w = &self.windows;
        writeln!(
            f,
            "  audit windows: {} complete, {} loss, {} duplication, {} open",
            w.complete, w.loss, w.duplication, w.open
        )?;
        writeln!(f, "  dashboard: {}", self.dashboard_url)?;
        writeln!(f, "  Parquet:   {}", self.parquet_root.display())?;
        writeln!(f, "  query it:  {}", self.duckdb_query())
    }
}
