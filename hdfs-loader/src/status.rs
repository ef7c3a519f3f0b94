//! `status`: per topic and partition the committed offset, the log end, the lag and the last
//! commit time; per `dt`/`hr` the files there and whether every partition has committed
//! events past the hour's end (the hour is complete).

use std::collections::BTreeMap;
use std::sync::Arc;

use client::group::lag::{Lag, LogEnds};
use cluster::Registry;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::path::Path;
use serde::Serialize;

use crate::commit::PartitionCommits;
use crate::layout::{self, Hour};
use crate::table::Tables;
use crate::{LoadError, Output};

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub topics: Vec<TopicStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicStatus {
    pub topic: String,
    /// Rows committed over all partitions.
    pub rows: u64,
    /// The Iceberg table's current snapshot (`None` in the Hive layout, or before the first
    /// commit).
    pub snapshot: Option<i64>,
    /// Committed data files.
    pub files: usize,
    pub partitions: Vec<PartitionStatus>,
    pub hours: Vec<HourStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PartitionStatus {
    /// The partition number.
    pub partition: i32,
    /// Next offset to load; `None` before the first commit.
    pub committed_offset: Option<i64>,
    /// The broker's visible log end; `None` without a cluster or when the broker is away.
    pub log_end: Option<i64>,
    /// Bytes of log not loaded yet (`client::group::lag`: from the log start before the
    /// first commit).
    pub lag: Option<i64>,
    pub last_commit_ms: Option<i64>,
    pub rows: u64,
    /// Largest `header.time` committed.
    pub max_time_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HourStatus {
    pub dt: String,
    pub hr: String,
    pub files: usize,
    /// Every partition has committed an event at or after the hour's end.
    pub complete: bool,
}

/// The status of every topic with commits in `output` and, given the cluster, every topic of
/// the cluster not starting with `_` (log ends read from its brokers over `tls` if given).
pub async fn status(
    output: &Output,
    cluster: Option<&Registry>,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Status, LoadError> {
    let store = match output {
        Output::Hive(store) => store,
        Output::Iceberg(tables) => return tables_status(tables, cluster, tls).await,
    };
    let commits_root = Path::from(layout::COMMITS);
    let listing = store
        .list_with_delimiter(Some(&commits_root))
        .await
        .map_err(|source| LoadError::Store { path: commits_root.to_string(), source })?;
    let mut topics = Topics::new();
    for prefix in listing.common_prefixes {
        if let Some(topic) = prefix.filename() {
            topics.entry(topic.to_owned()).or_default();
        }
    }
    add_cluster_topics(cluster, &mut topics).await?;
    let mut result = Vec::new();
    for (topic, mut partitions) in topics {
        let dir = Path::from(format!("{}/{topic}", layout::COMMITS));
        let listing = store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|source| LoadError::Store { path: dir.to_string(), source })?;
        for prefix in listing.common_prefixes {
            if let Some(partition) = prefix.filename().and_then(|p| p.parse().ok()) {
                partitions.insert(partition, None);
            }
        }
        add_leaders(cluster, &topic, &mut partitions).await?;
        let mut last = BTreeMap::new();
        for &partition in partitions.keys() {
            let record = PartitionCommits::new(Arc::clone(store), &topic, partition).last().await?;
            if let Some(r) = record {
                last.insert(
                    partition,
                    Last {
                        end: r.end,
                        at_ms: r.committed_at_ms,
                        rows_total: r.rows_total,
                        max_time_ms: r.max_time_ms,
                    },
                );
            }
        }
        let prefix = Path::from(topic.as_str());
        let files: Vec<_> = store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|source| LoadError::Store { path: prefix.to_string(), source })?;
        let mut hours: BTreeMap<Hour, usize> = BTreeMap::new();
        for meta in files {
            let parts: Vec<_> = meta.location.parts().collect();
            if let [_, dt, hr, _] = parts.as_slice()
                && let Some(hour) = Hour::parse(dt.as_ref(), hr.as_ref())
            {
                *hours.entry(hour).or_default() += 1;
            }
        }
        let committed = Committed { snapshot: None, last, hours };
        result.push(topic_status(&topic, partitions, committed, tls.clone()).await);
    }
    Ok(Status { topics: result })
}

/// The status of every topic with a table and, given the cluster, every topic of it.
async fn tables_status(
    tables: &Tables,
    cluster: Option<&Registry>,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Status, LoadError> {
    let mut topics = Topics::new();
    for topic in tables.topics().await? {
        topics.entry(topic).or_default();
    }
    add_cluster_topics(cluster, &mut topics).await?;
    let mut result = Vec::new();
    for (topic, mut partitions) in topics {
        let state = tables.state(&topic).await?.unwrap_or_default();
        for &partition in state.covers.keys() {
            partitions.insert(partition, None);
        }
        add_leaders(cluster, &topic, &mut partitions).await?;
        let last = state
            .covers
            .iter()
            .map(|(&partition, c)| {
                let at_ms = state.last_commit_ms.get(&partition).copied().unwrap_or(0);
                let last = Last {
                    end: c.end,
                    at_ms,
                    rows_total: c.rows_total,
                    max_time_ms: c.max_time_ms,
                };
                (partition, last)
            })
            .collect();
        let mut hours: BTreeMap<Hour, usize> = BTreeMap::new();
        for file in &state.files {
            if let Some(hour) = file.hour {
                *hours.entry(hour).or_default() += 1;
            }
        }
        let committed = Committed { snapshot: state.snapshot, last, hours };
        result.push(topic_status(&topic, partitions, committed, tls.clone()).await);
    }
    Ok(Status { topics: result })
}

/// Per topic, its partitions and their leaders' addresses.
type Topics = BTreeMap<String, BTreeMap<i32, Option<String>>>;

/// Adds every topic of `cluster` not starting with `_`.
async fn add_cluster_topics(
    cluster: Option<&Registry>,
    topics: &mut Topics,
) -> Result<(), LoadError> {
    if let Some(cluster) = cluster {
        for topic in cluster.topics().await? {
            if !topic.starts_with('_') {
                topics.entry(topic).or_default();
            }
        }
    }
    Ok(())
}

/// Adds `cluster`'s partitions of `topic`, each with its leader's address.
async fn add_leaders(
    cluster: Option<&Registry>,
    topic: &str,
    partitions: &mut BTreeMap<i32, Option<String>>,
) -> Result<(), LoadError> {
    if let Some(cluster) = cluster {
        for partition in cluster.partitions(topic).await? {
            let leader = cluster.leader(topic, partition).await?;
            partitions.insert(partition, leader.map(|(_, info)| info.addr()));
        }
    }
    Ok(())
}

/// Where a partition's last commit left it.
struct Last {
    end: i64,
    at_ms: i64,
    rows_total: u64,
    max_time_ms: i64,
}

/// What is committed of a topic.
struct Committed {
    snapshot: Option<i64>,
    last: BTreeMap<i32, Last>,
    /// Files per hour.
    hours: BTreeMap<Hour, usize>,
}

async fn topic_status(
    topic: &str,
    partitions: BTreeMap<i32, Option<String>>,
    committed_state: Committed,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> TopicStatus {
    let mut statuses = Vec::new();
    let mut ends = LogEnds::with_tls(tls);
    for (partition, addr) in partitions {
        let last = committed_state.last.get(&partition);
        let committed = last.map(|r| r.end);
        let mut log_end = None;
        let mut lag = None;
        if let Some(addr) = addr {
            match ends.ends(&addr, topic, partition).await {
                Ok((log_start, end)) => {
                    log_end = Some(end);
                    lag = Some(Lag { committed, log_start, log_end: end }.bytes());
                }
                Err(e) => {
                    tracing::warn!(%topic, %partition, error = %e, "cannot ask the broker for the log end")
                }
            }
        }
        statuses.push(PartitionStatus {
            partition,
            committed_offset: committed,
            log_end,
            lag,
            last_commit_ms: last.map(|r| r.at_ms),
            rows: last.map_or(0, |r| r.rows_total),
            max_time_ms: last.map(|r| r.max_time_ms).filter(|t| *t != i64::MIN),
        });
    }
    let hours = committed_state.hours;
    let passed = |hour: Hour| {
        !statuses.is_empty()
            && statuses.iter().all(|p| p.max_time_ms.is_some_and(|t| t >= hour.end_ms()))
    };
    let hours: Vec<HourStatus> = hours
        .into_iter()
        .map(|(hour, files)| {
            let dir = hour.dir();
            let (dt, hr) = dir.split_once('/').expect("dt=…/hr=…");
            HourStatus {
                dt: dt[3..].to_owned(),
                hr: hr[3..].to_owned(),
                files,
                complete: passed(hour),
            }
        })
        .collect();
    TopicStatus {
        topic: topic.to_owned(),
        rows: statuses.iter().map(|p| p.rows).sum(),
        snapshot: committed_state.snapshot,
        files: hours.iter().map(|h| h.files).sum(),
        partitions: statuses,
        hours,
    }
}

impl Status {
    /// The table `hdfs-loader status` prints.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let show = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
        for topic in &self.topics {
            let _ =
                write!(out, "topic {}  rows {}  files {}", topic.topic, topic.rows, topic.files);
            match topic.snapshot {
                Some(snapshot) => writeln!(out, "  snapshot {snapshot}"),
                None => writeln!(out),
            }
            .expect("a string takes any write");
            let _ = writeln!(
                out,
                "  {:<10} {:>14} {:>14} {:>12} {:>10} {:>16}",
                "partition", "committed", "log end", "lag", "rows", "last commit ms"
            );
            for p in &topic.partitions {
                let _ = writeln!(
                    out,
                    "  {:<10} {:>14} {:>14} {:>12} {:>10} {:>16}",
                    p.partition,
                    show(p.committed_offset),
                    show(p.log_end),
                    show(p.lag),
                    p.rows,
                    show(p.last_commit_ms)
                );
            }
            for h in &topic.hours {
                let state = if h.complete { "complete" } else { "open" };
                let _ = writeln!(out, "  dt={} hr={}  files {:>4}  {state}", h.dt, h.hr, h.files);
            }
        }
        out
    }
}
