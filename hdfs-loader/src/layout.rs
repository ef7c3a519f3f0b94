//! Where things live in the store (docs/design.md, "Store layout"):
//!
//! ```text
//! {topic}/dt=YYYY-MM-DD/hr=HH/{topic}+{partition}+{start:020}+{end:020}.parquet
//! _commits/{topic}/{partition}/{start:020}.json
//! _staging/{topic}/{partition}/{run_id}/dt=YYYY-MM-DD/hr=HH/{file}.parquet
//! ```
//!
//! Staging is kept per partition, not per run (docs/design.md, "Store layout"), so that a run
//! lists and cleans only the staging of the partitions it loads.

use std::fmt;

use object_store::path::Path;

/// Prefix of the commit records.
pub const COMMITS: &str = "_commits";
/// Prefix of files written before their commit.
pub const STAGING: &str = "_staging";

/// Milliseconds in an hour.
pub const HOUR_MS: i64 = 3_600_000;

/// An hour of the Hive layout, from `header.time` in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hour {
    /// Start of the hour, ms since the epoch.
    pub start_ms: i64,
}

impl Hour {
    pub fn of(time_ms: i64) -> Hour {
        Hour { start_ms: time_ms.div_euclid(HOUR_MS) * HOUR_MS }
    }

    pub fn end_ms(self) -> i64 {
        self.start_ms + HOUR_MS
    }

    /// `(year, month, day, hour)` in UTC.
    pub fn civil(self) -> (i32, u32, u32, u32) {
        let t = service::clock::Utc::of_ms(self.start_ms);
        (t.year, t.month, t.day, t.hour)
    }

    /// `dt=YYYY-MM-DD/hr=HH`.
    pub fn dir(self) -> String {
        let (year, month, day, hour) = self.civil();
        format!("dt={year:04}-{month:02}-{day:02}/hr={hour:02}")
    }

    /// Reads `dt=YYYY-MM-DD/hr=HH` back (the two path segments).
    pub fn parse(dt: &str, hr: &str) -> Option<Hour> {
        let date = dt.strip_prefix("dt=")?;
        let hour: u32 = hr.strip_prefix("hr=")?.parse().ok()?;
        let mut parts = date.splitn(3, '-');
        let year: i32 = parts.next()?.parse().ok()?;
        let month: u32 = parts.next()?.parse().ok()?;
        let day: u32 = parts.next()?.parse().ok()?;
        let start_ms = service::clock::Utc::hour_start_ms(year, month, day, hour)?;
        Some(Hour { start_ms })
    }
}

impl fmt::Display for Hour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dir())
    }
}

/// The file name of a partition's rows of one hour in the commit `[start, end)`.
pub fn data_file_name(topic: &str, partition: i32, start: i64, end: i64) -> String {
    format!("{topic}+{partition}+{start:020}+{end:020}.parquet")
}

/// Where a committed data file lives.
pub fn data_path(topic: &str, hour: Hour, file_name: &str) -> Path {
    Path::from(format!("{topic}/{}/{file_name}", hour.dir()))
}

/// The prefix holding a partition's commit records.
pub fn commits_dir(topic: &str, partition: i32) -> Path {
    Path::from(format!("{COMMITS}/{topic}/{partition}"))
}

/// The commit record of the range starting at `start`.
pub fn commit_path(topic: &str, partition: i32, start: i64) -> Path {
    Path::from(format!("{COMMITS}/{topic}/{partition}/{start:020}.json"))
}

/// The start offset a commit record's path names, if it is one.
pub fn commit_start(path: &Path) -> Option<i64> {
    path.filename()?.strip_suffix(".json")?.parse().ok()
}

/// The prefix of a partition's staged files.
pub fn staging_dir(topic: &str, partition: i32) -> Path {
    Path::from(format!("{STAGING}/{topic}/{partition}"))
}

/// Where a run stages a data file before its commit.
pub fn staging_path(
    topic: &str,
    partition: i32,
    run_id: &str,
    hour: Hour,
    file_name: &str,
) -> Path {
    Path::from(format!("{STAGING}/{topic}/{partition}/{run_id}/{}/{file_name}", hour.dir()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_directories_follow_utc_calendar() {
        assert_eq!(Hour::of(0).dir(), "dt=1970-01-01/hr=00");
        // 2024-02-29T23:59:59.999Z, a leap day.
        assert_eq!(Hour::of(1_709_251_199_999).dir(), "dt=2024-02-29/hr=23");
        assert_eq!(Hour::of(1_709_251_200_000).dir(), "dt=2024-03-01/hr=00");
        assert_eq!(Hour::of(-1).dir(), "dt=1969-12-31/hr=23");
    }

    #[test]
    fn hour_directories_parse_back() {
        for ms in [0, 1_709_251_199_999, 1_764_547_200_000 + 5 * HOUR_MS, -1] {
            let hour = Hour::of(ms);
            let dir = hour.dir();
            let (dt, hr) = dir.split_once('/').unwrap();
            assert_eq!(Hour::parse(dt, hr), Some(hour), "{dir}");
        }
        assert_eq!(Hour::parse("dt=2024-13-01", "hr=00"), None);
        assert_eq!(Hour::parse("dt=2024-01-01", "hr=24"), None);
    }

    #[test]
    fn commit_paths_sort_by_start_offset() {
        let p = 3;
        let a = commit_path("t", p, 9);
        let b = commit_path("t", p, 10);
        assert!(a.as_ref() < b.as_ref());
        assert_eq!(commit_start(&b), Some(10));
        assert_eq!(a.as_ref(), "_commits/t/3/00000000000000000009.json");
    }
}
