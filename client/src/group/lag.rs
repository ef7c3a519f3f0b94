//! How far a reader is behind on a partition — one definition for every tool that shows it
//! (`trib groups describe`, the mirror's `/metrics`, the loader's `status`, the demo's drain):
//! log end − committed offset, in bytes. A partition with no committed offset counts from the
//! start of its log (what a new reader with `auto_offset_reset = smallest` has to read), and
//! [`Lag::from_start`] says so.

use std::collections::HashMap;

use cluster::{Registry, RegistryError};
use serde::Serialize;

use crate::{ConsumerError, SimpleConsumer, SimpleConsumerConfig};

/// The lag of one reader on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Lag {
    /// The next offset the reader consumes; `None` if it never committed.
    pub committed: Option<i64>,
    pub log_start: i64,
    pub log_end: i64,
}

impl Lag {
    /// Bytes from the committed offset (or the log start) to the log end; never negative.
    pub fn bytes(&self) -> i64 {
        (self.log_end - self.committed.unwrap_or(self.log_start)).max(0)
    }

    /// Whether the lag counts from the log start because nothing was committed.
    pub fn from_start(&self) -> bool {
        self.committed.is_none()
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LagError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
}

/// Reads partitions' log start and end from their brokers, keeping one connection per broker
/// address across calls (a connection that fails is dropped and opened again next time).
#[derive(Default)]
pub struct LogEnds {
    connections: HashMap<String, SimpleConsumer>,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl LogEnds {
    pub fn new() -> LogEnds {
        LogEnds::default()
    }

    /// Reads the ends over TLS.
    pub fn with_tls(tls: Option<std::sync::Arc<rustls::ClientConfig>>) -> LogEnds {
        LogEnds { connections: HashMap::new(), tls }
    }

    /// `(log_start, log_end)` of `topic`'s `partition` on the broker at `addr`.
    pub async fn ends(
        &mut self,
        addr: &str,
        topic: &str,
        partition: i32,
    ) -> Result<(i64, i64), ConsumerError> {
        if !self.connections.contains_key(addr) {
            let config = SimpleConsumerConfig { tls: self.tls.clone(), ..Default::default() };
            let consumer = SimpleConsumer::connect(addr, config).await?;
            self.connections.insert(addr.to_owned(), consumer);
        }
        let consumer = &self.connections[addr];
        let ends = async {
            let start = consumer.earliest_offset(topic, partition).await?;
            let end = consumer.latest_offset(topic, partition).await?;
            Ok((start, end))
        };
        let ends = ends.await;
        if ends.is_err() {
            self.connections.remove(addr);
        }
        ends
    }

    /// The lag of `group` on `topic`'s `partition`, read from the broker at `addr` and the
    /// group's committed offset in `registry`.
    pub async fn group_lag(
        &mut self,
        registry: &Registry,
        group: &str,
        addr: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Lag, LagError> {
        let (log_start, log_end) = self.ends(addr, topic, partition).await?;
        let committed = registry.offset(group, topic, partition).await?;
        Ok(Lag { committed, log_start, log_end })
    }
}

/// The lag of `group` on one partition, `None` while the partition has no live leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// What the group committed, also when the partition's leader is down.
    pub committed: Option<i64>,
    pub lag: Option<Lag>,
}

/// The lag of `group` on every partition of `topics` in the cluster of `registry`, with the
/// partitions whose leader is down (their lag unknown).
pub async fn group_lag(
    registry: &Registry,
    group: &str,
    topics: &[String],
) -> Result<Vec<PartitionLag>, LagError> {
    group_lag_with(&mut LogEnds::new(), registry, group, topics).await
}

/// [`group_lag`], reading the log ends through `ends` (its connections, its TLS).
pub async fn group_lag_with(
    ends: &mut LogEnds,
    registry: &Registry,
    group: &str,
    topics: &[String],
) -> Result<Vec<PartitionLag>, LagError> {
    let mut lags = Vec::new();
    for topic in topics {
        let offsets = registry.offsets(group, topic).await?;
        let mut partitions = registry.partitions(topic).await?;
        partitions.extend(offsets.keys().copied());
        partitions.sort();
        partitions.dedup();
        for partition in partitions {
            let committed = offsets.get(&partition).copied();
            let lag = match registry.leader(topic, partition).await? {
                Some((_, leader)) => {
                    let (log_start, log_end) = ends.ends(&leader.addr(), topic, partition).await?;
                    Some(Lag { committed, log_start, log_end })
                }
                None => None,
            };
            lags.push(PartitionLag { topic: topic.clone(), partition, committed, lag });
        }
    }
    Ok(lags)
}

/// Bytes `group` has yet to consume over every topic of the cluster of `registry`; `None`
/// while a partition's broker is not registered (its lag unknown).
pub async fn total_lag(registry: &Registry, group: &str) -> Result<Option<i64>, LagError> {
    total_lag_with(&mut LogEnds::new(), registry, group).await
}

/// [`total_lag`], reading the log ends through `ends` (its connections, its TLS).
pub async fn total_lag_with(
    ends: &mut LogEnds,
    registry: &Registry,
    group: &str,
) -> Result<Option<i64>, LagError> {
    let topics = registry.topics().await?;
    let lags = group_lag_with(ends, registry, group, &topics).await?;
    Ok(lags.iter().map(|p| p.lag.map(|lag| lag.bytes())).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncommitted_partition_counts_from_its_log_start() {
        let lag = Lag { committed: None, log_start: 100, log_end: 250 };
        assert_eq!((lag.bytes(), lag.from_start()), (150, true));
        let lag = Lag { committed: Some(200), log_start: 100, log_end: 250 };
        assert_eq!((lag.bytes(), lag.from_start()), (50, false));
        let behind_retention = Lag { committed: Some(300), log_start: 100, log_end: 250 };
        assert_eq!(behind_retention.bytes(), 0, "never negative");
    }
}
