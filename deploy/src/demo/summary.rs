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
    /// Rows committed to the loader's tables.
    pub loaded_rows: u64,
    /// Distinct `header.id`s among the loaded rows.
    pub distinct_ids_loaded: u64,
    pub windows: WindowVerdicts,
    /// The warehouse: an Iceberg table per topic, its SQL catalog in `catalog.db`.
    pub warehouse: PathBuf,
    pub dashboard_url: String,
    pub duration_s: f64,
}

impl Summary {
    /// A query of the page views' table that counts rows per day and hour.
    pub fn iceberg_query(&self) -> String {
        iceberg_query(&self.warehouse)
    }
}

/// Rows per day and hour of the `page-view` table of the warehouse at `root`, as an analyst
/// would ask: pyiceberg opens the table through its SQL catalog, DuckDB counts.
pub fn iceberg_query(root: &std::path::Path) -> String {
    let root = root.display();
    format!(
        "python3 -c \"import duckdb; from pyiceberg.catalog.sql import SqlCatalog; t = SqlCatalog('tributary', uri='sqlite:///{root}/catalog.db', warehouse='file://{root}').load_table('default.page-view').scan().to_arrow(); print(duckdb.sql('SELECT CAST(header.time AS DATE) AS day, hour(header.time) AS hour, count(*) AS events, count(DISTINCT header.id) AS ids FROM t GROUP BY ALL ORDER BY ALL'))\""
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
        writeln!(f, "  rows loaded into Iceberg      {:>10}", self.loaded_rows)?;
        writeln!(f, "  distinct event ids loaded     {:>10}", self.distinct_ids_loaded)?;
        let w = &self.windows;
        writeln!(
            f,
            "  audit windows: {} complete, {} loss, {} duplication, {} open",
            w.complete, w.loss, w.duplication, w.open
        )?;
        writeln!(f, "  dashboard: {}", self.dashboard_url)?;
        writeln!(
            f,
            "  Iceberg:   {} (catalog.db: pyiceberg's SqlCatalog)",
            self.warehouse.display()
        )?;
        writeln!(f, "  query it:  {}", self.iceberg_query())?;
        writeln!(f, "             (with pip install 'pyiceberg[sql-sqlite,pyarrow]' duckdb)")
    }
}
